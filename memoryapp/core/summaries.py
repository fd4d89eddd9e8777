"""The stored rolling summary of a session's pruned history.

When a restore prunes messages the summary does not cover yet, it is rolled forward over
the newly pruned messages and their tool calls (each message is read once, ever; at most
`MAX_MESSAGES_PER_CALL` in one call) and stored on the session with its structured
state. The default summarizer is extractive and needs no model (memoryapp.lib.summarize);
`MEMORYAPP_SUMMARIZER_URL` points at an OpenAI-compatible
endpoint instead. A failing summarizer never drops or hides messages: pruning does not
depend on it, the last good summary is returned, and the answer says it is stale.
"""

from __future__ import annotations

import logging

import httpx
from django.conf import settings
from django.db import connection
from django.utils import timezone

from memoryapp.core.models import Message, Session, ToolCall
from memoryapp.core.restore import pruned_point
from memoryapp.core.shapes import Summary
from memoryapp.lib import summarize, tokens
from memoryapp.lib.extraction import ToolCallData, extract
from memoryapp.lib.extraction.text import one_line

logger = logging.getLogger(__name__)

MAX_MESSAGES_PER_CALL = 5000
# Earlier states kept with the summary, to roll again from when a call prunes less.
CHECKPOINTS = 6


class SummarizerError(Exception):
    pass


def _task(session: Session) -> str:
    first_user = (
        Message.objects.filter(session=session, role=Message.Role.USER)
        .order_by("seq")
        .values_list("content", flat=True)
        .first()
    )
    return session.goal or first_user or ""


