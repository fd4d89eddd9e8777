"""What the Celery workers do, as plain functions (the tasks in tasks.py are thin).

Extraction: after a turn commits, its ExtractionJob is dispatched. Running it turns the
turn's tool calls into findings (each call its own, linked to the turn, message and tool
call it came from; never overwriting a person's manual finding), folds what the turn did
and said into the session's evidence tally and sets the working context that evidence
supports (never over an explicit or manual value), then deletes the whole tool outputs it
no longer needs. A job
that is done is never run again, so running one twice changes nothing.

Dispatch never fails an ingest. Jobs are written `queued` with the turn, so a successful
publish costs no further write; when the broker cannot be reached the job is marked
`pending` and the periodic sweep dispatches it once the broker is back. A job left
`queued` for long (the process died between commit and publish, or a worker lost it) is
dispatched again by the sweep too; running a job twice is harmless. After a failed
dispatch, further dispatches are skipped for a few seconds, so a broker outage costs
ingest one connection timeout, not one per request.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Exists, OuterRef, Subquery
from django.utils import timezone
from kombu.exceptions import ChannelError

from memoryapp.core.models import (
    ContextItem,
    ExtractionJob,
    Finding,
    Message,
    PendingToolOutput,
    Session,
    ToolCall,
)
from memoryapp.lib.backoff import Backoff
from memoryapp.lib.extraction import ToolCallData, context, extract, kinds

logger = logging.getLogger(__name__)

ACTOR = "system:extractor"
BROKER_BACKOFF_SECONDS = 10
SWEEP_PENDING_AFTER = timedelta(seconds=30)
# A job queued this long that the broker's queue cannot be holding was lost (Redis
# restarted without its data, a worker killed holding it): the sweep (every 20 s from
# beat) redoes it, so a lost job is redone within a minute.
SWEEP_QUEUED_AFTER = timedelta(seconds=30)
# The embedded setup has no beat: ingest sweeps, at most this often per process.
EMBEDDED_SWEEP_EVERY_SECONDS = 60
SWEEP_BATCH = 500
# Turns whose evidence the tally holds, remembered so a job run twice counts once.
OBSERVED_TURNS = 500

_broker_backoff = Backoff(BROKER_BACKOFF_SECONDS)


# Work a request leaves for after its answer is sent (see `after_answer`); None outside
# a request that collects it.
_after_answer: contextvars.ContextVar[list[Callable[[], object]] | None] = contextvars.ContextVar(
    "after_answer", default=None
)


@contextlib.contextmanager
def collect_after_answer():
    """Within: `after_answer` collects work instead of running it; yields the list. The
    API middleware runs it when the server closes the response, after the answer went out."""
    work: list[Callable[[], object]] = []
    token = _after_answer.set(work)
    try:
        yield work
    finally:
        _after_answer.reset(token)


def run_after_answer(work: list[Callable[[], object]]) -> None:
    for job in work:
        try:
            job()
        except Exception as exc:  # never an error after the answer went out
            logger.warning("work after the answer failed: %s", exc)


def after_answer(job: Callable[[], object]) -> None:
    """Run `job` once the request's answer is sent (when a request collects such work),
    else now: bookkeeping the answer does not depend on."""
    work = _after_answer.get()
    if work is None:
        job()
    else:
        work.append(job)


def dispatch_after_answer(job_id: int) -> None:
    """Dispatch a committed turn's extraction job once the request's answer is sent: the
    agent need not wait for the publish, and a job never published is redone by the sweep
    (SWEEP_QUEUED_AFTER). Without a broker (extraction runs in process) now: the answer
    comes after the extraction, as before."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        dispatch_extraction(job_id)
    else:
        after_answer(lambda: dispatch_extraction(job_id))


def dispatch_extraction(job_id: int) -> bool:
    """Hand a job to the broker. Jobs are written `queued`, so success costs no write;
    when the broker cannot take it the job is marked `pending` for the sweep."""
    from memoryapp.core.tasks import extract_turn

    if not _broker_backoff.waiting():
        try:
            extract_turn.apply_async((job_id,), retry=False)
            sweep_if_embedded()
            return True
        except Exception as exc:  # broker unreachable, or (in-process mode) the run failed
            logger.warning("extraction job %s not dispatched: %s", job_id, exc)
            _broker_backoff.failed()
    try:
        ExtractionJob.objects.filter(pk=job_id, status=ExtractionJob.Status.QUEUED).update(
            status=ExtractionJob.Status.PENDING
        )
    except DatabaseError as exc:
        # The database went too: the job stays `queued`, which the sweep redoes a minute on.
        logger.warning("extraction job %s left queued for the sweep: %s", job_id, exc)
    return False


