"""Request and response shapes of the Redis Agent Memory Server API, as its published
client (`agent-memory-client`) sends and parses them. Everything it sends is accepted;
anything else is a 422 naming the field (an unknown field, a wrong type, text no database
stores), as on /api/v1. Filters take both spellings of the operators: the client's
(`eq`, `in_`, `not_eq`, `not_in`; `any`, `all`, `none` for topics and entities) and the
server's (`eq`, `ne`, `any`, `all`; `gt`, `lt`, `between` for dates). Numbers and
booleans in a body are strict, as on /api/v1 (`true` is not a TTL, `"yes"` not a
boolean), but for `context_window_max`, which the client sends as text."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictBool, field_validator, model_validator

from memoryapp.core.limits import MAX_FACT_CHARS, MAX_RECORDS, MAX_TOKEN_BUDGET, MAX_TTL_SECONDS
from memoryapp.http.middleware import unstorable_at
from memoryapp.http.schemas import WHOLE, AmsType, InputSchema, Output, SessionKey, check_name

# Prefixes of the names memoryapp gives what it stores: a working-context item holding
# one key of a working memory's `data`, and the one holding its `context`.
DATA_ITEM_PREFIX = "data."
CONTEXT_ITEM = "context"
# Ids memoryapp gives what was written without one (through /api/v1): reserved, so a
# client's id never collides with them.
MESSAGE_ID_PREFIX = "memoryapp-message-"
MEMORY_ID_PREFIX = "memoryapp-memory-"
# A message may claim to be this far in the future (clock skew), as the client allows.
MAX_FUTURE = timedelta(seconds=300)
MAX_WORKING_MESSAGES = 10_000
# Each data key is a working-context item written with its history: a PUT holds the
# session's lock while it writes them.
MAX_DATA_KEYS = 100

Role = Literal["system", "user", "assistant", "tool"]


def _storable(value: str) -> str:
    """Text a database stores (no NUL, no lone surrogate): in a body the parser notes it
    (http/middleware.py), in a query parameter or a path only this sees it."""
    found = unstorable_at(value)
    if found is not None:
        raise ValueError(found[1])
    return value


# Names and ids, in a body, a query parameter (namespace, user_id, session_id) or a path.
Name = Annotated[str, Field(max_length=200), AfterValidator(_storable)]
Id = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_storable)]
Count = Annotated[int, Field(strict=True, ge=0), WHOLE]
Tags = Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], Field(max_length=100)]


def _in_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the date is out of range") from None


Timestamp = Annotated[datetime, AfterValidator(_in_utc)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or only spaces")
    return value


Text = Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS), AfterValidator(_not_blank)]


class MessageIn(InputSchema):
    role: Role
    # May be empty: an assistant message that only called tools, stored through /api/v1,
    # comes back to the client as it is.
    content: str
    id: Id
    created_at: Timestamp | None = None
    persisted_at: Timestamp | None = None
    discrete_memory_extracted: Literal["t", "f"] | None = None

    @field_validator("created_at")
    @classmethod
    def _not_in_the_future(cls, value: datetime | None) -> datetime | None:
        if value is not None and value > datetime.now(UTC) + MAX_FUTURE:
            raise ValueError("created_at is more than 300 seconds in the future")
        return value


class RecordIn(InputSchema):
    """A long-term memory record; `id` is the client's (a ULID, as its client makes)."""

    id: Id
    text: Text
    session_id: Name | None = None
    user_id: Name | None = None
    namespace: Name | None = None
    last_accessed: Timestamp | None = None
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    topics: Tags | None = None
    entities: Tags | None = None
    memory_hash: Name | None = None
    discrete_memory_extracted: Literal["t", "f"] | None = None
    memory_type: AmsType = "semantic"
    persisted_at: Timestamp | None = None
    extracted_from: Annotated[list[Id], Field(max_length=MAX_RECORDS)] | None = None
    event_date: Timestamp | None = None


def _distinct_ids(items: list, what: str) -> list:
    counted = Counter(item.id for item in items)
    if len(counted) != len(items):
        twice = sorted(i for i, n in counted.items() if n > 1)
        raise ValueError(f"each {what} id appears once; twice: {', '.join(twice[:5])}")
    return items


