"""TTL cleanup: remove expired sessions and everything under them, in short batches.

Each batch is one transaction that locks only sessions that are still expired
(`SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite serializes writers), so a session
written to while the cleanup runs — its expiry slid forward — is never removed, and ingest
into live sessions goes on normally. Rows are removed with one DELETE per table and batch
instead of Django's cascade collector, which loads every row it deletes. A session with
more messages than a batch allows has its messages removed in several transactions first.

Long-term memories that came from an expired session stay (they belong to the agent;
their session link is cleared). Memories whose own `expires_at` has passed are archived
with an `expire` event in their history. Every run is recorded in a CleanupRun row with
its progress.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from memoryapp.core.models import CleanupRun, Memory, Session

logger = logging.getLogger(__name__)

BATCH_MESSAGES = 20_000
BATCH_SESSIONS = 200
CHUNK_MESSAGES = 20_000

# (SQL to delete rows under the sessions in %(ids)s), children before parents.
_DELETES = [
    "DELETE FROM core_memoryevent WHERE target_kind = 'finding' AND target_id IN "
    "(SELECT id FROM core_finding WHERE session_id IN ({ids}))",
    "DELETE FROM core_memoryevent WHERE target_kind = 'context_item' AND target_id IN "
    "(SELECT id FROM core_contextitem WHERE session_id IN ({ids}))",
    "DELETE FROM core_pendingtooloutput WHERE tool_call_id IN "
    "(SELECT id FROM core_toolcall WHERE session_id IN ({ids}))",
    "DELETE FROM core_extractionjob WHERE session_id IN ({ids})",
    "DELETE FROM core_idempotencyrecord WHERE session_id IN ({ids})",
    "DELETE FROM core_message WHERE session_id IN ({ids})",
    "DELETE FROM core_toolcall WHERE session_id IN ({ids})",
    "DELETE FROM core_turn WHERE session_id IN ({ids})",
    "DELETE FROM core_embedding WHERE finding_id IN "
    "(SELECT id FROM core_finding WHERE session_id IN ({ids}))",
    "DELETE FROM core_finding WHERE session_id IN ({ids})",
    "DELETE FROM core_contextitem WHERE session_id IN ({ids})",
    "DELETE FROM core_subtask_dependencies WHERE from_subtask_id IN "
    "(SELECT id FROM core_subtask WHERE session_id IN ({ids}))",
    "DELETE FROM core_subtask WHERE session_id IN ({ids})",
]


def _lock_expired(ids: list[int], now: datetime) -> list[int]:
    sessions = Session.objects.filter(id__in=ids, expires_at__lte=now)
    if connection.features.has_select_for_update_skip_locked:
        sessions = sessions.select_for_update(skip_locked=True)
    return list(sessions.values_list("id", flat=True))


def purge_sessions(ids: list[int], now: datetime) -> tuple[int, int, int]:
    """Remove the still-expired sessions among `ids` and everything under them, in one
    transaction. Answers (rows removed, messages removed, sessions removed)."""
    with transaction.atomic():
        locked = _lock_expired(ids, now)
        if not locked:
            return 0, 0, 0
        placeholders = ", ".join(["%s"] * len(locked))
        rows = messages = 0
        with connection.cursor() as cursor:
            for statement in _DELETES:
                cursor.execute(statement.format(ids=placeholders), locked)
                rows += max(cursor.rowcount, 0)
                if statement.startswith("DELETE FROM core_message "):
                    messages = max(cursor.rowcount, 0)
            cursor.execute(
                f"UPDATE core_memory SET session_id = NULL WHERE session_id IN ({placeholders})",
                locked,
            )
            cursor.execute(f"DELETE FROM core_session WHERE id IN ({placeholders})", locked)
            rows += max(cursor.rowcount, 0)
    return rows, messages, len(locked)


def _purge_messages_in_chunks(session_id: int, now: datetime) -> int:
    """Remove a huge expired session's messages a chunk per transaction."""
    removed = 0
    while True:
        with transaction.atomic():
            if not _lock_expired([session_id], now):
                return removed  # written to meanwhile, or already gone
            with connection.cursor() as cursor:
                # Findings name the message they came from; the session's findings go
                # with the session later, so unlink them before their messages go now.
                cursor.execute(
                    "UPDATE core_finding SET message_id = NULL "
                    "WHERE session_id = %s AND message_id IS NOT NULL",
                    [session_id],
                )
                cursor.execute(
                    "DELETE FROM core_message WHERE id IN (SELECT id FROM core_message "
                    "WHERE session_id = %s LIMIT %s)",
                    [session_id, CHUNK_MESSAGES],
                )
                count = max(cursor.rowcount, 0)
        removed += count
        if count < CHUNK_MESSAGES:
            return removed