_last_embedded_sweep = 0.0


def sweep_if_embedded() -> None:
    """Without a broker there is no beat: jobs left pending (the database failed during
    an in-process run) are retried by the next ingest, at most once a minute."""
    global _last_embedded_sweep
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        return
    now = time.monotonic()
    if now - _last_embedded_sweep < EMBEDDED_SWEEP_EVERY_SECONDS:
        return
    _last_embedded_sweep = now  # set first: the sweep's own dispatches do not sweep again
    try:
        sweep_extractions()
    except Exception as exc:  # never fail the agent's request for a retry that can wait
        logger.warning("embedded extraction sweep failed: %s", exc)


def _broker_backlog() -> int | None:
    """Messages waiting in the extraction queue, or None when it cannot be read."""
    from memoryapp import celery_app

    try:
        with celery_app.connection_for_read() as connection:
            declared = connection.default_channel.queue_declare(
                queue=celery_app.conf.task_default_queue, passive=True
            )
            return declared.message_count
    except ChannelError as exc:
        if getattr(exc, "code", None) == 404 or "NOT_FOUND" in str(exc):
            return 0  # no such queue (Redis keeps no empty list): nothing is waiting
        logger.warning("cannot read the extraction queue's length: %s", exc)
        return None
    except Exception as exc:
        logger.warning("cannot read the extraction queue's length: %s", exc)
        return None


def reset_broker_backoff() -> None:
    _broker_backoff.reset()


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
            cwd = session.cwd
            observations: list = []

            calls = (
                list(
                    ToolCall.objects.filter(turn=turn)
                    .select_related("pending_output")
                    .order_by("id")
                )
                if has_calls
                else []
            )
            sources: list[tuple[ToolCallData, ToolCall | None, Message | None]] = []
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
            if not calls:
                sources = [
                    (ToolCallData(tool, query, output), None, message)
                    for tool, query, output, message in _tool_results_from_messages(turn, messages)
                ]
            added = 0
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
            _store_facts(calls)

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
    wants rolled forward (conversation.roll_summary_ahead), from the session row
    the job read under its lock. Never fails the job: a restore rolls it itself when it
    is behind."""
    from memoryapp.core.conversation import roll_summary_ahead

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


def sweep_extractions(now=None) -> int:
    """Dispatch jobs that never reached the broker, or that a lost worker left queued."""
    now = now or timezone.now()
    reset_broker_backoff()
    stale = list(
        ExtractionJob.objects.filter(
            status=ExtractionJob.Status.PENDING, created_at__lte=now - SWEEP_PENDING_AFTER
        )
        .order_by("created_at")
        .values_list("id", flat=True)[:SWEEP_BATCH]
    )
    queued_long = list(
        ExtractionJob.objects.filter(
            status=ExtractionJob.Status.QUEUED, queued_at__lte=now - SWEEP_QUEUED_AFTER
        )
        .order_by("queued_at")
        .values_list("id", flat=True)[:SWEEP_BATCH]
    )
    if queued_long:
        # The queue holds at most `backlog` of the jobs marked queued, the newest ones (it
        # is first in, first out): the oldest beyond that are not waiting their turn, they
        # were lost (Redis restarted without its data, a worker killed holding them). Redo
        # those; a job a worker is running right now may be sent twice, which is harmless
        # (a job that is done is never run again).
        backlog = 0 if settings.CELERY_TASK_ALWAYS_EAGER else _broker_backlog()
        if backlog is not None:
            queued = ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).count()
            stale += queued_long[: max(0, queued - backlog)]
    dispatched = 0
    for job_id in stale:
        ExtractionJob.objects.filter(pk=job_id).exclude(status=ExtractionJob.Status.DONE).update(
            status=ExtractionJob.Status.QUEUED, queued_at=timezone.now()
        )
        if not dispatch_extraction(job_id):
            break  # the broker is still down: try again at the next sweep
        dispatched += 1
    return dispatched
