"""Work a request hands on: bookkeeping left for after its answer is sent, and extraction
jobs handed to the broker (memoryapp.core.workers runs them, in the Celery tasks of
memoryapp.core.tasks), with the sweep that hands on what the broker did not take.

Dispatch never fails an ingest. Jobs are written `queued` with the turn, so a successful
publish costs no further write; when the broker cannot be reached the job is marked
`pending` and the periodic sweep dispatches it once the broker is back. A job left
`queued` for long (the process died between commit and publish, or a worker lost it) is
dispatched again by the sweep too; running a job twice is harmless. After a failed
dispatch, further dispatches are skipped for a few seconds, so a broker outage costs
ingest one connection timeout, not one per request.

The extraction task is named here, not imported: the tasks import the workers, which
import the conversation, which dispatches through here, and an import back would close
that circle. The name is looked up in the Celery app's registry, as the task object of
`@shared_task` itself does; memoryapp.core.apps imports the tasks, so every process has
them registered (the web process too, which runs them itself without a broker).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from kombu.exceptions import ChannelError

from memoryapp.core.models import ExtractionJob
from memoryapp.lib.backoff import Backoff

logger = logging.getLogger(__name__)

# The Celery task that runs one job (memoryapp.core.tasks.extract_turn).
EXTRACT_TURN = "memoryapp.core.tasks.extract_turn"
BROKER_BACKOFF_SECONDS = 10
SWEEP_PENDING_AFTER = timedelta(seconds=30)
# A job queued this long that the broker's queue cannot be holding was lost (Redis
# restarted without its data, a worker killed holding it): the sweep (every 20 s from
# beat) redoes it, so a lost job is redone within a minute.
SWEEP_QUEUED_AFTER = timedelta(seconds=30)
# The embedded setup has no beat: ingest sweeps, at most this often per process.
EMBEDDED_SWEEP_EVERY_SECONDS = 60
SWEEP_BATCH = 500

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
    if not _broker_backoff.waiting():
        try:
            current_app.tasks[EXTRACT_TURN].apply_async((job_id,), retry=False)
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
    try:
        with current_app.connection_for_read() as connection:
            declared = connection.default_channel.queue_declare(
                queue=current_app.conf.task_default_queue, passive=True
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