def _model_summary(previous: list[str], task: str, events: list) -> list[str]:
    """Ask an OpenAI-compatible chat endpoint for the rolled-forward summary."""
    transcript = "\n".join(
        f"{e.role}: {e.text[:2000]}"
        if isinstance(e, summarize.Said)
        else f"tool {e.tool}: {e.fact}"
        for e in events
    )
    prompt = (
        "Update the running summary of an agent's conversation. Keep it under 20 short "
        "lines: the task, decisions, facts learned, files touched, open problems.\n\n"
        f"Task: {task[:1000]}\n\nSummary so far:\n"
        + "\n".join(previous)
        + "\n\nNew messages:\n"
        + transcript
    )
    headers = {}
    if settings.MEMORYAPP_SUMMARIZER_API_KEY:
        headers["Authorization"] = f"Bearer {settings.MEMORYAPP_SUMMARIZER_API_KEY}"
    try:
        response = httpx.post(
            settings.MEMORYAPP_SUMMARIZER_URL.rstrip("/") + "/chat/completions",
            json={
                "model": settings.MEMORYAPP_SUMMARIZER_MODEL,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0,
            },
            headers=headers,
            timeout=settings.MEMORYAPP_SUMMARIZER_TIMEOUT,
        )
        response.raise_for_status()
        text = response.json()["choices"][0]["message"]["content"]
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise SummarizerError(f"summarizer endpoint failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(text, str) or not text.strip():
        raise SummarizerError("summarizer endpoint returned no text")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[: summarize.MAX_LINES]


# What _events reads of a tool call, its turn and its finding (see _calls).
_CALL_FIELDS = (
    "id", "turn", "tool", "query", "success", "output_excerpt", "file_path", "details",
    "kind", "fact", "fact_success", "finding",
)  # fmt: skip


def _said(session: Session, first: int, last: int) -> list[tuple[int, str, str, str]]:
    """(seq, role, content, name) of messages `first`..`last` that are not system
    messages, in order, by a fixed statement: what
    `Message.objects.filter(session=session, seq__gte=first, seq__lte=last)
    .exclude(role="system").order_by("seq").values_list("seq", "role", "content", "name")`
    gives (plain columns: nothing to convert)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT m.seq, m.role, m.content, m.name FROM {Message._meta.db_table} m "
            "WHERE m.session_id = %s AND m.seq >= %s AND m.seq <= %s AND m.role <> %s "
            "ORDER BY m.seq",
            [session.pk, first, last, Message.Role.SYSTEM],
        )
        return cursor.fetchall()


def _calls(session: Session, first: int, last: int) -> list[ToolCall]:
    """The tool calls of the turns that end in `first`..`last`, in order, with what
    _events reads of each (`_CALL_FIELDS`; of the turn its iteration and last seq, of the
    finding what it shows)."""
    calls = list(
        ToolCall.objects.filter(
            session=session, turn__last_seq__gte=first, turn__last_seq__lte=last
        )
        .select_related("turn", "finding")
        .only(
            *_CALL_FIELDS,
            "turn__iteration",
            "turn__last_seq",
            "finding__query",
            "finding__file_path",
            "finding__details",
        )
        .order_by("turn__iteration", "id")
    )
    for call in calls:
        call.session = session
    return calls


def _events(session: Session, first: int, last: int) -> list:
    """What happened in messages `first`..`last`, in order: what was said, and each tool
    call with its own extracted fact (computed now when extraction has not run yet)."""
    messages = _said(session, first, last)
    calls = _calls(session, first, last)
    # A named user message is a tool's output relayed as one (SWE-agent's observations,
    # aider's command output, a demonstration), not what the person said.
    events: list = [
        summarize.Said(seq, role, content)
        for seq, role, content, name in messages
        if role != "tool" and not (role == "user" and name)
    ]
    for call in calls:
        if call.kind:
            kind, fact, ok = call.kind, call.fact, bool(call.fact_success)
            details = call.finding.details if call.finding_id and call.finding else None
            path, query = (
                (call.finding.file_path, call.finding.query)
                if call.finding_id and call.finding
                else ("", call.query)
            )
        else:
            found = extract(
                ToolCallData(
                    call.tool,
                    call.query,
                    call.output_excerpt,
                    call.success,
                    call.file_path,
                    call.details,
                )
            )
            kind, fact, ok, details, path, query = (
                found.kind,
                found.fact,
                found.success,
                found.details,
                found.file_path,
                found.query,
            )
        events.append(
            summarize.Did(call.turn.last_seq, kind, call.tool, query, fact, ok, path, details)
        )
    if not calls:  # OpenAI-style sessions: the tool messages are all there is
        for seq, role, content, name in messages:
            if role == "tool":
                line = one_line(content, 160)
                events.append(summarize.Did(seq, "other", name or "tool", "", line))
    events.sort(key=lambda e: (e.seq, isinstance(e, summarize.Did)))
    return events


def _rewound(session: Session, pruned_through: int) -> tuple[dict | None, list[dict], int]:
    """Where to roll from: the stored state and its checkpoints, or, when the stored
    summary already covers more than this call prunes (an earlier call had a smaller
    budget), the latest checkpoint that does not — the summary and the kept run never
    overlap. Answers (state, checkpoints, the seq it covers through)."""
    state = session.summary_state if isinstance(session.summary_state, dict) else None
    checkpoints = list((state or {}).get("checkpoints") or [])
    head = {k: v for k, v in (state or {}).items() if k != "checkpoints"} or None
    covered = session.summary_through_seq
    if covered <= pruned_through:
        return head, checkpoints, covered
    earlier = [c for c in checkpoints if c.get("through_seq", 0) <= pruned_through]
    base = max(earlier, key=lambda c: c["through_seq"]) if earlier else None
    kept = [c for c in checkpoints if base is None or c["through_seq"] < base["through_seq"]]
    return base, kept, base["through_seq"] if base else 0


def _store(
    session: Session,
    stored: int,
    text: str,
    state: dict | None,
    end: int,
    limits: tuple[int, int] | None,
) -> None:
    """The rolled summary written to the session row, by a fixed statement (what
    `Session.objects.filter(pk=…, summary_through_seq=stored).update(…)` writes; the
    values adapted by their fields as the ORM adapts them), with `limits`, when given, as
    the ones the worker rolls ahead for. Conditional: of two concurrent rolls (a restore
    and the worker's), the first to finish stores its own."""
    field = Session._meta.get_field
    recorded = ", summary_max_messages = %s, summary_max_tokens = %s" if limits else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Session._meta.db_table} SET summary = %s, summary_state = %s, "
            f"summary_through_seq = %s, summary_updated_at = %s, summary_error = ''{recorded} "
            "WHERE id = %s AND summary_through_seq = %s",
            [
                text,
                field("summary_state").get_db_prep_save(state, connection),
                end,
                field("summary_updated_at").get_db_prep_save(timezone.now(), connection),
                *(limits or ()),
                session.pk,
                stored,
            ],
        )
    if limits:
        session.summary_max_messages, session.summary_max_tokens = limits


