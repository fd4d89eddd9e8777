"""What every API router shares: the key's agent, the session a path names, name checks,
and the statuses each kind of operation can answer (declared in the OpenAPI document)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.errors import HttpError

from memoryapp.core.models import SELF, Agent, Memory, Session
from memoryapp.http.schemas import ErrorOut, check_name, check_session_key

# Every authenticated operation can answer these: no or a wrong key (401), a parameter or
# body that breaks the contract (422), over a rate limit (429), the database unreachable
# (503, with Retry-After).
_ALWAYS = (401, 422, 429, 503)


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """The error answers of an operation: the ones every operation has, plus `statuses`
    (404 for a path naming something, 409 for a conflict, 413 for a body, which also
    brings 400: a body that is not JSON at all)."""
    extra = {400, *statuses} if 413 in statuses else set(statuses)
    return {status: ErrorOut for status in sorted({*_ALWAYS, *extra})}


READ = errors()
READ_ONE = errors(404)
WRITE = errors(413)
WRITE_ONE = errors(404, 413)
CONFLICTING_WRITE = errors(404, 409, 413)


def agent_of(request: HttpRequest) -> Agent:
    return request.auth.agent


def actor(request: HttpRequest) -> str:
    """Who a change is recorded as: the agent the key belongs to."""
    return f"agent:{agent_of(request).name}"


def session_key(key: str) -> str:
    try:
        return check_session_key(key)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None


def item_name(name: str) -> str:
    try:
        return check_name(name, "a context item name")
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None


def live_session(
    request: HttpRequest, key: str, *, lock: bool = False, missing_ok: bool = False
) -> Session | None:
    """The key's agent's live session, or a 404 (None with `missing_ok`): another agent's
    session and an expired one read as absent, so a key learns nothing about sessions
    that are not its own. `lock`: locked for the caller's transaction."""
    agent = agent_of(request)
    key = session_key(key)
    sessions = Session.objects.for_agent(agent).active()
    if lock:
        sessions = sessions.select_for_update(of=SELF)
    try:  # get(): the key is unique per agent (no ORDER BY to compile, as first() has)
        session = sessions.get(key=key)
    except Session.DoesNotExist:
        session = None
    if session is None and not missing_ok:
        raise HttpError(404, "session not found")
    if session is not None:
        session.agent = agent  # the key's: not read again
    return session


def memory_of(request: HttpRequest, memory_id: int, *, for_change: bool = False) -> Memory:
    """The agent's memory, or a 404. `for_change`: locked for the caller's transaction,
    and a superseded memory is a 409 (its replacement is the one to change)."""
    memories = Memory.objects.for_agent(agent_of(request))
    if for_change:
        memories = memories.select_for_update()
    memory = memories.filter(pk=memory_id).first()
    if memory is None:
        raise HttpError(404, "memory not found")
    if for_change and memory.status == Memory.Status.SUPERSEDED:
        raise HttpError(409, f"memory {memory.id} was superseded by {memory.superseded_by_id}")
    return memory
