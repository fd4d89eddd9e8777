"""What the Celery workers do, as plain functions (the tasks in tasks.py are thin).

Extraction: after a turn commits, its ExtractionJob is dispatched (memoryapp.core.dispatch).
Running it turns the turn's tool calls into findings (each call its own, linked to the
turn, message and tool call it came from; never overwriting a person's manual finding),
folds what the turn did and said into the session's evidence tally and sets the working
context that evidence supports (never over an explicit or manual value), then deletes the
whole tool outputs it no longer needs. A job that is done is never run again, so running
one twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Exists, OuterRef, Subquery
from django.utils import timezone

from memoryapp.core.models import (
    ContextItem,
    ExtractionJob,
    Finding,
    Message,
    PendingToolOutput,
    Session,
    ToolCall,
)
from memoryapp.core.summaries import roll_summary_ahead
from memoryapp.lib.extraction import ToolCallData, context, extract, kinds

logger = logging.getLogger(__name__)

ACTOR = "system:extractor"
# Turns whose evidence the tally holds, remembered so a job run twice counts once.
OBSERVED_TURNS = 500


def _tool_results_from_messages(turn, messages: list[Message]) -> list[tuple]:
    """(tool, arguments, output, tool message) for tool messages answering an assistant's
    tool call, for agents that send OpenAI-style messages without a turn-level
    `tool_calls` list."""
    tool_messages = [m for m in messages if m.role == Message.Role.TOOL and m.tool_call_id]
    if not tool_messages:
        return []
    # Calls the agent also reported as turn-level tool calls were extracted from those,
    # with their structured details: never a second time from the message.
    reported = set(
        ToolCall.objects.filter(
            session=turn.session, call_id__in={m.tool_call_id for m in tool_messages}
        ).values_list("call_id", flat=True)
    )
    tool_messages = [m for m in tool_messages if m.tool_call_id not in reported]
    if not tool_messages:
        return []
    # The calls were made by an assistant message of this turn or one of the last turns.
    calls = {}
    assistants = (
        Message.objects.filter(
            session=turn.session, role=Message.Role.ASSISTANT, seq__lte=turn.last_seq
        )
        .filter(tool_calls__isnull=False)
        .order_by("-seq")[:20]
    )
    for message in assistants:
        for call in message.tool_calls or []:
            if isinstance(call, dict) and call.get("id"):
                function = call.get("function") or {}
                calls.setdefault(
                    call["id"],
                    (str(function.get("name") or "unknown"), str(function.get("arguments") or "")),
                )
    return [
        (*calls[m.tool_call_id], m.content, m) for m in tool_messages if m.tool_call_id in calls
    ]


def _message_of_call(messages: list[Message], call_id: str) -> Message | None:
    """The message a call's finding came from: the tool result when it is in this turn,
    else the assistant message that made the call, else the turn's last assistant one."""
    if call_id:
        for message in messages:
            if message.role == Message.Role.TOOL and message.tool_call_id == call_id:
                return message
        for message in messages:
            if any(
                isinstance(c, dict) and c.get("id") == call_id for c in message.tool_calls or []
            ):
                return message
    assistants = [m for m in messages if m.role == Message.Role.ASSISTANT]
    return assistants[-1] if assistants else None


