"""The REST API of Redis Agent Memory Server (the endpoints its published Python client,
`agent-memory-client`, calls), served at /ams/<key>/v1/ on memoryapp's own model:

| Redis Agent Memory Server                  | memoryapp                                     |
|--------------------------------------------|-----------------------------------------------|
| working memory `session_id`                | the key's agent's session with that key       |
| its `messages` (ids, `created_at`)         | the session's messages (working.py)           |
| its `data`, `context`                      | working-context items `data.<key>`, `context` |
| its `memories`                             | long-term memories the session lists          |
| `ttl_seconds`                              | the session's TTL                             |
| long-term memory (id, topics, entities, …) | a Memory and its record (records.py)          |
| delete, forget                             | archive (restorable on the dashboard)         |

The client sends no headers of its own, so the key is a path segment: the API middleware
(memoryapp/http/middleware.py) moves it into the Authorization header and redacts it from
the path before anything logs it. From there everything is as on /api/v1: the same key
authentication, rate limits, body limits and JSON errors, a 422 naming what is wrong in a
request that changes nothing.
"""

from __future__ import annotations

import time

from django.db import transaction
from django.http import HttpRequest
from ninja import NinjaAPI, Query, Router
from ninja.errors import HttpError

from memoryapp.ams import records, working
from memoryapp.ams.models import MemoryRecord
from memoryapp.ams.schemas import (
    AckOut,
    CreateRecordsIn,
    EditRecordIn,
    ForgetIn,
    ForgetOut,
    Id,
    Name,
    NowOut,
    PromptIn,
    PromptOut,
    RecordOut,
    RecordResultsOut,
    SearchIn,
    SessionListOut,
    WorkingMemoryIn,
    WorkingMemoryOut,
)
from memoryapp.ams.windows import window_for
from memoryapp.core.models import Session
from memoryapp.http.auth import ApiKeyAuth
from memoryapp.http.common import READ, READ_ONE, WRITE, WRITE_ONE, actor, agent_of, errors
from memoryapp.http.common import session_key as checked_key
from memoryapp.http.contract import mount_strict, use_error_contract
from memoryapp.http.middleware import JsonParser
from memoryapp.lib import tokens

ams_api = NinjaAPI(
    title="memoryapp: Redis Agent Memory Server API",
    version="ams-1",
    auth=ApiKeyAuth(),
    urls_namespace="ams_v1",
    parser=JsonParser(),
    # The contract is Redis's published client; memoryapp's own API documents itself.
    docs_url=None,
    openapi_url=None,
)


# The error answers of /api/v1 (memoryapp/http/contract.py).
use_error_contract(ams_api, "the key is the path segment after /ams/")

router = Router(tags=["redis agent memory server"])


def _window(model_name: str | None, context_window_max: int | None) -> int | None:
    try:
        return window_for(model_name, context_window_max)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None


@router.get("/health", response={200: NowOut, **READ})
def health(request: HttpRequest):
    """The server's time; a key that works (the client checks its configuration)."""
    return {"now": int(time.time())}


@router.get("/working-memory/", response={200: SessionListOut, **READ})
def list_sessions(
    request: HttpRequest,
    limit: int = Query(20, ge=1, le=100),
    offset: int = Query(0, ge=0, le=100_000),
    namespace: Name | None = None,
    user_id: Name | None = None,
):
    """The agent's live sessions' ids, newest first."""
    sessions = Session.objects.for_agent(agent_of(request)).active()
    if namespace is not None:
        sessions = sessions.filter(metadata__ams__namespace=namespace)
    if user_id is not None:
        sessions = sessions.filter(metadata__ams__user_id=user_id)
    keys = list(sessions.order_by("-id").values_list("key", flat=True)[offset : offset + limit])
    return {"sessions": keys, "total": sessions.count()}


def _found_session(request: HttpRequest, session_id: str, namespace, user_id) -> Session:
    session = (
        Session.objects.for_agent(agent_of(request))
        .active()
        .select_related("agent")
        .filter(key=checked_key(session_id))
        .first()
    )
    if session is None or not working.in_scope(session, namespace, user_id):
        raise HttpError(404, f"session {session_id!r} not found")
    return session


@router.get("/working-memory/{session_id}", response={200: WorkingMemoryOut, **READ_ONE})
def get_working_memory(
    request: HttpRequest,
    session_id: str,
    user_id: Name | None = None,
    namespace: Name | None = None,
    model_name: Name | None = None,
    context_window_max: int | None = Query(None, ge=1, le=10_000_000),
):
    """The working memory; 404 when there is none (the client's get-or-create then
    creates it)."""
    window = _window(model_name, context_window_max)
    session = _found_session(request, session_id, namespace, user_id)
    MemoryRecord.objects.follow_replacements(session.agent)
    return working.read(session, window=window)