def summarize_pruned(
    session: Session, pruned_through: int, limits: tuple[int, int] | None = None
) -> Summary | None:
    """The summary of messages up to `pruned_through` (the last pruned seq), rolled
    forward over what was pruned since the last time. None when nothing was pruned.
    `limits`: the (max_messages, max_tokens) of the restore that pruned there; stored with
    a summary this call rolls, the worker then rolls ahead for them (see
    roll_summary_ahead).
    At most `MAX_MESSAGES_PER_CALL` messages are read in one call, oldest first; the span
    beyond is named in the summary as not summarised yet, and the next calls go on from
    where this one stopped (`covers_through_seq` says how far it got). A summary never
    covers a message the caller keeps: when the stored one reaches further (a call with a
    smaller budget pruned more), it is rolled again from an earlier checkpoint."""
    if pruned_through <= 0:
        return None
    stored = session.summary_through_seq
    base, checkpoints, covered = _rewound(session, pruned_through)
    if covered < pruned_through or covered != stored:
        start = covered + 1
        end = min(pruned_through, start + MAX_MESSAGES_PER_CALL - 1)
        try:
            events = _events(session, start, end) if start <= end else []
            # The rolled state keeps the task it was first given: read it only for a state
            # without one (or for the model, which is told it each time).
            has_task = summarize.is_state(base) and base.get("task")
            task = "" if has_task and not settings.MEMORYAPP_SUMMARIZER_URL else _task(session)
            if settings.MEMORYAPP_SUMMARIZER_URL:
                previous = (
                    session.summary.splitlines() if session.summary and covered == stored else []
                )
                lines = _model_summary(previous, task, events)
                state = base
            else:
                pending = (end + 1, pruned_through) if end < pruned_through else None
                state = summarize.roll(base, task, events, cwd=session.cwd, pending=pending)
                lines = summarize.render(state)
                if base is not None and base.get("through_seq", 0) < state["through_seq"]:
                    checkpoints = (checkpoints + [base])[-CHECKPOINTS:]
                state = {**state, "checkpoints": checkpoints}
        except Exception as exc:  # any failure: keep the last good summary, say stale
            logger.warning("summary of session %s failed: %s", session.pk, exc)
            error = str(exc)[:500]
            Session.objects.filter(pk=session.pk).update(summary_error=error)
            return {
                "text": session.summary if stored <= pruned_through else "",
                "covers_through_seq": min(stored, pruned_through),
                "stale": True,
                "error": error,
            }
        text = "\n".join(lines)
        _store(session, stored, text, state, end, limits)
        session.summary, session.summary_through_seq = text, end
        session.summary_state = state
    return {
        "text": session.summary,
        "covers_through_seq": session.summary_through_seq,
        "stale": False,
        "error": None,
    }


def roll_summary_ahead(session: Session) -> None:
    """Roll forward the summary the agent's next restore will want: pruned by the limits
    of the restore that rolled it last (Session.summary_max_messages/_tokens: its /context
    when that is what the agent reads, else the default restore, the agent's max_messages
    and conversation budget), so that restore finds it current. The extraction worker
    calls it after each turn: the agent's restore then does not wait for the roll (a
    restore that finds it behind still rolls it itself)."""
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