class StrategyIn(InputSchema):
    strategy: Literal["discrete", "summary", "preferences", "custom"] = "discrete"
    config: dict[str, Any] = {}


class WorkingMemoryIn(InputSchema):
    """A whole working memory (PUT replaces it: memoryapp stores the difference)."""

    messages: Annotated[list[MessageIn], Field(max_length=MAX_WORKING_MESSAGES)] = []
    memories: Annotated[list[RecordIn], Field(max_length=MAX_RECORDS)] = []
    data: dict[str, Any] | None = None
    context: str | None = None
    user_id: Name | None = None
    tokens: Count = 0
    session_id: SessionKey | None = None
    namespace: Name | None = None
    long_term_memory_strategy: StrategyIn | None = None
    ttl_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_TTL_SECONDS), WHOLE] | None = None
    last_accessed: Timestamp | None = None
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None

    @field_validator("messages")
    @classmethod
    def _messages_once(cls, value: list[MessageIn]) -> list[MessageIn]:
        return _distinct_ids(value, "message")

    @field_validator("memories")
    @classmethod
    def _memories_once(cls, value: list[RecordIn]) -> list[RecordIn]:
        return _distinct_ids(value, "memory")

    @field_validator("data")
    @classmethod
    def _data_storable(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(value) > MAX_DATA_KEYS:
            raise ValueError(f"data has {len(value)} keys; at most {MAX_DATA_KEYS}")
        for key, item in (value or {}).items():
            check_name(DATA_ITEM_PREFIX + key, f"data key {key[:40]!r} (as {DATA_ITEM_PREFIX}key)")
            if item is None:
                raise ValueError(f"data[{key[:40]!r}] is null: leave the key out to remove it")
        return value


class CreateRecordsIn(InputSchema):
    memories: Annotated[list[RecordIn], Field(max_length=MAX_RECORDS)]
    deduplicate: StrictBool = True

    @field_validator("memories")
    @classmethod
    def _once(cls, value: list[RecordIn]) -> list[RecordIn]:
        return _distinct_ids(value, "memory")


TagList = Annotated[
    list[Annotated[str, Field(max_length=200)]], Field(min_length=1, max_length=100)
]


class TagFilterIn(InputSchema):
    """A filter on a text field or on topics and entities, in either spelling."""

    eq: Name | None = None
    ne: Name | None = None
    not_eq: Name | None = None
    any: TagList | None = None
    in_: TagList | None = None
    all: TagList | None = None
    none: TagList | None = None
    not_in: TagList | None = None


TypeList = Annotated[list[AmsType], Field(min_length=1, max_length=3)]


class TypeFilterIn(InputSchema):
    eq: AmsType | None = None
    ne: AmsType | None = None
    not_eq: AmsType | None = None
    any: TypeList | None = None
    in_: TypeList | None = None
    all: TypeList | None = None
    none: TypeList | None = None
    not_in: TypeList | None = None


class DateFilterIn(InputSchema):
    eq: Timestamp | None = None
    ne: Timestamp | None = None
    gt: Timestamp | None = None
    gte: Timestamp | None = None
    lt: Timestamp | None = None
    lte: Timestamp | None = None
    between: Annotated[list[Timestamp], Field(min_length=2, max_length=2)] | None = None


Weight = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


class SearchIn(InputSchema):
    """A search of long-term memory. memoryapp ranks by full-text relevance (any word of
    `text` may match); the recency weights are accepted and do not change the order."""

    text: Annotated[str, Field(max_length=1000)] | None = None
    session_id: TagFilterIn | None = None
    namespace: TagFilterIn | None = None
    user_id: TagFilterIn | None = None
    topics: TagFilterIn | None = None
    entities: TagFilterIn | None = None
    memory_type: TypeFilterIn | None = None
    created_at: DateFilterIn | None = None
    last_accessed: DateFilterIn | None = None
    event_date: DateFilterIn | None = None
    distance_threshold: Weight | None = None
    limit: Annotated[int, Field(strict=True, ge=1, le=100), WHOLE] = 10
    offset: Annotated[int, Field(strict=True, ge=0, le=10_000), WHOLE] = 0
    recency_boost: StrictBool | None = None
    recency_semantic_weight: Weight | None = None
    recency_recency_weight: Weight | None = None
    recency_freshness_weight: Weight | None = None
    recency_novelty_weight: Weight | None = None
    recency_half_life_last_access_days: Weight | None = None
    recency_half_life_created_days: Weight | None = None
    server_side_recency: StrictBool | None = None


class EditRecordIn(InputSchema):
    """The fields to change; null or absent leaves a field as it is (as Redis's server
    does). New text replaces the fact: memoryapp's history keeps the old one."""

    text: Text | None = None
    topics: Tags | None = None
    entities: Tags | None = None
    memory_type: AmsType | None = None
    namespace: Name | None = None
    user_id: Name | None = None
    session_id: Name | None = None
    event_date: Timestamp | None = None

    @model_validator(mode="after")
    def _something(self) -> EditRecordIn:
        if not any(value is not None for value in self.model_dump().values()):
            raise ValueError("no field to change")
        return self


class PolicyIn(InputSchema):
    max_age_days: Weight | None = None
    max_inactive_days: Weight | None = None
    budget: Count | None = None
    memory_type_allowlist: list[AmsType] | None = None
    hard_age_multiplier: Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)] | None = (
        None
    )


