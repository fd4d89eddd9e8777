"""Writing and restoring a session's conversation.

`append_turn` is the single ingest path (the API, the demo importer and the benchmarks
all go through it over HTTP). It holds the session's row lock for the whole write, so
concurrent appends to one session queue up and `seq` stays gapless. `restore_history`
prunes what it returns and never deletes anything.
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
from django.db.models import Q
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
from memoryapp.core.shapes import History, HistoryMessage, SessionSummary, TurnStored
from memoryapp.lib import tokens
from memoryapp.lib.pruning import MessageCost, Run, choose_run, keeps_all


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


# Non-system messages are read newest first in pages of this size.
_HISTORY_PAGE = 256


def _message_rows(
    session: Session, fields: tuple[str, ...], order: str = "seq", *where: Q, **equal: Any
) -> list[dict[str, Any]]:
    """The `fields` of the session's messages that `where` selects, up to its count as
    read (a concurrent append shows whole or not at all): values, not model instances, as
    a whole history is thousands of rows."""
    messages = Message.objects.filter(*where, session=session, **equal)
    messages = messages.filter(seq__lte=session.message_count)
    return list(messages.order_by(order).values(*fields))


def _newest_first(
    session: Session, limit: int, read: dict[int, dict[str, Any]], fields: tuple[str, ...]
):
    """Yield the newest non-system messages' costs, newest first, reading at most
    `limit` of them. Each message read is kept in `read` by seq (its `fields`, for the
    restore to write): the kept run is never read twice.

    Read in windows of seq, newest first: `seq` is gapless, so a window of n seqs holds
    at most n messages whatever the planner believes. (A keyset page, `seq < x ORDER BY
    seq DESC LIMIT n`, made PostgreSQL read a whole 100,000-message session and sort it
    when its statistics predated the session's growth: 40 ms instead of 0.3.)"""
    high = session.message_count  # bounded by the count as read: see restore_history
    remaining = limit
    while remaining > 0 and high >= 0:
        low = max(0, high - min(_HISTORY_PAGE, remaining) + 1)
        page = _message_rows(
            session, fields, "-seq", ~Q(role=Message.Role.SYSTEM), seq__lte=high, seq__gte=low
        )
        for row in page:
            read[row["seq"]] = row
            yield MessageCost(row["seq"], row["role"], row["token_count"])
        remaining -= len(page)
        high = low - 1


# What choosing the kept run reads of a message (a restore reads the whole message).
_COST_FIELDS = ("seq", "role", "token_count")


def _choose(
    session: Session,
    max_messages: int,
    max_tokens: int,
    fields: tuple[str, ...] = (),
    everything: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]], Run]:
    """The pruning rule over the stored session (memoryapp.lib.pruning): its system
    messages, every message read by seq, and the kept run. A session with no more
    messages than the limit and one is read all at once (restore_history reads one within
    the limit itself, to ask whether it all fits); a longer one reads its system messages,
    then the newest others page by page until the run is chosen. `fields`: what is read
    of each message (MESSAGE_FIELDS by default). `everything`: the session's every
    message (oldest first), already read, for a session read all at once."""
    fields = fields or MESSAGE_FIELDS
    read: dict[int, dict[str, Any]] = {}
    if session.message_count <= max_messages + 1:
        if everything is None:
            everything = _message_rows(session, fields)
        system = [m for m in everything if m["role"] == Message.Role.SYSTEM]
        for m in everything:
            read[m["seq"]] = m
        newest_first: Any = (
            MessageCost(m["seq"], m["role"], m["token_count"])
            for m in reversed(everything)
            if m["role"] != Message.Role.SYSTEM
        )
    else:
        system = _message_rows(session, fields, role=Message.Role.SYSTEM)
        limit = max(0, max_messages - len(system)) + 1
        newest_first = _newest_first(session, limit, read, fields)
    run = choose_run(
        newest_first,
        system_count=len(system),
        system_tokens=sum(m["token_count"] for m in system),
        max_messages=max_messages,
        max_tokens=max_tokens,
    )
    return system, read, run


