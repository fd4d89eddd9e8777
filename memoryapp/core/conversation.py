"""Writing a session's conversation.

`append_turn` is the single ingest path (the API, the demo importer and the benchmarks
all go through it over HTTP). It holds the session's row lock for the whole write, so
concurrent appends to one session queue up and `seq` stays gapless. Restoring it is
memoryapp/core/restore.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from memoryapp.core.dispatch import dispatch_after_answer
from memoryapp.core.models import (
    SELF,
    Agent,
    ExtractionJob,
    Finding,
    IdempotencyRecord,
    Message,
    PendingToolOutput,
    Session,
    ToolCall,
    Turn,
)
from memoryapp.core.shapes import SessionSummary, TurnStored
from memoryapp.lib import tokens


class IdempotencyConflict(Exception):
    """The Idempotency-Key was already used for a different request."""


class UnknownFinding(Exception):
    """A tool call said a finding answered it, and the session has no such finding."""

    def __init__(self, index: int, finding_id: int) -> None:
        super().__init__(
            f"tool_calls[{index}].known_from: finding {finding_id} is not one of this session's"
        )


@dataclass
class MessageInput:
    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


@dataclass
class ToolCallInput:
    tool: str
    query: str = ""
    output: str = ""
    success: bool | None = None
    file_path: str = ""
    call_id: str = ""
    details: dict[str, Any] | None = None
    # Not run: this finding of the session already answered the call.
    known_from: int | None = None


@dataclass
class TurnInput:
    messages: list[MessageInput]
    input_tokens: int | None = None
    output_tokens: int | None = None
    tool_calls: list[ToolCallInput] = field(default_factory=list)
    model: str = ""
    timestamp: datetime | None = None


def lock_session(agent: Agent, key: str, *, create: bool, now: datetime) -> Session | None:
    """The session `key` of `agent`, row-locked for this transaction.

    An expired session reads as absent. With `create`, an absent session is created and an
    expired one is removed and started afresh (TTL expiry, done lazily here). Must run
    inside `transaction.atomic()`.
    """
    locked = Session.objects.select_for_update(of=SELF).select_related("agent")
    session = locked.filter(agent=agent, key=key).first()
    if session is not None and session.is_expired(now):
        if not create:
            return None
        # TTL expiry, done lazily: the same batched removal the cleanup uses.
        from memoryapp.core.cleanup import purge_sessions

        purge_sessions([session.pk], now)
        session = None
    if session is not None or not create:
        return session
    fresh = Session(agent=agent, key=key)
    fresh.slide_expiry(now)
    try:
        with transaction.atomic():
            fresh.save()
        return fresh
    except IntegrityError:
        # Another request created it between our read and our insert; lock theirs.
        locked = Session.objects.select_for_update(of=SELF).select_related("agent")
        return locked.get(agent=agent, key=key)


def _known_findings(session: Session, calls: list[ToolCallInput]) -> dict[int, Finding]:
    """The findings that skipped calls name, each checked to be this session's."""
    wanted = {c.known_from for c in calls if c.known_from is not None}
    if not wanted:
        return {}
    found = {f.id: f for f in Finding.objects.filter(session=session, id__in=wanted)}
    for index, call in enumerate(calls):
        if call.known_from is not None and call.known_from not in found:
            raise UnknownFinding(index, call.known_from)
    return found


def _counted(encoding_name: str, turn: TurnInput) -> tuple[list[int], tuple[int, int, str, int]]:
    """Each message's tokens in the agent's encoding, and the turn's usage: (input,
    output, usage_source, tool_call_count)."""
    encoding = tokens.get_encoding(encoding_name)
    counts = [
        tokens.count_message(encoding, m.role, m.content, m.name, m.tool_calls)
        for m in turn.messages
    ]
    if turn.input_tokens is not None and turn.output_tokens is not None:
        input_tokens, output_tokens = turn.input_tokens, turn.output_tokens
        usage_source = Turn.UsageSource.REPORTED
    else:
        output_tokens = sum(
            c for m, c in zip(turn.messages, counts, strict=True) if m.role == "assistant"
        )
        input_tokens = sum(counts) - output_tokens
        usage_source = Turn.UsageSource.COUNTED
    tool_call_count = len(turn.tool_calls) or sum(len(m.tool_calls or []) for m in turn.messages)
    return counts, (input_tokens, output_tokens, usage_source, tool_call_count)