class ForgetIn(InputSchema):
    policy: PolicyIn
    pinned_ids: Annotated[list[Id], Field(max_length=10_000)] | None = None


class PromptSessionIn(InputSchema):
    session_id: SessionKey
    namespace: Name | None = None
    user_id: Name | None = None
    model_name: Name | None = None
    # The client sends it as text ("4000"): read as a number.
    context_window_max: Annotated[int, Field(ge=1, le=MAX_TOKEN_BUDGET)] | None = None
    long_term_memory_strategy: StrategyIn | None = None


class PromptIn(InputSchema):
    query: Annotated[str, AfterValidator(_not_blank)]
    session: PromptSessionIn | None = None
    long_term_search: SearchIn | StrictBool | None = None

    @model_validator(mode="after")
    def _something_to_read(self) -> PromptIn:
        if self.session is None and not self.long_term_search:
            raise ValueError("give a session, a long_term_search, or both")
        return self


# --- answers --------------------------------------------------------------------------


class MessageOut(Output):
    id: str
    role: str
    content: str
    created_at: datetime
    persisted_at: datetime | None
    discrete_memory_extracted: str


class RecordOut(Output):
    id: str
    text: str
    session_id: str | None
    user_id: str | None
    namespace: str | None
    last_accessed: datetime
    created_at: datetime
    updated_at: datetime
    topics: list[str] | None
    entities: list[str] | None
    memory_hash: str | None
    discrete_memory_extracted: str
    memory_type: str
    persisted_at: datetime | None
    extracted_from: list[str] | None
    event_date: datetime | None


class RecordResultOut(RecordOut):
    dist: float


class StrategyOut(Output):
    strategy: str
    config: dict[str, Any]


class WorkingMemoryOut(Output):
    messages: list[MessageOut]
    memories: list[RecordOut]
    data: dict[str, Any]
    context: str | None
    user_id: str | None
    tokens: int
    session_id: str
    namespace: str | None
    long_term_memory_strategy: StrategyOut
    ttl_seconds: int | None
    last_accessed: datetime
    created_at: datetime
    updated_at: datetime
    context_percentage_total_used: float | None
    context_percentage_until_summarization: float | None
    new_session: bool | None
    unsaved: bool | None


class SessionListOut(Output):
    sessions: list[str]
    total: int


class AckOut(Output):
    status: str


class NowOut(Output):
    now: int


class RecordResultsOut(Output):
    memories: list[RecordResultOut]
    total: int
    next_offset: int | None


class ForgetOut(Output):
    scanned: int
    deleted: int
    deleted_ids: list[str]
    dry_run: bool


class TextContentOut(Output):
    type: str
    text: str


class PromptMessageOut(Output):
    role: str
    content: TextContentOut


class PromptOut(Output):
    messages: list[PromptMessageOut]
    long_term_memories: list[RecordResultOut] | None
