"""Sessions and their turns: create and list sessions, append turns, restore the pruned
history, and the session's state (subtasks)."""

from __future__ import annotations

import hashlib
import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Path, Query, Router, Status
from ninja.errors import HttpError

from memoryapp.api import answers, pagination
from memoryapp.api.schemas import (
    HistoryMessageOut,
    HistoryOut,
    MessagePage,
    SessionIn,
    SessionOut,
    SessionPage,
    SessionStatsOut,
    SubtaskIn,
    SubtaskList,
    SubtaskOut,
    SubtaskPatch,
    TurnIn,
    TurnOut,
    TurnPage,
)
from memoryapp.core.conversation import (
    IdempotencyConflict,
    MessageInput,
    ToolCallInput,
    TurnInput,
    UnknownFinding,
    append_turn,
    lock_session,
    session_summary,
)
from memoryapp.core.limits import MAX_INT, MAX_MESSAGES_SETTING, MAX_TOKEN_BUDGET
from memoryapp.core.models import Message, Session, Subtask, Turn
from memoryapp.core.restore import MESSAGE_FIELDS, pruned_through, restore_history
from memoryapp.core.stats import session_stats
from memoryapp.core.summaries import summarize_pruned
from memoryapp.http.common import (
    READ,
    READ_ONE,
    WRITE_ONE,
    agent_of,
    errors,
    live_session,
    session_key,
)
from memoryapp.http.schemas import SessionKeyInPath
from memoryapp.lib import tokens

router = Router(tags=["sessions"])


@router.get("/sessions", response={200: SessionPage, **READ})
def list_sessions(
    request: HttpRequest,
    status: str = Query("active", pattern="^(active|expired|all)$"),
    cursor: str | None = pagination.cursor(),
    limit: int = pagination.limit(50),
):
    """The agent's sessions, newest first."""
    after = pagination.decode(cursor, "sessions", int)
    sessions = Session.objects.for_agent(agent_of(request))
    if status == "active":
        sessions = sessions.active()
    elif status == "expired":
        sessions = sessions.expired()
    if after is not None:
        sessions = sessions.filter(id__lt=after[0])
    # Newest created first, by id: a stable order, so writes never shift pages.
    page = list(sessions.order_by("-id")[: limit + 1])
    more = len(page) > limit
    next_cursor = pagination.encode("sessions", page[limit - 1].id) if more else None
    return {"items": [session_summary(s) for s in page[:limit]], "next_cursor": next_cursor}


@router.put("/sessions/{key}", response={200: SessionOut, 201: SessionOut, **errors(413)})
def put_session(request: HttpRequest, key: SessionKeyInPath, payload: SessionIn):
    """Create the session (201) or change its goal, status, TTL or metadata (200)."""
    key = session_key(key)
    changes = payload.model_dump(exclude_unset=True)
    agent = agent_of(request)
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


@router.get("/sessions/{key}", response={200: SessionOut, **READ_ONE})
def get_session(request: HttpRequest, key: SessionKeyInPath):
    return session_summary(live_session(request, key))


@router.get("/sessions/{key}/stats", response={200: SessionStatsOut, **READ_ONE})
def get_session_stats(request: HttpRequest, key: SessionKeyInPath):
    """What the session holds (`entries` of each kind, `bytes` of stored text), its
    average turn in tokens, and the tool calls its agent did not run because a finding
    already answered them (`redundant_tool_calls_avoided`: calls sent with `known_from`)."""
    return session_stats(live_session(request, key))


@router.delete("/sessions/{key}", response={204: None, **READ_ONE})
def delete_session(
    request: HttpRequest,
    key: SessionKeyInPath,
    scope: str = Query("all", pattern="^(conversation|all)$"),
):
    """`scope=conversation` deletes messages and turns and keeps the session's state (goal,
    working context, findings, subtasks); `scope=all` deletes the session and everything
    under it. Long-term memories stay with the agent either way."""
    key = session_key(key)
    with transaction.atomic():
        session = lock_session(agent_of(request), key, create=False, now=timezone.now())
        if session is None:
            raise HttpError(404, "session not found")
        if scope == "all":
            session.delete()
        else:
            session.clear_conversation()
    return Status(204, None)