def append_turn(
    agent: Agent,
    key: str,
    turn: TurnInput,
    *,
    idempotency_key: str | None = None,
    request_hash: str = "",
) -> tuple[TurnStored, bool]:
    """Store one turn; answer `(response, replayed)`. Token counting happens before the
    transaction so the session lock is held only for the writes."""
    counts, usage = _counted(agent.encoding, turn)
    input_tokens, output_tokens = usage[0], usage[1]

    if _ONE_STATEMENT.get(connection.vendor) and not turn.tool_calls:
        stored = _append_in_one_statement(
            agent, key, turn, counts, usage, idempotency_key, request_hash
        )
        if stored is not None:
            return stored, False

    with transaction.atomic():
        now = timezone.now()
        session = lock_session(agent, key, create=True, now=now)
        if idempotency_key:
            record = IdempotencyRecord.objects.filter(session=session, key=idempotency_key).first()
            if record is not None:
                if record.request_hash != request_hash:
                    raise IdempotencyConflict(idempotency_key)
                return record.response, True

        said_at = turn.timestamp or now
        known = _known_findings(session, turn.tool_calls)  # refused before anything is written
        iteration = session.turn_count + 1
        turn_row = _write_turn(session, turn, counts, usage, said_at)
        _write_tool_calls(session, turn_row, turn, known, said_at)
        job = ExtractionJob.objects.create(
            turn=turn_row,
            session=session,
            status=ExtractionJob.Status.QUEUED,
            created_at=now,
            queued_at=now,
        )
        # After commit, never inside the transaction; a failed dispatch is left to the sweep.
        # Robust: the turn is stored by then, so nothing the dispatch raises (the database
        # gone between commit and dispatch) may turn the agent's answer into an error that
        # says nothing was stored (a retry without an Idempotency-Key would store it twice).
        transaction.on_commit(lambda: dispatch_after_answer(job.pk), robust=True)
        session.message_count += len(turn.messages)
        session.token_count += sum(counts)
        session.input_tokens += input_tokens
        session.output_tokens += output_tokens
        session.turn_count = iteration
        session.slide_expiry(now)
        session.save(update_fields=Session.CONVERSATION_FIELDS)
        response = _stored_turn(session, counts, idempotency_key, request_hash)
    return response, False


def _write_turn(
    session: Session, turn: TurnInput, counts: list[int], usage: tuple, said_at
) -> Turn:
    """The turn's row and its messages, numbered after the session's last."""
    input_tokens, output_tokens, usage_source, tool_call_count = usage
    first_seq = session.message_count + 1
    turn_row = Turn.objects.create(
        session=session,
        iteration=session.turn_count + 1,
        message_count=len(turn.messages),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        tool_call_count=tool_call_count,
        usage_source=usage_source,
        model=turn.model,
        first_seq=first_seq,
        last_seq=first_seq + len(turn.messages) - 1,
        timestamp=said_at,
    )
    Message.objects.bulk_create(
        Message(
            session=session,
            turn=turn_row,
            seq=first_seq + i,
            role=m.role,
            content=m.content,
            name=m.name or "",
            tool_call_id=m.tool_call_id or "",
            tool_calls=m.tool_calls or None,
            token_count=count,
            created_at=said_at,
        )
        for i, (m, count) in enumerate(zip(turn.messages, counts, strict=True))
    )
    return turn_row


def _write_tool_calls(
    session: Session, turn_row: Turn, turn: TurnInput, known: dict[int, Finding], said_at
) -> None:
    """The turn's tool calls (a call already `known` points at its finding and is
    skipped by extraction), and the whole outputs longer than their excerpt."""
    if not turn.tool_calls:
        return
    excerpt_chars = settings.MEMORYAPP_TOOL_OUTPUT_EXCERPT_CHARS
    rows = ToolCall.objects.bulk_create(
        ToolCall(
            turn=turn_row,
            session=session,
            tool=call.tool,
            query=call.query,
            success=call.success,
            output_size=len(call.output),
            output_excerpt=call.output[:excerpt_chars],
            file_path=call.file_path,
            call_id=call.call_id,
            details=call.details,
            created_at=said_at,
            finding=known.get(call.known_from) if call.known_from else None,
            skipped=call.known_from is not None,
        )
        for call in turn.tool_calls
    )
    # Whole outputs wait for extraction only; it deletes them when done.
    PendingToolOutput.objects.bulk_create(
        PendingToolOutput(tool_call=row, output=call.output)
        for row, call in zip(rows, turn.tool_calls, strict=True)
        if len(call.output) > excerpt_chars
    )


def _stored_turn(
    session: Session, counts: list[int], idempotency_key: str | None, request_hash: str
) -> TurnStored:
    """The answer to an append, from the session as it stands after it (the turn is its
    last); with an Idempotency-Key, recorded for retries in the append's transaction."""
    response: TurnStored = {
        "iteration": session.turn_count,
        "first_seq": session.message_count - len(counts) + 1,
        "last_seq": session.message_count,
        "token_counts": counts,
        "session": session_summary(session),
    }
    if idempotency_key:
        IdempotencyRecord.objects.create(
            session=session, key=idempotency_key, request_hash=request_hash, response=response
        )
    return response