@router.put("/working-memory/{session_id}", response={200: WorkingMemoryOut, **errors(409, 413)})
def put_working_memory(
    request: HttpRequest,
    session_id: str,
    payload: WorkingMemoryIn,
    user_id: Name | None = None,
    model_name: Name | None = None,
    context_window_max: int | None = Query(None, ge=1, le=10_000_000),
):
    """Store the whole working memory as the smallest change to what is stored."""
    key = checked_key(session_id)
    if payload.session_id is not None and payload.session_id != key:
        raise HttpError(422, f"the body's session_id {payload.session_id!r} is not {key!r}")
    window = _window(model_name, context_window_max)
    agent = agent_of(request)
    MemoryRecord.objects.follow_replacements(agent)
    try:
        session = working.put(
            agent, key, payload, user_id=user_id, model=model_name or "", actor=actor(request)
        )
    except tokens.EncodingUnavailable as exc:
        raise HttpError(422, f"the agent's encoding cannot be used: {exc}") from None
    return working.read(session, window=window)


@router.delete("/working-memory/{session_id}", response={200: AckOut, **READ})
def delete_working_memory(
    request: HttpRequest,
    session_id: str,
    namespace: Name | None = None,
    user_id: Name | None = None,
):
    """Delete the session and everything under it; its long-term memories stay. An
    absent session is deleted already (ok)."""
    working.delete(agent_of(request), checked_key(session_id), namespace=namespace, user_id=user_id)
    return {"status": "ok"}


@router.post("/long-term-memory/", response={200: AckOut, **errors(409, 413)})
def create_long_term_memory(request: HttpRequest, payload: CreateRecordsIn):
    """Remember each record (the same id again changes that memory; with `deduplicate`,
    a text already remembered under another id is not stored twice)."""
    agent = agent_of(request)
    MemoryRecord.objects.follow_replacements(agent)
    with transaction.atomic():
        records.save_records(
            agent, payload.memories, actor=actor(request), deduplicate=payload.deduplicate
        )
    return {"status": "ok"}


@router.post("/long-term-memory/search", response={200: RecordResultsOut, **WRITE})
def search_long_term_memory(request: HttpRequest, payload: SearchIn, optimize_query: bool = False):
    """Full-text search with the client's filters (`optimize_query`: accepted; the
    query is used as it is)."""
    return records.search(agent_of(request), payload)


@router.post("/long-term-memory/forget", response={200: ForgetOut, **WRITE})
def forget_long_term_memories(
    request: HttpRequest,
    payload: ForgetIn,
    namespace: Name | None = None,
    user_id: Name | None = None,
    session_id: Name | None = None,
    limit: int = Query(1000, ge=1, le=10_000),
    dry_run: bool = False,
):
    """A forgetting pass: the memories the policy picks are archived (`dry_run`: only
    named)."""
    with transaction.atomic():
        return records.forget(
            agent_of(request),
            payload.policy,
            namespace=namespace,
            user_id=user_id,
            session_id=session_id,
            limit=limit,
            dry_run=dry_run,
            pinned=payload.pinned_ids or [],
            actor=actor(request),
        )


@router.get("/long-term-memory/{memory_id}", response={200: RecordOut, **READ_ONE})
def get_long_term_memory(request: HttpRequest, memory_id: Id):
    agent = agent_of(request)
    MemoryRecord.objects.follow_replacements(agent)
    memory = records.find(agent, memory_id)
    if memory is None:
        raise HttpError(404, f"memory {memory_id!r} not found")
    return records.record_dict(memory)


@router.patch("/long-term-memory/{memory_id}", response={200: RecordOut, **WRITE_ONE})
def edit_long_term_memory(request: HttpRequest, memory_id: Id, payload: EditRecordIn):
    """Change the fields given; new text replaces the fact (its history keeps the old)."""
    agent = agent_of(request)
    MemoryRecord.objects.follow_replacements(agent)
    with transaction.atomic():
        memory = records.find(agent, memory_id, lock=True)
        if memory is None:
            raise HttpError(404, f"memory {memory_id!r} not found")
        memory = records.edit(agent, memory, payload, actor(request))
    return records.record_dict(records.find(agent, records.ams_id(memory)) or memory)


# The ids to delete, repeated: ?memory_ids=a&memory_ids=b.
MemoryIds = Query([], max_length=1000)


@router.delete("/long-term-memory", response={200: AckOut, **READ})
def delete_long_term_memories(request: HttpRequest, memory_ids: list[Id] = MemoryIds):
    """Delete (archive) the memories these ids name; unknown ids are skipped."""
    agent = agent_of(request)
    MemoryRecord.objects.follow_replacements(agent)
    with transaction.atomic():
        deleted = records.delete(agent, memory_ids, actor(request))
    return {"status": f"ok, deleted {deleted} memories"}


@router.post("/memory/prompt", response={200: PromptOut, **WRITE})
def memory_prompt(request: HttpRequest, payload: PromptIn, optimize_query: bool = False):
    """Messages for a model: the conversation's summary and recent messages within the
    window, the long-term memories relevant to the query, then the query."""
    agent = agent_of(request)
    MemoryRecord.objects.follow_replacements(agent)
    return working.prompt(agent, payload)


mount_strict(ams_api, router)