def expire_memories(now: datetime) -> int:
    expired = 0
    while True:
        batch = list(
            Memory.objects.filter(status=Memory.Status.ACTIVE, expires_at__lte=now).order_by("id")[
                :500
            ]
        )
        if not batch:
            return expired
        with transaction.atomic():
            for memory in batch:
                expired += memory.expire()


def preview(now: datetime | None = None) -> dict:
    """What a cleanup would remove right now."""
    now = now or timezone.now()
    expired = Session.objects.expired(now)
    totals = expired.aggregate(messages=Sum("message_count"), tokens=Sum("token_count"))
    return {
        "sessions": expired.count(),
        "messages": totals["messages"] or 0,
        "tokens": totals["tokens"] or 0,
        "memories_to_expire": Memory.objects.filter(
            status=Memory.Status.ACTIVE, expires_at__lte=now
        ).count(),
    }


def run_cleanup(
    run_id: int | None = None,
    *,
    dry_run: bool = False,
    triggered_by: str = "beat",
    now: datetime | None = None,
    batch_messages: int = BATCH_MESSAGES,
) -> CleanupRun | None:
    """One cleanup run, recorded with its progress. Skips (None) while another run is
    under way, unless `run_id` names a run created for this call (the dashboard's)."""
    now = now or timezone.now()
    if run_id is not None:
        run = CleanupRun.objects.running().filter(pk=run_id).first()
        if run is None:
            return None
    else:
        busy = CleanupRun.objects.under_way(now).exists()
        if busy and not dry_run:
            return None
        run = CleanupRun.objects.create(dry_run=dry_run, triggered_by=triggered_by, started_at=now)
    try:
        summary = preview(now)
        run.sessions_total = summary["sessions"]
        if dry_run:
            run.sessions_removed = summary["sessions"]
            run.messages_removed = summary["messages"]
            run.memories_expired = summary["memories_to_expire"]
            run.sessions_done = summary["sessions"]
        else:
            _run(run, now, batch_messages)
        run.status = CleanupRun.Status.DONE
    except Exception as exc:
        logger.exception("cleanup run %s failed", run.pk)
        run.status = CleanupRun.Status.FAILED
        run.error = f"{type(exc).__name__}: {exc}"[:2000]
    run.finished_at = timezone.now()
    run.save()
    return run


def _run(run: CleanupRun, now: datetime, batch_messages: int) -> None:
    run.save(update_fields=["sessions_total"])
    last_id = 0
    while True:
        candidates = list(
            Session.objects.filter(expires_at__lte=now, id__gt=last_id)
            .order_by("id")
            .values_list("id", "message_count")[:BATCH_SESSIONS]
        )
        if not candidates:
            break
        last_id = candidates[-1][0]
        batch: list[int] = []
        weight = 0
        for session_id, message_count in candidates:
            if message_count > batch_messages:
                run.messages_removed += _purge_messages_in_chunks(session_id, now)
                message_count = 0
            if batch and weight + message_count > batch_messages:
                _flush(run, batch, now)
                batch, weight = [], 0
            batch.append(session_id)
            weight += message_count
        if batch:
            _flush(run, batch, now)
    run.memories_expired = expire_memories(now)


def _flush(run: CleanupRun, batch: list[int], now: datetime) -> None:
    rows, messages, sessions = purge_sessions(batch, now)
    run.rows_removed += rows
    run.messages_removed += messages
    run.sessions_removed += sessions
    run.sessions_done = min(run.sessions_total, run.sessions_done + len(batch))
    run.save(
        update_fields=["rows_removed", "messages_removed", "sessions_removed", "sessions_done"]
    )