def run_extraction(job_id: int) -> str:
    """Run one job; answers what happened ("done", "skipped", "missing", "failed")."""
    try:
        with transaction.atomic():
            # The session's row first, then the job's: the order the TTL cleanup locks
            # them in (the session, then its jobs as it deletes them), so the two never
            # wait for each other in a circle. The session's evidence tally is read and
            # written under that lock.
            of_job = ExtractionJob.objects.filter(pk=job_id).values("session_id")[:1]
            session = (
                Session.objects.select_related("agent")
                .select_for_update(of=("self",))
                .filter(id=Subquery(of_job))
                .first()
            )
            job, has_calls = _locked_job(job_id) if session is not None else (None, False)
            if job is None:
                return "missing"
            if job.status == ExtractionJob.Status.DONE:
                return "skipped"
            turn = job.turn
            turn.session = session
            messages = list(Message.objects.filter(turn=turn).order_by("seq"))
            calls, sources = _sources(turn, messages, has_calls)
            added, observations = _extract_all(session, turn, sources)
            _store_facts(calls)
            observations += _message_observations(turn, messages)
            items_set, tally = _apply_evidence(session, turn, messages, observations)

            # The turn's whole outputs, now findings: read with the calls (none, most often).
            pending = [c.pending_output.pk for c in calls if getattr(c, "pending_output", None)]
            if pending:
                PendingToolOutput.objects.filter(pk__in=pending).delete()
            _finish(job, session, tally, findings_added=added, context_items_set=items_set)
        # Ahead of the next restore, in the worker; not in the request (embedded), and not
        # with a summarizer model (a call per turn instead of per restore costs money).
        if not settings.CELERY_TASK_ALWAYS_EAGER and not settings.MEMORYAPP_SUMMARIZER_URL:
            _summarize_ahead(turn.session)
        return "done"
    except DatabaseError:
        raise  # transient: the task retries with backoff
    except Exception as exc:
        logger.exception("extraction job %s failed", job_id)
        ExtractionJob.objects.filter(pk=job_id).update(
            status=ExtractionJob.Status.FAILED,
            last_error=f"{type(exc).__name__}: {exc}"[:2000],
            finished_at=timezone.now(),
        )
        return "failed"


Source = tuple[ToolCallData, ToolCall | None, Message | None]


def _sources(turn, messages: list[Message], has_calls: bool) -> tuple[list[ToolCall], list[Source]]:
    """The turn's tool calls, and what extraction reads: each call run and not yet
    extracted from its whole output, with the message it was made in; without calls, the
    tool results its messages carry."""
    calls = (
        list(ToolCall.objects.filter(turn=turn).select_related("pending_output").order_by("id"))
        if has_calls
        else []
    )
    if not calls:
        return calls, [
            (ToolCallData(tool, query, output), None, message)
            for tool, query, output, message in _tool_results_from_messages(turn, messages)
        ]
    sources: list[Source] = []
    for call in calls:
        if call.skipped:
            continue  # not run: its finding stands as it is
        pending = getattr(call, "pending_output", None)
        if pending is None and call.output_size > len(call.output_excerpt):
            continue  # whole output already extracted and deleted: never from a part
        output = pending.output if pending is not None else call.output_excerpt
        data = ToolCallData(
            call.tool, call.query, output, call.success, call.file_path, call.details
        )
        sources.append((data, call, _message_of_call(messages, call.call_id)))
    return calls, sources


def _extract_all(session: Session, turn, sources: list[Source]) -> tuple[int, list]:
    """Each source's finding recorded (its call given its fact) and the evidence it
    gives working context: (findings added, observations)."""
    cwd = session.cwd
    added, observations = 0, []
    for data, call, message in sources:
        extracted = extract(data, cwd)
        finding, created = _record(session, turn, extracted, call, message)
        added += created
        if call is not None:
            call.kind, call.fact = extracted.kind, extracted.fact
            call.fact_success, call.finding = extracted.success, finding
        seen = context.observations_for_call(
            kind=extracted.kind,
            file_path=extracted.file_path,
            success=extracted.success,
            details=extracted.details,
            command=kinds.command_of(data.args, data.query)
            if extracted.kind in (kinds.SHELL, kinds.BOOKKEEPING)
            else "",
            output=data.output[:20000],
            cwd=cwd,
        )
        # Each piece of evidence links to the message it was seen in.
        seq = message.seq if message is not None else None
        observations += [dataclasses.replace(o, seq=seq) for o in seen]
    return added, observations


def _message_observations(turn, messages: list[Message]) -> list:
    """The evidence for working context in what the person and the agent said."""
    observations: list = []
    for message in messages:
        # A named user message is a tool's output relayed as one (SWE-agent's
        # observations, aider's command output), not what the person said.
        if message.role == Message.Role.USER and message.name:
            continue
        if message.role in (Message.Role.USER, Message.Role.ASSISTANT):
            observations += [
                dataclasses.replace(o, seq=message.seq)
                for o in context.observations_for_message(
                    message.role, message.content, first_prompt=turn.iteration == 1
                )
            ]
    return observations


