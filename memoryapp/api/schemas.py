"""Request and response shapes of the agent API. Everything an agent sends is validated
here, strictly: token numbers must be non-negative JSON integers (not strings, floats or
booleans), roles must be known, and every string has a length bound."""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field, StrictBool, field_validator

from memoryapp.core.limits import MAX_MESSAGES_SETTING, MAX_TOKEN_BUDGET, MAX_TTL_SECONDS


class InputSchema(Schema):
    """What an agent sends: a field the API does not know (a typo, most often) is a 422
    naming it, never silently dropped."""

    model_config = ConfigDict(extra="forbid")


# Integers are bounded to what their columns hold (PostgreSQL `integer`).
MAX_INT = 2_147_483_647
NonNegativeInt = Annotated[int, Field(strict=True, ge=0, le=MAX_INT)]
Role = Literal["system", "user", "assistant", "tool"]
MAX_MESSAGES_PER_TURN = 1000
MAX_TOOL_CALLS_PER_TURN = 500


class MessageIn(InputSchema):
    role: Role
    content: str | None = ""
    name: Annotated[str, Field(max_length=200)] | None = None
    tool_call_id: Annotated[str, Field(max_length=200)] | None = None
    tool_calls: list[dict[str, Any]] | None = None


class UsageIn(InputSchema):
    input_tokens: NonNegativeInt
    output_tokens: NonNegativeInt


MAX_TOOL_DETAILS_BYTES = 8192


class ToolCallIn(InputSchema):
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    query: str | dict[str, Any] | None = ""
    output: str | None = ""
    success: StrictBool | None = None
    file_path: Annotated[str, Field(max_length=1000)] | None = None
    # The id the assistant message gave this call (its `tool_calls[].id`, the tool
    # message's `tool_call_id`): links the finding to the message it came from.
    call_id: Annotated[str, Field(max_length=200)] | None = None
    # Structured result metadata a tool reports beside its text (Claude Code's
    # `toolUseResult`: line totals, match counts, exit codes), small by contract.
    details: dict[str, Any] | None = None

    @field_validator("details")
    @classmethod
    def _details_bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            size = len(json.dumps(value, ensure_ascii=False, default=str))
            if size > MAX_TOOL_DETAILS_BYTES:
                raise ValueError(
                    f"details has {size} characters as JSON; at most {MAX_TOOL_DETAILS_BYTES}"
                )
        return value


class TurnIn(InputSchema):
    messages: Annotated[list[MessageIn], Field(min_length=1, max_length=MAX_MESSAGES_PER_TURN)]
    usage: UsageIn | None = None
    tool_calls: Annotated[list[ToolCallIn], Field(max_length=MAX_TOOL_CALLS_PER_TURN)] = []
    model: Annotated[str, Field(max_length=200)] | None = None
    # When the model call happened (imported transcripts); default: when it is stored.
    timestamp: datetime | None = None

    @field_validator("timestamp")
    @classmethod
    def _timestamp_not_future(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        if value > datetime.now(UTC) + timedelta(days=1):
            raise ValueError("timestamp is more than a day in the future")
        return value


class TotalsOut(Schema):
    messages: int
    tokens: int
    input_tokens: int
    output_tokens: int
    turns: int


class SessionOut(Schema):
    key: str
    goal: str
    status: str
    metadata: dict[str, Any]
    ttl_seconds: int | None
    created_at: datetime
    last_activity_at: datetime
    expires_at: datetime
    totals: TotalsOut


class SessionPage(Schema):
    items: list[SessionOut]
    next_cursor: str | None


class SessionIn(InputSchema):
    goal: Annotated[str, Field(max_length=10_000)] | None = None
    status: Literal["active", "paused", "completed", "failed"] | None = None
    ttl_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_TTL_SECONDS)] | None = None
    metadata: dict[str, Any] | None = None


class TurnOut(Schema):
    iteration: int
    first_seq: int
    last_seq: int
    token_counts: list[int]
    session: SessionOut


class HistoryMessageOut(Schema):
    seq: int
    role: str
    content: str
    token_count: int
    created_at: datetime
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class SummaryOut(Schema):
    text: str
    covers_through_seq: int
    stale: bool
    error: str | None = None


class HistoryOut(Schema):
    messages: list[HistoryMessageOut]
    token_count: int
    pruned_count: int
    pruned_tokens: int
    summary: SummaryOut | None = None
    max_messages: int
    max_tokens: int


class TurnMetaOut(Schema):
    iteration: int
    message_count: int
    input_tokens: int
    output_tokens: int
    tool_calls: int
    timestamp: datetime
    model: str
    usage_source: str
    first_seq: int
    last_seq: int


class TurnPage(Schema):
    items: list[TurnMetaOut]
    next_cursor: str | None


class AgentOut(Schema):
    name: str
    ttl_seconds: int
    max_messages: int
    token_budget: int
    encoding: str
    system_budget: int | None
    conversation_budget: int | None
    working_budget: int | None
    long_term_budget: int | None
    default_conversation_budget: int


OptionalBudget = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKEN_BUDGET)] | None


class AgentPatch(InputSchema):
    ttl_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_TTL_SECONDS)] | None = None
    max_messages: Annotated[int, Field(strict=True, ge=1, le=MAX_MESSAGES_SETTING)] | None = None
    token_budget: Annotated[int, Field(strict=True, ge=1, le=MAX_TOKEN_BUDGET)] | None = None
    encoding: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    system_budget: OptionalBudget = None
    conversation_budget: OptionalBudget = None
    working_budget: OptionalBudget = None
    long_term_budget: OptionalBudget = None

    @field_validator("ttl_seconds", "max_messages", "token_budget", "encoding", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("may be omitted but not null")
        return value


class HealthOut(Schema):
    status: str
    database: dict[str, Any]
    broker: dict[str, Any]


class ErrorOut(Schema):
    detail: Any


def check_name(value: str, what: str) -> str:
    """The one rule for session keys and item names: 1 to 200 characters, not `.` or
    `..` (a link to them would read as a path segment), and none of the characters that
    hide or reorder text: control (C0, DEL, C1 such as U+0085), format (U+200B–U+200F,
    U+2028/U+2029 line and paragraph separators, bidirectional overrides, a BOM), or
    surrogates. A '/' never reaches here (the URL path converter does not match it)."""
    if not value or len(value) > 200:
        raise ValueError(f"{what} has 1 to 200 characters")
    if value in (".", ".."):
        raise ValueError(f"{what} cannot be '.' or '..'")
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise ValueError(
                f"{what} must not contain control, format or line-separator characters "
                f"(found U+{ord(ch):04X})"
            )
    return value


def check_session_key(key: str) -> str:
    return check_name(key, "a session key")