def restore_history(
    session: Session,
    *,
    max_messages: int,
    max_tokens: int,
    write: Callable[[dict[str, Any]], Any] | None = None,
) -> History:
    """The conversation pruned for the context window (see memoryapp.lib.pruning).
    Values, not model instances: a whole history is thousands of rows. `write`: how each
    kept message (its MESSAGE_FIELDS' values) is written (message_dict by default)."""
    everything = None
    if session.message_count <= max_messages:
        everything = _message_rows(session, MESSAGE_FIELDS)
    if everything is not None:
        every_cost = ((m["role"], m["token_count"]) for m in everything)
        stored = keeps_all(every_cost, max_messages=max_messages, max_tokens=max_tokens)
        if stored is not None:  # it all fits: kept as stored, nothing to choose
            return {
                "messages": [(write or message_dict)(m) for m in everything],
                "token_count": stored + tokens.REPLY_PRIMING_TOKENS if everything else 0,
                "pruned_count": session.message_count - len(everything),
                "pruned_tokens": session.token_count - stored,
            }
    system, read, run = _choose(session, max_messages, max_tokens, MESSAGE_FIELDS, everything)
    system_tokens = sum(m["token_count"] for m in system)
    kept = sorted([*system, *(read[seq] for seq in run.seqs)], key=lambda m: m["seq"])
    kept_tokens = system_tokens + run.tokens
    kept_count = len(system) + len(run.seqs)
    return {
        "messages": [(write or message_dict)(m) for m in kept],
        "token_count": tokens.count_messages(m["token_count"] for m in kept),
        "pruned_count": session.message_count - kept_count,
        "pruned_tokens": session.token_count - kept_tokens,
    }


def pruned_point(session: Session, *, max_messages: int, max_tokens: int) -> tuple[int, int]:
    """(pruned_count, pruned_through) of `restore_history` with these limits, reading only
    what choosing the run needs of each message (no contents): what the worker's
    roll-ahead asks after every turn of a session past its limits."""
    system, _, run = _choose(session, max_messages, max_tokens, _COST_FIELDS)
    pruned_count = session.message_count - len(system) - len(run.seqs)
    return pruned_count, (run.seqs[0] - 1) if run.seqs else session.message_count


def pruned_through(session: Session, kept: list[HistoryMessage]) -> int:
    """The last seq a restore that keeps `kept` prunes: before its first kept message
    that is not a system message (all of them when it keeps none)."""
    others = [m["seq"] for m in kept if m["role"] != "system"]
    return others[0] - 1 if others else session.message_count


def roll_summary_ahead(session: Session) -> None:
    """Roll forward the summary the agent's next restore will want: pruned by the limits
    of the restore that rolled it last (Session.summary_max_messages/_tokens: its /context
    when that is what the agent reads, else the default restore, the agent's max_messages
    and conversation budget), so that restore finds it current. The extraction worker
    calls it after each turn: the agent's restore then does not wait for the roll (a
    restore that finds it behind still rolls it itself)."""
    from memoryapp.core.summaries import summarize_pruned

    agent = session.agent
    max_messages = session.summary_max_messages
    max_tokens = session.summary_max_tokens
    if max_messages is None or max_tokens is None:
        max_messages, max_tokens = agent.max_messages, agent.default_conversation_budget()
    if (
        session.message_count <= max_messages
        and session.token_count + tokens.REPLY_PRIMING_TOKENS <= max_tokens
    ):
        return  # it all fits: nothing pruned to summarize (a restore reads nothing more)
    pruned, through = pruned_point(session, max_messages=max_messages, max_tokens=max_tokens)
    if pruned:
        summarize_pruned(session, through)


# What message_dict reads of a message (a model instance, or these columns' values).
MESSAGE_FIELDS = (
    "seq", "role", "content", "token_count", "created_at", "name", "tool_call_id",
    "tool_calls", "client_id", "removed_at", "revisions",
)  # fmt: skip


def message_dict(message: Message | dict[str, Any]) -> HistoryMessage:
    m = message if isinstance(message, dict) else {f: getattr(message, f) for f in MESSAGE_FIELDS}
    data: HistoryMessage = {
        "seq": m["seq"],
        "role": m["role"],
        "content": m["content"],
        "token_count": m["token_count"],
        "created_at": m["created_at"].isoformat(),
    }
    if m["name"]:
        data["name"] = m["name"]
    if m["tool_call_id"]:
        data["tool_call_id"] = m["tool_call_id"]
    if m["tool_calls"]:
        data["tool_calls"] = m["tool_calls"]
    # Written by clients that name their messages and send the whole list (memoryapp/ams).
    if m["client_id"]:
        data["client_id"] = m["client_id"]
    if m["removed_at"] is not None:
        data["removed_at"] = m["removed_at"].isoformat()
    if m["revisions"]:
        data["revisions"] = m["revisions"]
    return data