# --- turns ------------------------------------------------------------------------------


@router.post("/sessions/{key}/turns", response={201: TurnOut, **errors(409, 413)}, tags=["turns"])
def post_turn(request: HttpRequest, key: SessionKeyInPath, payload: TurnIn, response: HttpResponse):
    """Append one turn. Creates the session when absent. With an `Idempotency-Key`
    header, a retry of the same request stores nothing and answers the first answer;
    the same key with a different body is a 409."""
    key = session_key(key)
    idempotency_key = request.headers.get("Idempotency-Key") or None
    if idempotency_key is not None and len(idempotency_key) > MAX_IDEMPOTENCY_KEY:
        raise HttpError(422, "Idempotency-Key has at most 200 characters")
    turn = _turn_input(payload)
    try:
        answer, replayed = append_turn(
            agent_of(request),
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
    except UnknownFinding as exc:
        raise HttpError(422, str(exc)) from None
    stored = answers.answer(TurnOut, answer, 201)
    if replayed:
        target = stored if isinstance(stored, HttpResponse) else response
        target["Idempotent-Replayed"] = "true"
    return stored


MAX_IDEMPOTENCY_KEY = 200


def _turn_input(payload: TurnIn) -> TurnInput:
    return TurnInput(
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
                known_from=c.known_from,
            )
            for c in payload.tool_calls
        ],
        model=payload.model or "",
        timestamp=payload.timestamp,
    )


@router.get("/sessions/{key}/history", response={200: HistoryOut, **READ_ONE}, tags=["turns"])
def get_history(
    request: HttpRequest,
    key: SessionKeyInPath,
    max_messages: int | None = Query(None, ge=0, le=MAX_MESSAGES_SETTING),
    max_tokens: int | None = Query(None, ge=0, le=MAX_TOKEN_BUDGET),
):
    """The conversation pruned for the context window: every system message, then the
    newest contiguous run of the others within `max_messages` and `max_tokens` (defaults:
    the agent's `max_messages` and conversation budget). Never starts the run with a tool
    result whose call was pruned. Deletes nothing. `summary` covers what was pruned
    (`stale` when the summarizer failed)."""
    session = live_session(request, key)
    agent = session.agent
    limit_messages = agent.max_messages if max_messages is None else max_messages
    limit_tokens = agent.default_conversation_budget() if max_tokens is None else max_tokens
    answer = restore_history(
        session,
        max_messages=limit_messages,
        max_tokens=limit_tokens,
        write=answers.history_message,
    )
    summary = (
        summarize_pruned(
            session,
            pruned_through(session, answer["messages"]),
            (limit_messages, limit_tokens),
        )
        if answer["pruned_count"]
        else None
    )
    messages = answer["messages"]
    history = {
        **answer,
        "messages": answers.Written(HistoryMessageOut, messages),
        "summary": summary,
        "max_messages": limit_messages,
        "max_tokens": limit_tokens,
    }
    return answers.answer(HistoryOut, history)


@router.get("/sessions/{key}/messages", response={200: MessagePage, **READ_ONE}, tags=["turns"])
def list_messages(
    request: HttpRequest,
    key: SessionKeyInPath,
    cursor: str | None = pagination.cursor(),
    limit: int = pagination.limit(100),
):
    """Every stored message of the session, oldest first, unpruned (`history` gives the
    conversation pruned for the context window)."""
    after = pagination.decode(cursor, "messages", int)
    session = live_session(request, key)
    # Bounded by the session's count as read: a concurrent append shows whole or not at all.
    # By (session, seq): the message_unique_seq constraint's index, in windows of seq as
    # the restore reads (a keyset page `seq > x ORDER BY seq LIMIT n` can make PostgreSQL
    # read and sort the rest of a grown session when its statistics are older than that
    # growth). seq is gapless, so one window of limit + 1 seqs is the page; a gap would
    # only make it read the next window. Values, not model instances (MESSAGE_FIELDS).
    messages = Message.objects.filter(session=session).order_by("seq").values(*MESSAGE_FIELDS)
    page: list[dict] = []
    low = 0 if after is None else max(0, after[0])
    while len(page) <= limit and low < session.message_count:
        high = min(session.message_count, low + limit + 1 - len(page))
        page += messages.filter(seq__gt=low, seq__lte=high)
        low = high
    more = len(page) > limit
    next_cursor = pagination.encode("messages", page[limit - 1]["seq"]) if more else None
    items = answers.Written(HistoryMessageOut, (answers.history_message(m) for m in page[:limit]))
    return answers.answer(MessagePage, {"items": items, "next_cursor": next_cursor})