def _locked_job(job_id: int) -> tuple[ExtractionJob | None, bool]:
    """The job with its turn, its row locked for the transaction (as
    `select_related("turn").select_for_update(of=("self",))`), and whether the turn has
    tool calls: most turns have none, and then their query is not made. That answer is
    read in the statement's snapshot, not again after a wait for the job's lock: a turn's
    tool calls are written in the transaction that writes its job (conversation.py, the
    import), so none can appear after the job is there."""
    job = (
        ExtractionJob.objects.select_related("turn")
        .select_for_update(of=("self",))
        .annotate(has_calls=Exists(ToolCall.objects.filter(turn_id=OuterRef("turn_id"))))
        .filter(pk=job_id)
        .first()
    )
    return job, bool(job is not None and job.has_calls)


def _store_facts(calls: list[ToolCall]) -> None:
    """What extraction made of each call (its kind, fact, success and finding) written to
    the calls: one fixed statement, sent for all of them at once (executemany), where
    `bulk_update` compiled a CASE per row through the ORM each time (a third of a
    one-call turn's extraction, in process)."""
    if not calls:
        return
    sql = (
        f"UPDATE {ToolCall._meta.db_table} SET kind = %s, fact = %s, fact_success = %s, "
        "finding_id = %s WHERE id = %s"
    )
    values = [(c.kind, c.fact, c.fact_success, c.finding_id, c.pk) for c in calls]
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def _finish(
    job: ExtractionJob,
    session: Session,
    tally: dict | None,
    *,
    findings_added: int,
    context_items_set: int,
) -> None:
    """The job marked done and, when the turn changed it, the session's evidence tally
    written."""
    job.status = ExtractionJob.Status.DONE
    job.attempts += 1
    job.findings_added, job.context_items_set = findings_added, context_items_set
    job.last_error, job.finished_at = "", timezone.now()
    job.save(
        update_fields=[
            "status",
            "attempts",
            "findings_added",
            "context_items_set",
            "last_error",
            "finished_at",
        ]
    )
    if tally is not None:
        Session.objects.filter(pk=session.pk).update(evidence=tally)
        session.evidence = tally


def _summarize_ahead(session: Session) -> None:
    """After a turn's extraction, in the worker: the summary the agent's next restore
    wants rolled forward (summaries.roll_summary_ahead), from the session row
    the job read under its lock. Never fails the job: a restore rolls it itself when it
    is behind."""
    try:
        roll_summary_ahead(session)
    except Exception as exc:
        logger.warning("summary of session %s not rolled ahead: %s", session.pk, exc)


def _record(session, turn, extracted, call, message) -> tuple[Finding, bool]:
    """Record one extracted finding; a person's correction of that call wins."""
    return Finding.record(
        session,
        tool=extracted.tool,
        query=extracted.query,
        fact=extracted.fact,
        kind=extracted.kind,
        identity=extracted.identity,
        details=extracted.details,
        success=extracted.success,
        file_path=extracted.file_path,
        step=turn.iteration,
        source=Finding.Source.EXTRACTED,
        actor=ACTOR,
        turn=turn,
        message=message,
        tool_call=call,
        keep_manual=True,
    )


def _apply_evidence(session, turn, messages, observations) -> tuple[int, dict | None]:
    """Fold this turn's observations into the session's tally and set the working-context
    items it now supports (only those whose value or confidence changed). Answers how
    many were set and the tally to store (None: unchanged)."""
    if not observations and session.evidence is None:
        return 0, None
    observed = (session.evidence or {}).get("turns") or []
    if turn.iteration in observed:
        return 0, None  # a job run again: its evidence is already counted
    ref = {"turn": turn.iteration, "seq": messages[-1].seq if messages else turn.last_seq}
    tally = context.observe(session.evidence, observations, ref)
    tally["turns"] = (observed + [turn.iteration])[-OBSERVED_TURNS:]
    previous = tally.get("decided", {})
    decided = context.decide(tally)
    items_set = 0
    for key, decision in decided.items():
        if previous.get(key) == [decision.value, decision.confidence]:
            continue
        _, applied = ContextItem.put(
            session,
            key,
            decision.value,
            source=ContextItem.Source.INFERRED,
            confidence=decision.confidence,
            actor=ACTOR,
            evidence=decision.evidence,
        )
        items_set += applied
    tally["decided"] = {k: [d.value, d.confidence] for k, d in decided.items()}
    return items_set, tally
