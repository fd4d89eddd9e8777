"""Memory-engine endpoints: context assembly, working context, findings, long-term
memories, memory tools, search. Thin views over memoryapp.core."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from django.db import transaction
from django.db.models import F
from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Status
from ninja.errors import HttpError
from pydantic import Field, StrictBool, ValidationError, field_validator

from agents import tools as memory_tools
from memoryapp.api.schemas import InputSchema, check_name, check_session_key
from memoryapp.core import search as fulltext
from memoryapp.core.context import assemble_context, finding_dict, memory_dict
from memoryapp.core.limits import MAX_FACT_CHARS, MAX_TOKEN_BUDGET
from memoryapp.core.models import ContextItem, Finding, Memory, MemoryEvent, Session, Subtask
from memoryapp.lib import prompt as fmt
from memoryapp.lib import tokens

router = Router()

Confidence = Annotated[float, Field(strict=True, ge=0.0, le=1.0, allow_inf_nan=False)]
MemoryType = Literal["fact", "decision", "preference", "convention", "lesson"]
MAX_PAGE = 200


# --- helpers ---------------------------------------------------------------------------


def _agent(request: HttpRequest):
    return request.auth.agent


def _actor(request: HttpRequest) -> str:
    return f"agent:{_agent(request).name}"


def _live_session(
    request: HttpRequest, key: str, *, lock: bool = False, missing_ok: bool = False
) -> Session | None:
    """The key's live session; absent or expired is a 404 (or None with `missing_ok`)."""
    try:
        key = check_session_key(key)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None
    sessions = Session.objects.for_agent(_agent(request)).active().select_related("agent")
    if lock:
        sessions = sessions.select_for_update()
    session = sessions.filter(key=key).first()
    if session is None and not missing_ok:
        raise HttpError(404, "session not found")
    return session


def _item_name(name: str) -> str:
    try:
        return check_name(name, "a context item name")
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 9:
        raise HttpError(422, "cursor is not valid")
    return int(cursor)


def _limit(limit: int) -> int:
    if limit < 1 or limit > MAX_PAGE:
        raise HttpError(422, f"limit must be between 1 and {MAX_PAGE}")
    return limit


def _memory(request: HttpRequest, memory_id: int, *, for_change: bool = False) -> Memory:
    """The agent's memory. `for_change`: locked for the caller's transaction, and a
    superseded memory is a 409 (its replacement is the one to change)."""
    memories = Memory.objects.for_agent(_agent(request))
    if for_change:
        memories = memories.select_for_update()
    memory = memories.filter(pk=memory_id).first()
    if memory is None:
        raise HttpError(404, "memory not found")
    if for_change and memory.status == Memory.Status.SUPERSEDED:
        raise HttpError(409, f"memory {memory.id} was superseded by {memory.superseded_by_id}")
    return memory


# --- context ---------------------------------------------------------------------------


@router.get("/sessions/{key}/context", tags=["context"])
def get_context(
    request: HttpRequest,
    key: str,
    query_hint: str = Query("", max_length=1000),
    token_budget: int | None = Query(None, ge=0, le=MAX_TOKEN_BUDGET),
):
    """What the agent gets back before a model call: the pruned conversation, working
    context, findings, long-term memories and the summary, each within its share of the
    token budget, with exact counts and a markdown prompt to inject."""
    session = _live_session(request, key)
    try:
        return assemble_context(session, token_budget=token_budget, query_hint=query_hint)
    except tokens.EncodingUnavailable as exc:
        raise HttpError(422, f"the agent's encoding cannot be used: {exc}") from None


# --- working context -------------------------------------------------------------------


class ContextItemIn(InputSchema):
    value: Any
    source: Literal["explicit", "inferred"] = "explicit"
    confidence: Confidence = 1.0

    @field_validator("value")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("value must not be null: DELETE the item to remove it")
        return value


def _item_dict(item: ContextItem) -> dict:
    return {
        "key": item.key,
        "value": item.value,
        "source": item.source,
        "confidence": item.confidence,
        "updated_at": item.updated_at.isoformat(),
    }