@router.get("/sessions/{key}/turns", response={200: TurnPage, **READ_ONE}, tags=["turns"])
def list_turns(
    request: HttpRequest,
    key: SessionKeyInPath,
    cursor: str | None = pagination.cursor(),
    limit: int = pagination.limit(50),
):
    """The session's turns, oldest first."""
    after = pagination.decode(cursor, "turns", int)
    session = live_session(request, key)
    turns = Turn.objects.filter(session=session)
    if after is not None:
        turns = turns.filter(iteration__gt=after[0])
    page = list(turns.order_by("iteration")[: limit + 1])
    more = len(page) > limit
    next_cursor = pagination.encode("turns", page[limit - 1].iteration) if more else None
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


# --- session state: subtasks -----------------------------------------------------------


def _subtask_dict(task: Subtask) -> dict:
    return {
        "id": task.id,
        "title": task.title,
        "status": task.status,
        "position": task.position,
        "dependencies": sorted(d.id for d in task.dependencies.all()),
    }


SubtaskId = Path(..., ge=1, le=MAX_INT)


@router.get(
    "/sessions/{key}/subtasks", response={200: SubtaskList, **READ_ONE}, tags=["session state"]
)
def list_subtasks(request: HttpRequest, key: SessionKeyInPath):
    session = live_session(request, key)
    tasks = Subtask.objects.filter(session=session).prefetch_related("dependencies")
    return {"goal": session.goal, "items": [_subtask_dict(t) for t in tasks]}


@router.post(
    "/sessions/{key}/subtasks", response={201: SubtaskOut, **WRITE_ONE}, tags=["session state"]
)
def post_subtask(request: HttpRequest, key: SessionKeyInPath, payload: SubtaskIn):
    """Add a subtask; `dependencies` are ids of this session's subtasks."""
    with transaction.atomic():
        session = live_session(request, key, lock=True)
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


@router.patch(
    "/sessions/{key}/subtasks/{subtask_id}",
    response={200: SubtaskOut, **WRITE_ONE},
    tags=["session state"],
)
def patch_subtask(
    request: HttpRequest, key: SessionKeyInPath, payload: SubtaskPatch, subtask_id: int = SubtaskId
):
    changes = {k: v for k, v in payload.model_dump(exclude_unset=True).items() if v is not None}
    with transaction.atomic():
        session = live_session(request, key, lock=True)
        task = Subtask.objects.filter(session=session, pk=subtask_id).first()
        if task is None:
            raise HttpError(404, "subtask not found")
        for name, value in changes.items():
            setattr(task, name, value)
        if changes:
            task.save(update_fields=[*changes, "updated_at"])
    return _subtask_dict(task)


@router.delete(
    "/sessions/{key}/subtasks/{subtask_id}",
    response={204: None, **READ_ONE},
    tags=["session state"],
)
def delete_subtask(request: HttpRequest, key: SessionKeyInPath, subtask_id: int = SubtaskId):
    with transaction.atomic():
        session = live_session(request, key, lock=True)
        deleted, _ = Subtask.objects.filter(session=session, pk=subtask_id).delete()
    if not deleted:
        raise HttpError(404, "subtask not found")
    return Status(204, None)
