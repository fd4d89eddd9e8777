"""Export and import: a session (`GET /sessions/{key}/export`) or the whole agent (`GET
/agent/export`) as one JSON document, and `POST /import`, which recreates what such a
document holds under the key's agent, exactly (memoryapp/core/export.py says what is in
it and how an import writes it).

The document's schema is defined here once, strictly (every field typed and bounded as
the column that stores it, unknown fields refused): it is what the export answers and
what the import takes. An import is checked whole before anything is written: the schema
first (a 422 naming the field), then what a schema cannot say (numbering, totals,
references; a 422 naming the field too); a session key that is taken, or a memory
record id (memoryapp/ams) the agent has, is a 409 unless `?replace=true`. Exports
stream: the server holds one session at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Annotated, Any, Literal

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Query, Router, Status
from ninja.errors import HttpError, ValidationError
from pydantic import AfterValidator, Field, StrictBool

from memoryapp.api.schemas import (
    Confidence,
    ContextValue,
    MemoryType,
    Moment,
    NonNegativeInt,
    Role,
    SubtaskStatus,
)
from memoryapp.core import export
from memoryapp.core.limits import (
    MAX_INT,
    MAX_MESSAGES_SETTING,
    MAX_RECORDS,
    MAX_TOKEN_BUDGET,
    MAX_TTL_SECONDS,
)
from memoryapp.core.models import Session
from memoryapp.http.common import READ, READ_ONE, agent_of, errors, live_session
from memoryapp.http.schemas import (
    WHOLE,
    AmsType,
    InputSchema,
    Output,
    SessionKey,
    SessionKeyInPath,
    check_name,
    check_session_key,
)
from memoryapp.lib.extraction import kinds

router = Router(tags=["export"])

MAX_BIGINT = 2**63 - 1  # ids, and a session's token totals (bigint columns)


Id = Annotated[int, Field(strict=True, ge=1, le=MAX_BIGINT), WHOLE]
Positive = Annotated[int, Field(strict=True, ge=1, le=MAX_INT), WHOLE]
BigCount = Annotated[int, Field(strict=True, ge=0, le=MAX_BIGINT), WHOLE]
Weight = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def _text(limit: int, minimum: int = 0) -> Any:
    return Annotated[str, Field(min_length=minimum, max_length=limit)]


def _omitted() -> Any:
    """The default of a field that may be omitted: not a value, so the published schema
    shows none (a `null` default would read as a value the field takes)."""
    return Field(None, json_schema_extra=lambda schema: schema.pop("default", None))


def _item_name(value: str) -> str:
    return check_name(value, "a context item name")


ItemName = Annotated[str, AfterValidator(_item_name)]
Action = Literal["add", "update", "delete", "restore", "expire"]
Kind = Literal[kinds.KINDS]
FindingSource = Literal["extracted", "agent", "manual"]
OptionalBudget = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKEN_BUDGET), WHOLE] | None


class ExportAgent(InputSchema):
    """The agent's settings, as `GET /agent` answers them (an agent's export sets them on
    the agent it is imported into; the name and the derived default are not imported)."""

    name: _text(64)
    ttl_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_TTL_SECONDS), WHOLE]
    max_messages: Annotated[int, Field(strict=True, ge=1, le=MAX_MESSAGES_SETTING), WHOLE]
    token_budget: Annotated[int, Field(strict=True, ge=1, le=MAX_TOKEN_BUDGET), WHOLE]
    encoding: _text(64, 1)
    system_budget: OptionalBudget
    conversation_budget: OptionalBudget
    working_budget: OptionalBudget
    long_term_budget: OptionalBudget
    default_conversation_budget: NonNegativeInt


# --- history: what each change held before and after, by the kind of its target ---------------
# Fields may be omitted (a snapshot holds what its row held when it was written), never null.


class ExportMemorySnapshot(InputSchema):
    memory_type: MemoryType = _omitted()
    content: str = _omitted()
    confidence: Confidence = _omitted()
    status: Literal["active", "archived", "superseded"] = _omitted()
    superseded_by: Id | None = _omitted()


class ExportFindingSnapshot(InputSchema):
    tool: _text(200) = _omitted()
    query: str = _omitted()
    fact: str = _omitted()
    step: NonNegativeInt | None = _omitted()
    success: StrictBool = _omitted()
    file_path: _text(1000) = _omitted()
    source: FindingSource = _omitted()


class ExportContextItemSnapshot(InputSchema):
    key: ItemName = _omitted()
    value: ContextValue
    source: Literal["explicit", "inferred", "manual"] = _omitted()
    confidence: Confidence


class ExportMemoryEvent(InputSchema):
    action: Action
    before: ExportMemorySnapshot | None
    after: ExportMemorySnapshot | None
    actor: _text(200, 1)
    created_at: Moment


class ExportFindingEvent(InputSchema):
    action: Action
    before: ExportFindingSnapshot | None
    after: ExportFindingSnapshot | None
    actor: _text(200, 1)
    created_at: Moment


class ExportContextItemEvent(InputSchema):
    action: Action
    before: ExportContextItemSnapshot | None
    after: ExportContextItemSnapshot | None
    actor: _text(200, 1)
    created_at: Moment


# --- the conversation ----------------------------------------------------------------------


class ExportMessage(InputSchema):
    """A message as the history answers it (the last three: a client that names its
    messages, memoryapp/ams)."""

    seq: Positive
    role: Role
    content: str
    token_count: NonNegativeInt
    created_at: Moment
    name: _text(200, 1) = _omitted()
    tool_call_id: _text(200, 1) = _omitted()
    tool_calls: Annotated[list[dict[str, Any]], Field(min_length=1)] = _omitted()
    client_id: _text(200, 1) = _omitted()
    removed_at: Moment = _omitted()
    revisions: Annotated[list[dict[str, Any]], Field(min_length=1)] = _omitted()


class ExportToolCall(InputSchema):
    """A tool-call row: what the agent reported, and what extraction made of it."""

    id: Id
    tool: _text(200, 1)
    query: str
    success: StrictBool | None
    output_size: NonNegativeInt
    output_excerpt: str
    # The whole output while extraction has not used it yet (null once it has: only the
    # excerpt is kept then).
    output: str | None
    file_path: _text(1000)
    call_id: _text(200)
    details: dict[str, Any] | None
    kind: Literal[("", *kinds.KINDS)]
    fact: str
    fact_success: StrictBool | None
    finding: Id | None
    # Not run: `finding` already answered it (the agent said so with `known_from`).
    skipped: StrictBool
    created_at: Moment


class ExportExtraction(InputSchema):
    status: Literal["pending", "queued", "done", "failed"]
    attempts: NonNegativeInt
    last_error: str
    findings_added: NonNegativeInt
    context_items_set: NonNegativeInt
    created_at: Moment
    queued_at: Moment | None
    finished_at: Moment | None


class ExportTurn(InputSchema):
    """A turn as `GET /sessions/{key}/turns` lists it, with its tool-call rows and its
    extraction job."""

    iteration: Positive
    message_count: NonNegativeInt
    input_tokens: NonNegativeInt
    output_tokens: NonNegativeInt
    tool_calls: NonNegativeInt
    timestamp: Moment
    model: _text(200)
    usage_source: Literal["reported", "counted"]
    first_seq: Positive
    last_seq: Positive
    calls: list[ExportToolCall]
    extraction: ExportExtraction | None


# --- what the session learned ------------------------------------------------------------------


class ExportProvenance(InputSchema):
    turn: Positive | None
    message_seq: Positive | None
    tool_call_id: _text(200, 1) | None


class ExportFinding(InputSchema):
    """A finding as the API answers it (`group` and `stale` are derived again on import),
    with its identity, the tool-call row it last came from, and its history."""

    id: Id
    tool: _text(200, 1)
    kind: Kind
    query: str
    fact: str
    step: NonNegativeInt | None
    success: StrictBool
    file_path: _text(1000)
    source: FindingSource
    group: _text(100)
    stale: StrictBool
    details: dict[str, Any] | None
    provenance: ExportProvenance
    updated_at: Moment
    identity: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    created_at: Moment
    tool_call: Id | None
    history: list[ExportFindingEvent]


class ExportEvidenceRef(InputSchema):
    """What an inferred value rests on: a turn, the message, what was seen."""

    turn: NonNegativeInt
    seq: NonNegativeInt | None
    what: str


class ExportContextItem(InputSchema):
    key: ItemName
    value: ContextValue
    source: Literal["explicit", "inferred", "manual"]
    confidence: Confidence
    updated_at: Moment
    created_at: Moment
    evidence: list[ExportEvidenceRef]
    history: list[ExportContextItemEvent]


class ExportSubtask(InputSchema):
    id: Id
    title: _text(500, 1)
    status: SubtaskStatus
    position: NonNegativeInt
    dependencies: list[Id]
    created_at: Moment
    updated_at: Moment


def _each_once(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError("each value appears once")
    return values


Tag = _text(200, 1)
RecordTags = Annotated[list[Tag], Field(max_length=100), AfterValidator(_each_once)]


class ExportAmsRecord(InputSchema):
    """What the Redis Agent Memory Server API (memoryapp/ams) keeps beside a memory it
    wrote: the client's record (its id unique in the agent: a 409 when the agent has it,
    unless `replace=true`) and its topics and entities. Text fields are "" for none."""

    id: _text(200, 1)
    memory_type: AmsType
    namespace: _text(200)
    user_id: _text(200)
    session_id: _text(200)
    event_date: Moment | None
    created_at: Moment
    extracted_from: Annotated[list[_text(200, 1)], Field(max_length=MAX_RECORDS)] | None
    # The key of the session whose working memory lists the record (null: none, or one
    # not in the document).
    working_memory: SessionKey | None
    topics: RecordTags
    entities: RecordTags


class ExportOrigin(InputSchema):
    """Where an imported memory came from (memoryapp/core/moving.py): the system, its id
    there (one memory per system and id in an agent: a 409 when the agent has it, unless
    `replace=true`), what that system said of it, and when it came."""

    system: Literal["mem0", "letta", "ams"]
    source_id: _text(200, 1)
    detail: dict[str, Any]
    imported_at: Moment


class ExportMemory(InputSchema):
    """A memory as `GET /memories/{id}` answers it, with its own expiry, how often it was
    read into a context, and its history; `ams`, the record of a memory written through
    the Redis Agent Memory Server API (absent for the others); `origin`, where a memory
    imported from another memory system came from (absent for the others)."""

    id: Id
    memory_type: MemoryType
    content: str
    confidence: Confidence
    status: Literal["active", "archived", "superseded"]
    source: Literal["agent", "extracted", "manual"]
    created_at: Moment
    updated_at: Moment
    superseded_by: Id | None
    expires_at: Moment | None
    last_accessed_at: Moment | None
    access_count: NonNegativeInt
    history: list[ExportMemoryEvent]
    ams: ExportAmsRecord = _omitted()
    origin: ExportOrigin = _omitted()


# --- the extraction tally (memoryapp/lib/extraction/context.py): what later turns build on ---


class ExportWeight(InputSchema):
    w: Weight
    n: NonNegativeInt
    refs: list[ExportEvidenceRef]


class ExportLatest(InputSchema):
    value: str
    rank: NonNegativeInt
    n: Positive
    refs: list[ExportEvidenceRef]


class ExportEvidence(InputSchema):
    """The session's evidence tally. Its fields may be omitted, never null; a field the
    extractor starts keeping must be added here, or its exports cannot be imported (the
    round-trip test fails first)."""

    weights: dict[str, dict[str, ExportWeight]] = _omitted()
    latest: dict[str, ExportLatest] = _omitted()
    seen: list[str] = _omitted()
    writes: dict[str, NonNegativeInt] = _omitted()
    rewritten_all: NonNegativeInt = _omitted()
    issues: dict[str, str] = _omitted()
    turns: list[NonNegativeInt] = _omitted()
    decided: dict[str, tuple[str, Confidence]] = _omitted()


class ExportTotals(InputSchema):
    messages: NonNegativeInt
    tokens: BigCount
    input_tokens: BigCount
    output_tokens: BigCount
    turns: NonNegativeInt


class ExportSession(InputSchema):
    """A session as `GET /sessions/{key}` answers it, with everything under it."""

    key: SessionKey
    goal: _text(10_000)
    status: Literal["active", "paused", "completed", "failed"]
    metadata: dict[str, Any]
    ttl_seconds: Annotated[int, Field(strict=True, ge=1, le=MAX_TTL_SECONDS), WHOLE] | None
    created_at: Moment
    last_activity_at: Moment
    expires_at: Moment
    totals: ExportTotals
    evidence: ExportEvidence | None
    turns: list[ExportTurn]
    messages: list[ExportMessage]
    findings: list[ExportFinding]
    context_items: list[ExportContextItem]
    subtasks: list[ExportSubtask]
    memories: list[ExportMemory]


class ExportDocument(InputSchema):
    """A session's or an agent's export (`scope`). `memories`: the agent's memories that
    no session in the document produced (empty in a session's export)."""

    format: Literal["memoryapp-export"]
    # Strict: `true` is not the version 1 (a Literal would take it).
    version: Annotated[int, Field(strict=True, ge=1, le=1)]
    scope: Literal["session", "agent"]
    exported_at: Moment
    agent: ExportAgent
    sessions: list[ExportSession]
    memories: list[ExportMemory]


class ImportOut(Output):
    scope: str
    sessions: list[str]
    expired: list[str]
    memories: int
    extraction_queued: int


# --- the operations ---------------------------------------------------------------------------


def _streamed(pieces: Iterator[str]) -> StreamingHttpResponse:
    return StreamingHttpResponse(
        (piece.encode() for piece in pieces), content_type="application/json"
    )


@router.get("/sessions/{key}/export", response={200: ExportDocument, **READ_ONE})
def export_session(request: HttpRequest, key: SessionKeyInPath):
    """The session and everything under it, with the memories it produced and the history
    of every finding, context item and memory, as one document `POST /import` recreates
    exactly (in another agent, or on another server)."""
    session = live_session(request, key)
    try:
        return _streamed(export.stream_session(session))
    except Session.DoesNotExist:
        raise HttpError(404, "session not found") from None


@router.get("/agent/export", response={200: ExportDocument, **READ})
def export_agent(request: HttpRequest):
    """The whole agent: its settings, every live session (as `…/export` gives each), and
    its memories that none of them produced, with their history. Streamed a session at a
    time."""
    return _streamed(export.stream_agent(agent_of(request)))


def _new_key_problem(key: str, document: dict[str, Any]) -> str:
    """What is wrong with `?session=` for this document ("" if nothing): the session key
    rule first (a key holding a `/` would make a session no URL reaches), then whether
    the document is one session's export."""
    try:
        check_session_key(key)
    except ValueError as exc:
        return str(exc)
    if document["scope"] != "session":
        return "a new key is for a session's export; an agent's keeps its sessions' keys"
    if len(document["sessions"]) != 1:
        return f"a new key names one session; this document holds {len(document['sessions'])}"
    return ""


@router.post("/import", response={201: ImportOut, **errors(409, 413)})
def import_export(
    request: HttpRequest,
    payload: ExportDocument,
    session: str | None = Query(None, max_length=200),
    replace: bool = False,
):
    """Recreate what an export holds, in one transaction: its sessions with their
    history, timestamps and extraction state, their memories and the agent's own, and
    with an agent's export the agent's settings. `session` gives a session's export a new
    key. A live session with the same key is a 409 unless `replace=true`, which removes it
    first (its memories stay with the agent); so is a memory record whose client id the
    agent has (`replace=true` removes the agent's record first; its memory stays).
    Sessions already expired are not created (`expired` lists them; their memories are
    kept). Turns whose extraction ran are not extracted again."""
    document = payload.model_dump(mode="json", exclude_unset=True)
    if session is not None:
        problem = _new_key_problem(session, document)
        if problem:
            raise ValidationError(
                [{"type": "value_error", "loc": ["query", "session"], "msg": problem}]
            )
    try:
        result = export.import_document(
            agent_of(request), document, session_key=session, replace=replace
        )
    except export.ImportRefused as exc:
        raise ValidationError(
            [
                {"type": "value_error", "loc": ["body", "payload", *loc], "msg": message}
                for loc, message in exc.problems
            ]
        ) from None
    except export.ImportConflict as exc:
        if exc.records:
            raise HttpError(
                409,
                f"memory record {', '.join(exc.records[:10])} exists in this agent; import "
                "with replace=true to replace it",
            ) from None
        raise HttpError(
            409,
            f"session {', '.join(exc.keys)} exists; import with replace=true to replace it "
            "(or session=NEW_KEY for a session's export)",
        ) from None
    return Status(201, asdict(result))
