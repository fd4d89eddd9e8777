"""What the Celery workers do, as plain functions (the tasks in tasks.py are thin).

Extraction: after a turn commits, its ExtractionJob is dispatched. Running it turns the
turn's assistant text into inferred working context (confidence 0.6, never overwriting a
stronger explicit or manual value) and its tool calls into findings (never overwriting a
person's manual finding), then deletes the whole tool outputs it no longer needs. A job
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

import logging
import threading
import time
from datetime import timedelta

from django.db import DatabaseError, transaction
from django.utils import timezone

from memoryapp.core.models import (
    ContextItem,
    ExtractionJob,
    Finding,
    Message,
    PendingToolOutput,
    ToolCall,
)
from memoryapp.lib.extraction import INFERRED_CONFIDENCE, finding_from_tool, infer_context

logger = logging.getLogger(__name__)

ACTOR = "system:extractor"
BROKER_BACKOFF_SECONDS = 10
SWEEP_PENDING_AFTER = timedelta(seconds=30)
SWEEP_QUEUED_AFTER = timedelta(minutes=15)
SWEEP_BATCH = 500

_broker_down_until = 0.0
_broker_lock = threading.Lock()


def dispatch_extraction(job_id: int) -> bool:
    """Hand a job to the broker. Jobs are written `queued`, so success costs no write;
    when the broker cannot take it the job is marked `pending` for the sweep."""
    global _broker_down_until
    from memoryapp.core.tasks import extract_turn

    if time.monotonic() >= _broker_down_until:
        try:
            extract_turn.apply_async((job_id,), retry=False)
            return True
        except Exception as exc:  # broker unreachable, or (in-process mode) the run failed
            logger.warning("extraction job %s not dispatched: %s", job_id, exc)
            with _broker_lock:
                _broker_down_until = time.monotonic() + BROKER_BACKOFF_SECONDS
    ExtractionJob.objects.filter(pk=job_id, status=ExtractionJob.Status.QUEUED).update(
        status=ExtractionJob.Status.PENDING
    )
    return False


def reset_broker_backoff() -> None:
    global _broker_down_until
    _broker_down_until = 0.0


def _tool_results_from_messages(turn) -> list[tuple[str, str, str]]:
    """(tool, arguments, output) for tool messages answering an assistant's tool call, for
    agents that send OpenAI-style messages without a turn-level `tool_calls` list."""
    results = []
    tool_messages = list(
        Message.objects.filter(turn=turn, role=Message.Role.TOOL).exclude(tool_call_id="")
    )
    if not tool_messages:
        return results
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
    for message in tool_messages:
        if message.tool_call_id in calls:
            name, arguments = calls[message.tool_call_id]
            results.append((name, arguments, message.content))
    return results


def run_extraction(job_id: int) -> str:
    """Run one job; answers what happened ("done", "skipped", "missing", "failed")."""
    try:
        with transaction.atomic():
            job = (
                ExtractionJob.objects.select_for_update()
                .select_related("turn__session__agent")
                .filter(pk=job_id)
                .first()
            )
            if job is None:
                return "missing"
            if job.status == ExtractionJob.Status.DONE:
                return "skipped"
            turn, session = job.turn, job.turn.session
            job.attempts += 1

            inferred: dict[str, str] = {}
            for text in Message.objects.filter(turn=turn, role=Message.Role.ASSISTANT).values_list(
                "content", flat=True
            ):
                inferred.update(infer_context(text))
            items_set = 0
            for key, value in inferred.items():
                _, applied = ContextItem.put(
                    session,
                    key,
                    value,
                    source=ContextItem.Source.INFERRED,
                    confidence=INFERRED_CONFIDENCE,
                    actor=ACTOR,
                )
                items_set += applied

            calls = list(ToolCall.objects.filter(turn=turn).select_related("pending_output"))
            sources: list[tuple[str, str, str, bool | None, str]] = []
            for call in calls:
                pending = getattr(call, "pending_output", None)
                if pending is None and call.output_size > len(call.output_excerpt):
                    continue  # whole output already extracted and deleted: never from a part
                output = pending.output if pending is not None else call.output_excerpt
                sources.append((call.tool, call.query, output, call.success, call.file_path))
            if not calls:
                sources = [(t, q, o, None, "") for t, q, o in _tool_results_from_messages(turn)]
            added = 0
            for tool, query, output, success, file_path in sources:
                extracted = finding_from_tool(tool, query, output, success, file_path)
                known = Finding.known(session, extracted.tool, extracted.query)
                if known is not None and known.source == Finding.Source.MANUAL:
                    continue  # a person's correction wins over extraction
                _, created = Finding.record(
                    session,
                    tool=extracted.tool,
                    query=extracted.query,
                    fact=extracted.fact,
                    success=extracted.success,
                    file_path=extracted.file_path,
                    step=turn.iteration,
                    source=Finding.Source.EXTRACTED,
                    actor=ACTOR,
                )
                added += created
            PendingToolOutput.objects.filter(tool_call__turn=turn).delete()
            job.status = ExtractionJob.Status.DONE
            job.findings_added = added
            job.context_items_set = items_set
            job.last_error = ""
            job.finished_at = timezone.now()
            job.save()
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
    ) + list(
        ExtractionJob.objects.filter(
            status=ExtractionJob.Status.QUEUED, queued_at__lte=now - SWEEP_QUEUED_AFTER
        )
        .order_by("queued_at")
        .values_list("id", flat=True)[:SWEEP_BATCH]
    )
    dispatched = 0
    for job_id in stale:
        ExtractionJob.objects.filter(pk=job_id).exclude(status=ExtractionJob.Status.DONE).update(
            status=ExtractionJob.Status.QUEUED, queued_at=timezone.now()
        )
        if not dispatch_extraction(job_id):
            break  # the broker is still down: try again at the next sweep
        dispatched += 1
    return dispatched