@router.get("/sessions/{key}/context-items", tags=["working context"])
def list_context_items(request: HttpRequest, key: str):
    session = _live_session(request, key)
    items = ContextItem.objects.filter(session=session).order_by("-confidence", "key")
    return {"items": [_item_dict(i) for i in items]}


@router.put("/sessions/{key}/context-items/{name}", tags=["working context"])
def put_context_item(request: HttpRequest, key: str, name: str, payload: ContextItemIn):
    """Set a working-context item. An inferred value never overwrites an explicit or
    manual one: that is a 409 and nothing changes."""
    name = _item_name(name)
    if "value" not in payload.model_fields_set:
        raise HttpError(422, "value is required")
    with transaction.atomic():
        session = _live_session(request, key, lock=True)
        item, applied = ContextItem.put(
            session,
            name,
            payload.value,
            source=payload.source,
            confidence=payload.confidence,
            actor=_actor(request),
        )
        if applied:
            session.slide_expiry()
            session.save(update_fields=["last_activity_at", "expires_at"])
    if not applied:
        raise HttpError(
            409,
            f"kept the {item.source} value of confidence {item.confidence}: an inferred "
            "value never overwrites an explicit or manual one",
        )
    return _item_dict(item)


@router.delete(
    "/sessions/{key}/context-items/{name}", response={204: None}, tags=["working context"]
)
def delete_context_item(request: HttpRequest, key: str, name: str):
    name = _item_name(name)
    with transaction.atomic():
        session = _live_session(request, key, lock=True)
        item = ContextItem.objects.filter(session=session, key=name).first()
        if item is None:
            raise HttpError(404, "context item not found")
        item.remove(_actor(request))
    return Status(204, None)


# --- findings --------------------------------------------------------------------------


class FindingIn(InputSchema):
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    query: Annotated[str, Field(max_length=MAX_FACT_CHARS)] = ""
    fact: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)]
    step: Annotated[int, Field(strict=True, ge=0)] | None = None
    success: StrictBool = True
    file_path: Annotated[str, Field(max_length=1000)] = ""


@router.get("/sessions/{key}/findings", tags=["findings"])
def list_findings(request: HttpRequest, key: str, cursor: str | None = None, limit: int = 50):
    session = _live_session(request, key)
    offset, limit = _offset(cursor), _limit(limit)
    rows = list(
        Finding.objects.filter(session=session)
        .select_related("turn", "message", "tool_call")
        .order_by("-updated_at", "-id")[offset : offset + limit + 1]
    )
    next_cursor = str(offset + limit) if len(rows) > limit else None
    stale = Finding.stale_among(session, rows[:limit])
    items = [finding_dict(f, f.id in stale) for f in rows[:limit]]
    return {"items": items, "next_cursor": next_cursor}


@router.post("/sessions/{key}/findings", response={200: dict, 201: dict}, tags=["findings"])
def post_finding(request: HttpRequest, key: str, payload: FindingIn):
    """Record what a tool call taught the agent. A finding that is already known (same
    tool, matching query) is updated instead of copied: 200 instead of 201."""
    with transaction.atomic():
        session = _live_session(request, key, lock=True)
        finding, created = Finding.record(
            session, actor=_actor(request), source=Finding.Source.AGENT, **payload.model_dump()
        )
    return Status(201 if created else 200, {"created": created, "finding": finding_dict(finding)})


MAX_CHECK_ARGUMENTS_CHARS = 256 * 1024


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


def _check(request: HttpRequest, key: str, tool: str, query: str) -> dict:
    session = _live_session(request, key, missing_ok=True)  # none yet: nothing is known
    finding = Finding.known(session, tool, query) if session is not None else None
    stale = finding.is_stale() if finding is not None else False
    return {
        "known": finding is not None and not stale,
        "stale": stale,
        "finding": finding_dict(finding, stale) if finding else None,
    }


@router.get("/sessions/{key}/findings/check", tags=["findings"])
def check_finding(
    request: HttpRequest,
    key: str,
    tool: str = Query(..., min_length=1, max_length=200),
    query: str = Query("", max_length=MAX_FACT_CHARS),
):
    """Is this already known? Lets an agent skip a redundant tool call. `query` is the
    call's text or its JSON arguments. A read of a file edited since is `stale`, not
    known; a session that does not exist yet knows nothing (200, not 404). For arguments
    too long for a URL, POST the same question."""
    return _check(request, key, tool, query)


