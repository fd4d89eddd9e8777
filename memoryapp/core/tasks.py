"""Celery tasks: thin wrappers that take ids and call memoryapp.core.workers,
memoryapp.core.dispatch and memoryapp.core.cleanup. Late acknowledgement (settings) so a
worker that dies mid-task leaves the message for another; transient database errors retry
with backoff. Nothing of memoryapp imports this module but the app's ready() (which
registers the tasks) and the dashboard's cleanup page: the dispatch names extract_turn."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from memoryapp.core import cleanup, dispatch, embeddings, workers


@shared_task(
    autoretry_for=(DatabaseError,),
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=6,
)
def extract_turn(job_id: int) -> str:
    return workers.run_extraction(job_id)


@shared_task
def sweep_extractions() -> int:
    return dispatch.sweep_extractions()


@shared_task(autoretry_for=(DatabaseError,), retry_backoff=5, retry_jitter=True, max_retries=3)
def cleanup_expired(run_id: int | None = None, dry_run: bool = False) -> int | None:
    run = cleanup.run_cleanup(run_id=run_id, dry_run=dry_run)
    return run.pk if run else None


@shared_task(autoretry_for=(DatabaseError,), retry_backoff=5, retry_jitter=True, max_retries=3)
def embed_pending() -> int:
    """Embed what is missing or out of date (memoryapp.core.embeddings), to the end."""
    return embeddings.embed_pending()
