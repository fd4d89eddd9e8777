"""Request and response shapes of the agent API. Everything an agent sends is validated
here, strictly: token numbers must be non-negative JSON integers (not strings, floats or
booleans), roles must be known, and every string has a length bound."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    field_validator,
)

from memoryapp.core import shapes
from memoryapp.core.limits import (
    MAX_FACT_CHARS,
    MAX_INT,
    MAX_MESSAGES_PER_TURN,
    MAX_MESSAGES_SETTING,
    MAX_TOKEN_BUDGET,
    MAX_TTL_SECONDS,
)
from memoryapp.http.schemas import WHOLE, InputSchema, Output, SessionKey, output_of
from memoryapp.lib import tokens

NonNegativeInt = Annotated[int, Field(strict=True, ge=0, le=MAX_INT), WHOLE]
Role = Literal["system", "user", "assistant", "tool"]
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
    # The agent did not run this call: this finding of the session already answered it
    # (what `findings/check` said). Counted in the session's stats as a call avoided.
    known_from: (
        Annotated[
            int,
            Field(
                strict=True,
                ge=1,
                le=MAX_INT,
                description="the id of a finding of this session (another id is a 422)",
            ),
            WHOLE,
        ]
        | None
    ) = None

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


EARLIEST_TIMESTAMP = datetime(1970, 1, 1, tzinfo=UTC)


def _time_as_text(value: Any) -> Any:
    # A number would be read as seconds since 1970: 5 stored as 1970-01-01T00:00:05.
    if value is not None and not isinstance(value, str):
        raise ValueError("a time is an ISO 8601 string, like 2026-01-31T12:00:00Z")
    return value


def _time_in_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        # In UTC: PostgreSQL refuses offsets beyond ±15:59, and year 1 at +01:00 is
        # before the first day a datetime holds.
        value = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("time is out of range") from None
    if value < EARLIEST_TIMESTAMP:
        raise ValueError("time is before 1970")
    return value


def _not_in_future(value: datetime | None) -> datetime | None:
    if value is not None and value > datetime.now(UTC) + timedelta(days=1):
        raise ValueError("time is more than a day in the future")
    return value


# A time given as ISO 8601 text, stored in UTC, not before 1970 (the one rule for times
# an agent sends: a turn's, and every time in an export document).
Moment = Annotated[datetime, BeforeValidator(_time_as_text), AfterValidator(_time_in_utc)]


class TurnIn(InputSchema):
    messages: Annotated[list[MessageIn], Field(min_length=1, max_length=MAX_MESSAGES_PER_TURN)]
    usage: UsageIn | None = None
    tool_calls: Annotated[list[ToolCallIn], Field(max_length=MAX_TOOL_CALLS_PER_TURN)] = []
    model: Annotated[str, Field(max_length=200)] | None = None
    # When the model call happened (imported transcripts); default: when it is stored.
    timestamp: Annotated[
        datetime | None,
        Field(
            description="when the model call happened, from 1970 to a day from now (else a "
            "422); default: when the turn is stored"
        ),
        BeforeValidator(_time_as_text),
        AfterValidator(_time_in_utc),
        AfterValidator(_not_in_future),
    ] = None


TotalsOut = output_of(shapes.Totals, "TotalsOut")

SessionOut = output_of(shapes.SessionSummary, "SessionOut")

EntriesOut = output_of(shapes.Entries, "EntriesOut")

AverageTurnTokensOut = output_of(shapes.AverageTurnTokens, "AverageTurnTokensOut")

SessionStatsOut = output_of(shapes.SessionStats, "SessionStatsOut")


class SessionPage(Output):
    items: list[SessionOut]
    next_cursor: str | None


class SessionIn(InputSchema):
    goal: Annotated[str, Field(max_length=10_000)] | None = None
    status: Literal["active", "paused", "completed", "failed"] | None = None
    ttl_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_TTL_SECONDS), WHOLE] | None = None
    metadata: dict[str, Any] | None = None


TurnOut = output_of(shapes.TurnStored, "TurnOut")

HistoryMessageOut = output_of(shapes.HistoryMessage, "HistoryMessageOut")

SummaryOut = output_of(shapes.Summary, "SummaryOut")

# The API adds the summary of what was pruned and the limits it applied.
HistoryOut = output_of(
    shapes.History,
    "HistoryOut",
    summary=(SummaryOut | None, None),
    max_messages=(int, ...),
    max_tokens=(int, ...),
)


class MessagePage(Output):
    items: list[HistoryMessageOut]
    next_cursor: str | None


class TurnMetaOut(Output):
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


class TurnPage(Output):
    items: list[TurnMetaOut]
    next_cursor: str | None


class AgentOut(Output):
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


OptionalBudget = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKEN_BUDGET), WHOLE] | None


def _loadable_encodings(schema: dict[str, Any]) -> None:
    """The encodings this server can load, as the schema's enum: asked when the OpenAPI
    document is built, not at import (trying them loads each tokenizer)."""
    schema["enum"] = list(tokens.loadable_encodings())


class AgentPatch(InputSchema):
    # May be omitted, never null (the budgets below take null: "use the default share").
    ttl_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_TTL_SECONDS), WHOLE] = None
    max_messages: Annotated[int, Field(strict=True, ge=1, le=MAX_MESSAGES_SETTING), WHOLE] = None
    token_budget: Annotated[int, Field(strict=True, ge=1, le=MAX_TOKEN_BUDGET), WHOLE] = None
    # The schema lists the encodings this server can load; any other is a 422.
    encoding: Annotated[
        str,
        Field(
            min_length=1,
            max_length=64,
            json_schema_extra=_loadable_encodings,
            description="a tokenizer this server can load",
        ),
    ] = None
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

    @field_validator("encoding")
    @classmethod
    def _loadable(cls, value: str) -> str:
        if value not in tokens.loadable_encodings():
            loadable = ", ".join(tokens.loadable_encodings())
            raise ValueError(f"unknown encoding {value!r}: this server loads {loadable}")
        return value


class HealthOut(Output):
    status: str
    database: dict[str, Any]
    broker: dict[str, Any]


# --- context and working context ---------------------------------------------------------

Confidence = Annotated[float, Field(strict=True, ge=0.0, le=1.0, allow_inf_nan=False)]


def _never_null(value: Any) -> Any:
    if value is None:
        raise ValueError("a working-context value is never null: DELETE the item to remove it")
    return value


# A working-context value: any JSON but null (an item without a value is deleted).
ContextValue = Annotated[
    Any, Field(json_schema_extra={"not": {"type": "null"}}), AfterValidator(_never_null)
]


class ContextItemIn(InputSchema):
    value: ContextValue
    source: Literal["explicit", "inferred"] = "explicit"
    confidence: Confidence = 1.0


ContextItemOut = output_of(shapes.ContextItemShape, "ContextItemOut")


class ContextItemList(Output):
    items: list[ContextItemOut]


WorkingItemOut = output_of(shapes.WorkingItem, "WorkingItemOut")

TokenCountsOut = output_of(shapes.TokenCounts, "TokenCountsOut")

BudgetOut = output_of(shapes.ContextBudget, "BudgetOut")

CutOut = output_of(shapes.Cut, "CutOut")

# --- findings -----------------------------------------------------------------------------

MAX_CHECK_ARGUMENTS_CHARS = 256 * 1024


class FindingIn(InputSchema):
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    query: Annotated[str, Field(max_length=MAX_FACT_CHARS)] = ""
    fact: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)]
    step: Annotated[int, Field(strict=True, ge=0, le=MAX_INT), WHOLE] | None = None
    success: StrictBool = True
    file_path: Annotated[str, Field(max_length=1000)] = ""


class FindingCheckIn(InputSchema):
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    # The call's text, or the tool's own arguments (an edit's or a write's can be large).
    query: str | dict[str, Any] = ""

    @field_validator("query")
    @classmethod
    def _bounded(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        size = len(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        if size > MAX_CHECK_ARGUMENTS_CHARS:
            raise ValueError(f"query has {size} characters; at most {MAX_CHECK_ARGUMENTS_CHARS}")
        return value


ProvenanceOut = output_of(shapes.Provenance, "ProvenanceOut")

FindingOut = output_of(shapes.FindingShape, "FindingOut")


class FindingPage(Output):
    items: list[FindingOut]
    next_cursor: str | None


class FindingRecorded(Output):
    created: bool
    finding: FindingOut


RelatedFindingOut = output_of(shapes.RelatedFinding, "RelatedFindingOut")

FindingCheckOut = output_of(shapes.FindingCheck, "FindingCheckOut")


# --- long-term memories -------------------------------------------------------------------

MemoryType = Literal["fact", "decision", "preference", "convention", "lesson"]


class MemoryIn(InputSchema):
    content: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)]
    memory_type: MemoryType = "fact"
    confidence: Confidence = 0.8
    session: SessionKey | None = None


class MemoryPatch(InputSchema):
    """Fields may be omitted, never null."""

    content: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)] = None
    memory_type: MemoryType = None
    confidence: Confidence = None


WhyOut = output_of(shapes.WhyShape, "WhyOut")

MemoryOut = output_of(shapes.MemoryShape, "MemoryOut")

MemoryHit = output_of(shapes.RecalledMemory, "MemoryHit")


class MemoryDetail(MemoryOut):
    superseded_by: int | None


class MemoryRevised(MemoryOut):
    supersedes: int | None


class MemoryPage(Output):
    items: list[MemoryHit]
    next_cursor: str | None


class MemoryRecorded(Output):
    created: bool
    memory: MemoryOut


class MemoryEventOut(Output):
    action: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    actor: str
    created_at: datetime


class MemoryHistoryOut(Output):
    items: list[MemoryEventOut]


ContextOut = output_of(shapes.Context, "ContextOut")

# --- memory tools -------------------------------------------------------------------------


class RememberArgs(InputSchema):
    content: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)]
    memory_type: MemoryType = "fact"
    confidence: Confidence = 0.8


class RecallArgs(InputSchema):
    query: Annotated[str, Field(min_length=1, max_length=1000)]
    memory_type: MemoryType = None
    limit: Annotated[int, Field(strict=True, ge=1, le=20), WHOLE] = 5


class ForgetArgs(InputSchema):
    memory_id: Annotated[int, Field(strict=True, ge=1, le=MAX_INT), WHOLE]
    reason: Annotated[str, Field(max_length=500)] = ""


class MemoryToolCallIn(InputSchema):
    name: Literal["remember", "recall", "forget"]
    arguments: dict[str, Any] = {}
    session: SessionKey | None = None


class ToolResultOut(Output):
    ok: bool
    result: str
    memory: MemoryOut | None = None
    memories: list[MemoryHit] | None = None


# --- search -------------------------------------------------------------------------------


class HighlightOut(Output):
    text: str
    match: bool


class SearchHitOut(Output):
    kind: Literal["message", "finding", "memory"]
    id: int
    rank: float
    session: str | None
    seq: int | None
    role: str | None
    tool: str | None
    memory_type: str | None
    status: str | None
    snippet: str
    highlights: list[HighlightOut]


class SearchPage(Output):
    items: list[SearchHitOut]
    next_cursor: str | None


# --- session state: subtasks --------------------------------------------------------------

SubtaskStatus = Literal["pending", "in_progress", "done", "blocked"]


class SubtaskIn(InputSchema):
    title: Annotated[str, Field(min_length=1, max_length=500)]
    status: SubtaskStatus = "pending"
    dependencies: Annotated[
        list[Annotated[int, Field(strict=True, ge=1, le=MAX_INT), WHOLE]],
        Field(max_length=50, description="ids of this session's subtasks (another id is a 422)"),
    ] = []


class SubtaskPatch(InputSchema):
    """Fields may be omitted, never null."""

    title: Annotated[str, Field(min_length=1, max_length=500)] = None
    status: SubtaskStatus = None


class SubtaskOut(Output):
    id: int
    title: str
    status: str
    position: int
    dependencies: list[int]


class SubtaskList(Output):
    goal: str
    items: list[SubtaskOut]