@router.post("/sessions/{key}/findings/check", tags=["findings"])
def check_finding_post(request: HttpRequest, key: str, payload: FindingCheckIn):
    """The same question as `GET …/findings/check`, with the call in the body:
    `{"tool": "Edit", "query": {"file_path": …, "old_string": …, "new_string": …}}`.
    Asking changes nothing."""
    query = payload.query
    text = query if isinstance(query, str) else json.dumps(query, ensure_ascii=False)
    return _check(request, key, payload.tool, text)


# --- long-term memories ----------------------------------------------------------------


class MemoryIn(InputSchema):
    content: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)]
    memory_type: MemoryType = "fact"
    confidence: Confidence = 0.8
    session: Annotated[str, Field(max_length=200)] | None = None


class MemoryPatch(InputSchema):
    content: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)] | None = None
    memory_type: MemoryType | None = None
    confidence: Confidence | None = None


def _remember(request: HttpRequest, payload: MemoryIn) -> tuple[Memory, bool]:
    with transaction.atomic():
        session = _live_session(request, payload.session) if payload.session else None
        return Memory.remember(
            _agent(request),
            payload.content,
            memory_type=payload.memory_type,
            confidence=payload.confidence,
            session=session,
            actor=_actor(request),
        )


@router.post("/memories", response={200: dict, 201: dict}, tags=["memories"])
def post_memory(request: HttpRequest, payload: MemoryIn):
    """Remember a fact. The same fact again strengthens the existing memory (200)."""
    memory, created = _remember(request, payload)
    return Status(201 if created else 200, {"created": created, "memory": memory_dict(memory)})


def _recall(request: HttpRequest, **filters) -> tuple[list[Memory], bool]:
    return fulltext.recall_memories(_agent(request), **filters)


@router.get("/memories", tags=["memories"])
def list_memories(
    request: HttpRequest,
    query: str = Query("", max_length=1000),
    memory_type: MemoryType | None = None,
    min_confidence: float | None = Query(None, ge=0, le=1),
    status: Literal["active", "archived", "superseded", "all"] = "active",
    cursor: str | None = None,
    limit: int = 20,
):
    """Recall: with a query, ranked by full-text relevance; without, by confidence."""
    offset, limit = _offset(cursor), _limit(limit)
    found, more = _recall(
        request,
        query=query,
        memory_type=memory_type,
        min_confidence=min_confidence,
        status=status,
        offset=offset,
        limit=limit,
    )
    return {
        "items": [memory_dict(m) for m in found],
        "next_cursor": str(offset + limit) if more else None,
    }


@router.get("/memories/{memory_id}", tags=["memories"])
def get_memory(request: HttpRequest, memory_id: int):
    memory = _memory(request, memory_id)
    return {**memory_dict(memory), "superseded_by": memory.superseded_by_id}


@router.patch("/memories/{memory_id}", tags=["memories"])
def patch_memory(request: HttpRequest, memory_id: int, payload: MemoryPatch):
    """Change a memory. New content replaces the fact: the old memory is marked
    superseded with a link to the new one, which is returned."""
    changes = payload.model_dump(exclude_unset=True)
    if any(value is None for value in changes.values()):
        raise HttpError(422, "fields may be omitted but not null")
    with transaction.atomic():
        memory = _memory(request, memory_id, for_change=True)
        result = memory.revise(actor=_actor(request), **changes)
    return {**memory_dict(result), "supersedes": memory.id if result.id != memory.id else None}


@router.delete("/memories/{memory_id}", response={204: None}, tags=["memories"])
def delete_memory(request: HttpRequest, memory_id: int):
    """Forget: the memory is archived (soft) and can be restored."""
    with transaction.atomic():
        memory = _memory(request, memory_id, for_change=True)
        memory.archive(_actor(request))
    return Status(204, None)


@router.post("/memories/{memory_id}/restore", tags=["memories"])
def restore_memory(request: HttpRequest, memory_id: int):
    with transaction.atomic():
        memory = _memory(request, memory_id, for_change=True)
        memory.restore(_actor(request))
    return memory_dict(memory)