# The common append (a live session, no tool-call rows to write) as one statement that
# locks the session row, numbers the messages after its count, and writes the turn, its
# messages, its extraction job and the session's new totals: one round trip instead of
# eight. PostgreSQL only (data-modifying WITH); elsewhere, and when it finds no live
# session or finds the Idempotency-Key used, append_turn's general path runs.
_APPEND_PG = """
WITH s AS (
    UPDATE core_session SET
        message_count = message_count + %(n)s,
        token_count = token_count + %(tokens)s,
        input_tokens = input_tokens + %(input)s,
        output_tokens = output_tokens + %(output)s,
        turn_count = turn_count + 1,
        last_activity_at = %(now)s,
        expires_at = %(now)s + make_interval(secs => COALESCE(ttl_seconds, %(agent_ttl)s))
    WHERE agent_id = %(agent)s AND "key" = %(key)s AND expires_at > %(now)s
      AND NOT EXISTS (
          SELECT 1 FROM core_idempotencyrecord r
          WHERE r.session_id = core_session.id AND r."key" = %(idempotency_key)s
      )
    RETURNING id, "key", goal, status, metadata, ttl_seconds, created_at, last_activity_at,
        expires_at, message_count, token_count, input_tokens, output_tokens, turn_count
), t AS (
    INSERT INTO core_turn (session_id, iteration, message_count, input_tokens, output_tokens,
        tool_call_count, usage_source, model, first_seq, last_seq, "timestamp")
    SELECT id, turn_count, %(n)s, %(input)s, %(output)s, %(tool_call_count)s,
        %(usage_source)s, %(model)s, message_count - %(n)s + 1, message_count, %(said_at)s
    FROM s
    RETURNING id, session_id, first_seq
), m AS (
    INSERT INTO core_message (session_id, turn_id, seq, role, content, name, tool_call_id,
        tool_calls, token_count, created_at, client_id)
    SELECT t.session_id, t.id, t.first_seq + v.i, v.role, v.content, v.name, v.tool_call_id,
        v.tool_calls::jsonb, v.token_count, %(said_at)s, ''
    FROM t, unnest(%(i)s::int[], %(roles)s::text[], %(contents)s::text[], %(names)s::text[],
        %(tool_call_ids)s::text[], %(tool_calls)s::text[], %(counts)s::int[])
        AS v(i, role, content, name, tool_call_id, tool_calls, token_count)
), j AS (
    INSERT INTO core_extractionjob (turn_id, session_id, status, attempts, last_error,
        findings_added, context_items_set, created_at, queued_at)
    SELECT t.id, t.session_id, %(queued)s, 0, '', 0, 0, %(now)s, %(now)s FROM t
    RETURNING id
), a AS (
    -- With an Idempotency-Key: the answer (_stored_turn's, written here so that the
    -- record of it is part of this statement), recorded for retries and answered.
    SELECT json_build_object(
        'iteration', s.turn_count,
        'first_seq', s.message_count - %(n)s + 1,
        'last_seq', s.message_count,
        'token_counts', to_json(%(counts)s::int[]),
        'session', json_build_object(
            'key', s."key", 'goal', s.goal, 'status', s.status, 'metadata', s.metadata,
            'ttl_seconds', s.ttl_seconds,
            'created_at', @created_at@, 'last_activity_at', @last_activity_at@,
            'expires_at', @expires_at@,
            'totals', json_build_object(
                'messages', s.message_count, 'tokens', s.token_count,
                'input_tokens', s.input_tokens, 'output_tokens', s.output_tokens,
                'turns', s.turn_count
            )
        )
    ) AS answer
    FROM s WHERE %(idempotency_key)s <> ''
), r AS (
    INSERT INTO core_idempotencyrecord (session_id, "key", request_hash, response, created_at)
    SELECT s.id, %(idempotency_key)s, %(request_hash)s, a.answer::jsonb, %(now)s FROM s, a
)
SELECT s.*, j.id, (SELECT answer::text FROM a) FROM s, j
"""


def _isoformat_sql(column: str) -> str:
    """SQL for a timestamptz as Python's isoformat() writes an aware UTC datetime (what
    session_summary answers): microseconds only when there are any."""
    utc = f"(s.{column} AT TIME ZONE 'UTC')"
    return (
        f"to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
        f"date_part('microseconds', s.{column})::bigint %% 1000000 = 0 THEN '' "
        f"ELSE to_char({utc}, '.US') END || '+00:00'"
    )


