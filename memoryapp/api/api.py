"""The agent API, /api/v1: sessions, turns, pruned history, agent settings, health.

Views stay thin: they validate input (schemas), resolve the key's agent, and call the
model layer (memoryapp.core). Every error is JSON `{"detail": ...}` with a 4xx status, and
a rejected request changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import NinjaAPI, Query, Status
from ninja.errors import AuthenticationError, HttpError

from memoryapp.api.auth import ApiKeyAuth, RateLimited
from memoryapp.api.middleware import JsonParser
from memoryapp.api.schemas import (
    AgentOut,
    AgentPatch,
    ErrorOut,
    HealthOut,
    HistoryOut,
    SessionIn,
    SessionOut,
    SessionPage,
    TurnIn,
    TurnOut,
    TurnPage,
    check_session_key,
)
from memoryapp.core.conversation import (
    IdempotencyConflict,
    MessageInput,
    ToolCallInput,
    TurnInput,
    append_turn,
    lock_session,
    restore_history,
    session_summary,
)
from memoryapp.core.limits import MAX_MESSAGES_SETTING, MAX_TOKEN_BUDGET
from memoryapp.core.models import Agent, Session, Turn
from memoryapp.core.summaries import summarize_pruned
from memoryapp.lib import tokens

logger = logging.getLogger(__name__)

api = NinjaAPI(
    title="memoryapp agent API",
    version="1",
    description="Store an agent's conversation memory and restore it pruned for the "
    "context window. Authenticate with `Authorization: Bearer <key>`.",
    auth=ApiKeyAuth(),
    urls_namespace="api_v1",
    parser=JsonParser(),
)


def _database_unreachable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The database is down or restarting: nothing was stored, try again soon."""
    logger.warning("API request failed, database unreachable: %s", exc)
    response = api.create_response(
        request, {"detail": "the database is unreachable; nothing was stored, retry"}, status=503
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _internal_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """A bug: JSON with an id to quote, the trace only in the server's log."""
    error_id = uuid.uuid4().hex[:12]
    logger.error("API error %s on %s %s", error_id, request.method, request.path, exc_info=exc)
    body = {"detail": f"internal error {error_id}: the server's log has it", "error_id": error_id}
    return api.create_response(request, body, status=500)


def _unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
    response = api.create_response(
        request,
        {"detail": "missing or unknown API key: send `Authorization: Bearer <key>`"},
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="memoryapp"'
    return response


def _rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = api.create_response(request, {"detail": exc.detail}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


RETRY_AFTER_SECONDS = 5
api.add_exception_handler(RateLimited, _rate_limited)
api.add_exception_handler(AuthenticationError, _unauthenticated)
api.add_exception_handler(OperationalError, _database_unreachable)
api.add_exception_handler(InterfaceError, _database_unreachable)
api.add_exception_handler(Exception, _internal_error)

from memoryapp.api.memory import router as memory_router  # noqa: E402

api.add_router("/", memory_router)

ERRORS = {400: ErrorOut, 401: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}
MAX_PAGE = 200


def _agent(request: HttpRequest) -> Agent:
    return request.auth.agent


def _key(key: str) -> str:
    try:
        return check_session_key(key)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None


def _live_session(request: HttpRequest, key: str) -> Session:
    """The key's agent's session, or 404: another agent's session and an expired one read
    as absent, so a key learns nothing about sessions that are not its own."""
    session = (
        Session.objects.for_agent(_agent(request))
        .active()
        .select_related("agent")
        .filter(key=_key(key))
        .first()
    )
    if session is None:
        raise HttpError(404, "session not found")
    return session


def _encode_cursor(value: int) -> str:
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode()).decode()
        if not (text.isascii() and text.isdigit() and len(text) <= 18):
            raise ValueError(text)
        value = int(text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise HttpError(422, "cursor is not valid") from None
    if value < 0:
        raise HttpError(422, "cursor is not valid")
    return value


def _page_limit(limit: int) -> int:
    if limit < 1 or limit > MAX_PAGE:
        # Never silently capped: a caller asking for more learns the maximum.
        raise HttpError(422, f"limit must be between 1 and {MAX_PAGE}")
    return limit


@api.get("/health", auth=None, response={200: HealthOut, 503: HealthOut}, tags=["health"])
def health(request: HttpRequest):
    database: dict[str, Any] = {"vendor": connection.vendor}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database["ok"] = True
    except Exception as exc:  # report, do not raise: this is the health check
        # No key is needed here: name the failure, never echo hosts or credentials.
        database.update(ok=False, error=type(exc).__name__)
    broker: dict[str, Any]
    if settings.REDIS_URL:
        broker = {"kind": "redis"}
        try:
            import redis

            client = redis.Redis.from_url(
                settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
            )
            broker["ok"] = bool(client.ping())
        except Exception as exc:
            broker.update(ok=False, error=type(exc).__name__)
    else:
        broker = {"kind": "in-process", "ok": True}
    healthy = database["ok"] and broker["ok"]
    body = {"status": "ok" if healthy else "degraded", "database": database, "broker": broker}
    return Status(200 if database["ok"] else 503, body)


def _agent_out(agent: Agent) -> dict:
    return {
        "name": agent.name,
        "ttl_seconds": agent.ttl_seconds,
        "max_messages": agent.max_messages,
        "token_budget": agent.token_budget,
        "encoding": agent.encoding,
        "system_budget": agent.system_budget,
        "conversation_budget": agent.conversation_budget,
        "working_budget": agent.working_budget,
        "long_term_budget": agent.long_term_budget,
        "default_conversation_budget": agent.default_conversation_budget(),
    }


@api.get("/agent", response={200: AgentOut, **ERRORS}, tags=["agent"])
def get_agent(request: HttpRequest):
    return _agent_out(_agent(request))


@api.patch("/agent", response={200: AgentOut, **ERRORS}, tags=["agent"])
def patch_agent(request: HttpRequest, payload: AgentPatch):
    changes = payload.model_dump(exclude_unset=True)
    if "encoding" in changes:
        try:
            tokens.get_encoding(changes["encoding"])
        except tokens.EncodingUnavailable as exc:
            raise HttpError(422, str(exc)) from None
    agent = _agent(request)
    for name, value in changes.items():
        setattr(agent, name, value)
    if changes:
        agent.save(update_fields=[*changes, "updated_at"])
    return _agent_out(agent)


@api.get("/sessions", response={200: SessionPage, **ERRORS}, tags=["sessions"])
def list_sessions(
    request: HttpRequest,
    status: str = Query("active", pattern="^(active|expired|all)$"),
    cursor: str | None = None,
    limit: int = 50,
):
    limit = _page_limit(limit)
    after = _decode_cursor(cursor)
    sessions = Session.objects.for_agent(_agent(request))
    if status == "active":
        sessions = sessions.active()
    elif status == "expired":
        sessions = sessions.expired()
    if after is not None:
        sessions = sessions.filter(id__lt=after)
    # Newest created first, by id: a stable order, so writes never shift pages.
    page = list(sessions.order_by("-id")[: limit + 1])
    next_cursor = _encode_cursor(page[limit - 1].id) if len(page) > limit else None
    return {"items": [session_summary(s) for s in page[:limit]], "next_cursor": next_cursor}


@api.put(
    "/sessions/{key}", response={200: SessionOut, 201: SessionOut, **ERRORS}, tags=["sessions"]
)
def put_session(request: HttpRequest, key: str, payload: SessionIn):
    key = _key(key)
    changes = payload.model_dump(exclude_unset=True)
    agent = _agent(request)
    with transaction.atomic():
        now = timezone.now()
        existed = lock_session(agent, key, create=False, now=now) is not None
        session = lock_session(agent, key, create=True, now=now)
        fields = ["last_activity_at", "expires_at"]
        for name in ("goal", "status", "metadata"):
            if name in changes:
                value = changes[name]
                if value is None:
                    value = {"goal": "", "status": Session.Status.ACTIVE, "metadata": {}}[name]
                setattr(session, name, value)
                fields.append(name)
        if "ttl_seconds" in changes:
            # null: fall back to the agent's TTL.
            session.ttl_seconds = changes["ttl_seconds"]
            fields.append("ttl_seconds")
        session.slide_expiry(now)
        session.save(update_fields=fields)
    return Status(200 if existed else 201, session_summary(session))


@api.get("/sessions/{key}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def get_session(request: HttpRequest, key: str):
    return session_summary(_live_session(request, key))


@api.delete("/sessions/{key}", response={204: None, **ERRORS}, tags=["sessions"])
def delete_session(
    request: HttpRequest,
    key: str,
    scope: str = Query("all", pattern="^(conversation|all)$"),
):
    """`scope=conversation` deletes messages and turns and keeps the session's state (goal,
    working context, findings, subtasks); `scope=all` deletes the session and everything
    under it. Long-term memories stay with the agent either way."""
    key = _key(key)
    with transaction.atomic():
        session = lock_session(_agent(request), key, create=False, now=timezone.now())
        if session is None:
            raise HttpError(404, "session not found")
        if scope == "all":
            session.delete()
        else:
            session.clear_conversation()
    return Status(204, None)


@api.post("/sessions/{key}/turns", response={201: TurnOut, **ERRORS}, tags=["turns"])
def post_turn(request: HttpRequest, key: str, payload: TurnIn, response: HttpResponse):
    """Append one turn. Creates the session when absent. With an `Idempotency-Key`
    header, a retry of the same request stores nothing and answers the first answer;
    the same key with a different body is a 409."""
    key = _key(key)
    idempotency_key = request.headers.get("Idempotency-Key") or None
    if idempotency_key is not None and len(idempotency_key) > 200:
        raise HttpError(422, "Idempotency-Key has at most 200 characters")
    turn = TurnInput(
        messages=[
            MessageInput(
                role=m.role,
                content=m.content or "",
                name=m.name,
                tool_call_id=m.tool_call_id,
                tool_calls=m.tool_calls,
            )
            for m in payload.messages
        ],
        input_tokens=payload.usage.input_tokens if payload.usage else None,
        output_tokens=payload.usage.output_tokens if payload.usage else None,
        tool_calls=[
            ToolCallInput(
                tool=c.tool,
                query=c.query
                if isinstance(c.query, str)
                else json.dumps(c.query, ensure_ascii=False),
                output=c.output or "",
                success=c.success,
                file_path=c.file_path or "",
                call_id=c.call_id or "",
                details=c.details,
            )
            for c in payload.tool_calls
        ],
        model=payload.model or "",
        timestamp=payload.timestamp,
    )
    agent = _agent(request)
    try:
        answer, replayed = append_turn(
            agent,
            key,
            turn,
            idempotency_key=idempotency_key,
            request_hash=hashlib.sha256(request.body).hexdigest(),
        )
    except IdempotencyConflict:
        raise HttpError(
            409, "this Idempotency-Key was already used with a different request body"
        ) from None
    except tokens.EncodingUnavailable as exc:
        raise HttpError(422, f"the agent's encoding cannot be used: {exc}") from None
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return Status(201, answer)


@api.get("/sessions/{key}/history", response={200: HistoryOut, **ERRORS}, tags=["turns"])
def get_history(
    request: HttpRequest,
    key: str,
    max_messages: int | None = Query(None, ge=0, le=MAX_MESSAGES_SETTING),
    max_tokens: int | None = Query(None, ge=0, le=MAX_TOKEN_BUDGET),
):
    """The conversation pruned for the context window: every system message, then the
    newest contiguous run of the others within `max_messages` and `max_tokens` (defaults:
    the agent's `max_messages` and conversation budget). Never starts the run with a tool
    result whose call was pruned. Deletes nothing. `summary` covers what was pruned
    (`stale` when the summarizer failed)."""
    session = _live_session(request, key)
    agent = session.agent
    limit_messages = agent.max_messages if max_messages is None else max_messages
    limit_tokens = agent.default_conversation_budget() if max_tokens is None else max_tokens
    answer = restore_history(session, max_messages=limit_messages, max_tokens=limit_tokens)
    kept = [m["seq"] for m in answer["messages"] if m["role"] != "system"]
    pruned_through = kept[0] - 1 if kept else session.message_count
    summary = summarize_pruned(session, pruned_through) if answer["pruned_count"] else None
    return {
        **answer,
        "summary": summary,
        "max_messages": limit_messages,
        "max_tokens": limit_tokens,
    }


@api.get("/sessions/{key}/turns", response={200: TurnPage, **ERRORS}, tags=["turns"])
def list_turns(request: HttpRequest, key: str, cursor: str | None = None, limit: int = 50):
    limit = _page_limit(limit)
    after = _decode_cursor(cursor)
    session = _live_session(request, key)
    turns = Turn.objects.filter(session=session)
    if after is not None:
        turns = turns.filter(iteration__gt=after)
    page = list(turns.order_by("iteration")[: limit + 1])
    next_cursor = _encode_cursor(page[limit - 1].iteration) if len(page) > limit else None
    items = [
        {
            **t.metadata(),
            "model": t.model,
            "usage_source": t.usage_source,
            "first_seq": t.first_seq,
            "last_seq": t.last_seq,
        }
        for t in page[:limit]
    ]
    return {"items": items, "next_cursor": next_cursor}