@router.get("/memories/{memory_id}/history", tags=["memories"])
def memory_history(request: HttpRequest, memory_id: int):
    memory = _memory(request, memory_id)
    events = MemoryEvent.objects.filter(
        target_kind=MemoryEvent.Target.MEMORY, target_id=memory.id
    ).order_by("created_at", "id")
    return {
        "items": [
            {
                "action": e.action,
                "before": e.before,
                "after": e.after,
                "actor": e.actor,
                "created_at": e.created_at.isoformat(),
            }
            for e in events
        ]
    }


# --- memory tools ----------------------------------------------------------------------


class RememberArgs(InputSchema):
    model_config = {"extra": "forbid"}
    content: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)]
    memory_type: MemoryType = "fact"
    confidence: Confidence = 0.8


class RecallArgs(InputSchema):
    model_config = {"extra": "forbid"}
    query: Annotated[str, Field(min_length=1, max_length=1000)]
    memory_type: MemoryType | None = None
    limit: Annotated[int, Field(strict=True, ge=1, le=20)] = 5


class ForgetArgs(InputSchema):
    model_config = {"extra": "forbid"}
    memory_id: Annotated[int, Field(strict=True, ge=1)]
    reason: Annotated[str, Field(max_length=500)] = ""


class MemoryToolCallIn(InputSchema):
    name: Literal["remember", "recall", "forget"]
    arguments: dict[str, Any] = {}
    session: Annotated[str, Field(max_length=200)] | None = None


@router.get("/tools", tags=["tools"])
def list_tools(request: HttpRequest, format: Literal["openai", "anthropic"] = "openai"):
    """JSON-schema definitions of the memory tools, in OpenAI's or Anthropic's shape."""
    return memory_tools.definitions(format)


def _memory_ref(memory: Memory) -> str:
    line = fmt.memory_line(
        fmt.MemoryItem(memory.memory_type, memory.content, memory.confidence, memory.updated_at)
    )
    return f"{line} [memory {memory.id}]"


@router.post("/tools/call", tags=["tools"])
def call_tool(request: HttpRequest, payload: MemoryToolCallIn):
    """Run one memory tool call; `result` is text formatted for the model."""
    schema = {"remember": RememberArgs, "recall": RecallArgs, "forget": ForgetArgs}[payload.name]
    try:
        args = schema.model_validate(payload.arguments)
    except ValidationError as exc:
        raise HttpError(
            422, f"bad arguments for {payload.name}: {exc.errors(include_url=False)}"
        ) from None
    if payload.name == "remember":
        memory, created = _remember(
            request,
            MemoryIn(
                content=args.content,
                memory_type=args.memory_type,
                confidence=args.confidence,
                session=payload.session,
            ),
        )
        verb = "Remembered" if created else "Already known; strengthened"
        return {
            "ok": True,
            "result": f"{verb}:\n{_memory_ref(memory)}",
            "memory": memory_dict(memory),
        }
    if payload.name == "recall":
        found, _ = _recall(
            request,
            query=args.query,
            memory_type=args.memory_type,
            min_confidence=None,
            status="active",
            offset=0,
            limit=args.limit,
        )
        if found:
            Memory.objects.filter(id__in=[m.id for m in found]).update(
                access_count=F("access_count") + 1, last_accessed_at=timezone.now()
            )
            noun = "memory" if len(found) == 1 else "memories"
            text = f"{len(found)} {noun}:\n" + "\n".join(_memory_ref(m) for m in found)
        else:
            text = f"No memories match {fmt.escape_markdown(args.query)!r}."
        return {"ok": True, "result": text, "memories": [memory_dict(m) for m in found]}
    with transaction.atomic():
        memory = (
            Memory.objects.for_agent(_agent(request))
            .select_for_update()
            .filter(pk=args.memory_id)
            .first()
        )
        if memory is None:
            return {"ok": False, "result": f"No memory with id {args.memory_id}."}
        if not memory.archive(_actor(request)):
            return {"ok": False, "result": f"Memory {memory.id} is not active ({memory.status})."}
    return {"ok": True, "result": f"Forgot memory {memory.id} (archived; a person can restore it)."}


# --- search ----------------------------------------------------------------------------