for _column in ("created_at", "last_activity_at", "expires_at"):
    _APPEND_PG = _APPEND_PG.replace(f"@{_column}@", _isoformat_sql(_column))
_ONE_STATEMENT = {"postgresql": _APPEND_PG}
_RETURNED = (
    "id", "key", "goal", "status", "metadata", "ttl_seconds", "created_at", "last_activity_at",
    "expires_at", "message_count", "token_count", "input_tokens", "output_tokens", "turn_count",
)  # fmt: skip


def _append_in_one_statement(
    agent: Agent,
    key: str,
    turn: TurnInput,
    counts: list[int],
    usage: tuple[int, int, str, int],
    idempotency_key: str | None,
    request_hash: str,
) -> TurnStored | None:
    """append_turn's common case in one statement (see _APPEND_PG); None when it does not
    apply (no live session, or the Idempotency-Key already used) and wrote nothing."""
    now = timezone.now()
    params = {
        **_statement_params(key, turn, counts, usage, idempotency_key, request_hash, now),
        "agent_ttl": agent.ttl_seconds,
        "agent": agent.pk,
    }
    return _run_append(
        _ONE_STATEMENT[connection.vendor],
        params,
        idempotency_key,
        lambda row: _statement_answer(row, agent, counts),
    )


def _run_append(
    sql: str, params: dict[str, Any], idempotency_key: str | None, answer: Callable[[tuple], Any]
) -> Any:
    """`answer` of the row of an append's one statement (_APPEND_PG); None when the
    statement wrote nothing (no row).

    The statement is its own transaction (one round trip), with an Idempotency-Key the
    record of its answer too; inside a caller's transaction, a savepoint keeps that
    transaction usable when a concurrent retry's record wins (only a key can conflict)."""
    nested = idempotency_key and connection.in_atomic_block
    try:
        with transaction.atomic() if nested else nullcontext():
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                row = cursor.fetchone()
            return None if row is None else answer(row)
    except IntegrityError:
        # A concurrent retry with the same Idempotency-Key stored its turn first: nothing
        # of this one was kept; the general path answers the stored turn.
        return None


def _statement_params(
    key: str,
    turn: TurnInput,
    counts: list[int],
    usage: tuple[int, int, str, int],
    idempotency_key: str | None,
    request_hash: str,
    now: datetime,
) -> dict[str, Any]:
    """The parameters of _APPEND_PG but the agent's (its id and TTL)."""
    input_tokens, output_tokens, usage_source, tool_call_count = usage
    n = len(turn.messages)
    return {
        "n": n,
        "tokens": sum(counts),
        "input": input_tokens,
        "output": output_tokens,
        "now": now,
        "key": key,
        "idempotency_key": idempotency_key or "",
        "tool_call_count": tool_call_count,
        "usage_source": usage_source,
        "model": turn.model,
        "said_at": turn.timestamp or now,
        "i": list(range(n)),
        "roles": [m.role for m in turn.messages],
        "contents": [m.content for m in turn.messages],
        "names": [m.name or "" for m in turn.messages],
        "tool_call_ids": [m.tool_call_id or "" for m in turn.messages],
        "tool_calls": [json.dumps(m.tool_calls) if m.tool_calls else None for m in turn.messages],
        "counts": counts,
        "queued": ExtractionJob.Status.QUEUED,
        "request_hash": request_hash,
    }


def _statement_answer(row: tuple, agent: Agent, counts: list[int]) -> TurnStored:
    """The answer of an append by _APPEND_PG from its row (the session's columns, the
    job's id, the recorded answer), its job dispatched once the statement commits."""
    end = len(_RETURNED)
    job_id, answer = row[end], row[end + 1]
    if answer is not None:
        response = json.loads(answer)
    else:
        values = dict(zip(_RETURNED, row[:end], strict=True))
        if isinstance(values["metadata"], str):  # Django reads jsonb as text
            values["metadata"] = json.loads(values["metadata"])
        response = _stored_turn(Session(agent=agent, **values), counts, None, "")
    transaction.on_commit(lambda: dispatch_after_answer(job_id), robust=True)
    return response


def session_summary(session: Session) -> SessionSummary:
    return {
        "key": session.key,
        "goal": session.goal,
        "status": session.status,
        "metadata": session.metadata,
        "ttl_seconds": session.ttl_seconds,
        "created_at": session.created_at.isoformat(),
        "last_activity_at": session.last_activity_at.isoformat(),
        "expires_at": session.expires_at.isoformat(),
        "totals": session.totals(),
    }