@router.get("/search", tags=["search"])
def search_everything(
    request: HttpRequest,
    q: str = Query(..., min_length=1, max_length=500),
    kind: Literal["message", "finding", "memory"] | None = None,
    cursor: str | None = None,
    limit: int = 20,
):
    """Full-text search over the agent's messages, findings and memories, ranked, with
    highlighted snippets (`highlights`: text segments, the matching ones marked)."""
    offset, limit = _offset(cursor), _limit(limit)
    hits = fulltext.search(
        _agent(request),
        q,
        kinds=(kind,) if kind else fulltext.KINDS,
        offset=offset,
        limit=limit + 1,
        memory_status=None,
    )
    items = [
        {
            "kind": h.kind,
            "id": h.id,
            "rank": h.rank,
            "session": h.session,
            "seq": h.seq if h.kind == "message" else None,
            "role": h.role if h.kind == "message" else None,
            "tool": h.role if h.kind == "finding" else None,
            "memory_type": h.role if h.kind == "memory" else None,
            "status": h.status,
            "snippet": h.plain_snippet(),
            "highlights": h.segments(),
        }
        for h in hits[:limit]
    ]
    return {"items": items, "next_cursor": str(offset + limit) if len(hits) > limit else None}


# --- session state: subtasks -----------------------------------------------------------

SubtaskStatus = Literal["pending", "in_progress", "done", "blocked"]


class SubtaskIn(InputSchema):
    title: Annotated[str, Field(min_length=1, max_length=500)]
    status: SubtaskStatus = "pending"
    dependencies: Annotated[
        list[Annotated[int, Field(strict=True, ge=1)]], Field(max_length=50)
    ] = []


class SubtaskPatch(InputSchema):
    title: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    status: SubtaskStatus | None = None


def _subtask_dict(task: Subtask) -> dict:
    return {
        "id": task.id,
        "title": task.title,
        "status": task.status,
        "position": task.position,
        "dependencies": sorted(d.id for d in task.dependencies.all()),
    }


@router.get("/sessions/{key}/subtasks", tags=["session state"])
def list_subtasks(request: HttpRequest, key: str):
    session = _live_session(request, key)
    tasks = Subtask.objects.filter(session=session).prefetch_related("dependencies")
    return {"goal": session.goal, "items": [_subtask_dict(t) for t in tasks]}


@router.post("/sessions/{key}/subtasks", response={201: dict}, tags=["session state"])
def post_subtask(request: HttpRequest, key: str, payload: SubtaskIn):
    """Add a subtask; `dependencies` are ids of this session's subtasks."""
    with transaction.atomic():
        session = _live_session(request, key, lock=True)
        dependencies = list(Subtask.objects.filter(session=session, id__in=payload.dependencies))
        if len(dependencies) != len(set(payload.dependencies)):
            raise HttpError(422, "dependencies must be subtasks of this session")
        last = Subtask.objects.filter(session=session).order_by("-position").first()
        task = Subtask.objects.create(
            session=session,
            title=payload.title,
            status=payload.status,
            position=(last.position + 1) if last else 0,
        )
        task.dependencies.set(dependencies)
    return Status(201, _subtask_dict(task))


@router.patch("/sessions/{key}/subtasks/{subtask_id}", tags=["session state"])
def patch_subtask(request: HttpRequest, key: str, subtask_id: int, payload: SubtaskPatch):
    changes = {k: v for k, v in payload.model_dump(exclude_unset=True).items() if v is not None}
    with transaction.atomic():
        session = _live_session(request, key, lock=True)
        task = Subtask.objects.filter(session=session, pk=subtask_id).first()
        if task is None:
            raise HttpError(404, "subtask not found")
        for name, value in changes.items():
            setattr(task, name, value)
        if changes:
            task.save(update_fields=[*changes, "updated_at"])
    return _subtask_dict(task)


@router.delete(
    "/sessions/{key}/subtasks/{subtask_id}", response={204: None}, tags=["session state"]
)
def delete_subtask(request: HttpRequest, key: str, subtask_id: int):
    with transaction.atomic():
        session = _live_session(request, key, lock=True)
        deleted, _ = Subtask.objects.filter(session=session, pk=subtask_id).delete()
    if not deleted:
        raise HttpError(404, "subtask not found")
    return Status(204, None)
