"""The cleanup page (Django staff only): what is expired right now, a dry run, a real run
as a Celery task with a live progress bar, past runs, and extending chosen sessions."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.db.models import Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from memoryapp.core import cleanup
from memoryapp.core.limits import MAX_TTL_SECONDS
from memoryapp.core.models import CleanupRun, Session
from memoryapp.core.tasks import cleanup_expired

EXPIRED_SHOWN = 50
MAX_EXTEND_SECONDS = MAX_TTL_SECONDS


def _staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied


def _message_table_bytes() -> int:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_total_relation_size('core_message')")
            return int(cursor.fetchone()[0])
        cursor.execute("PRAGMA page_count")
        pages = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_size")
        return int(pages * cursor.fetchone()[0])


def _estimated_bytes(messages: int) -> int:
    """Size on disk of `messages` messages: the message table's size per row (counts from
    the sessions' stored totals, so no table scan)."""
    if not messages:
        return 0
    stored = Session.objects.aggregate(n=Sum("message_count"))["n"] or 1
    return round(_message_table_bytes() * messages / stored)


def _run_context(run: CleanupRun | None) -> dict:
    return {"run": run, "percent": round(100 * run.progress) if run else 0}


@login_required
@require_GET
def cleanup_page(request: HttpRequest) -> HttpResponse:
    _staff(request)
    now = timezone.now()
    preview = cleanup.preview(now)
    expired = list(
        Session.objects.expired(now).select_related("agent").order_by("expires_at")[:EXPIRED_SHOWN]
    )
    context = {
        "preview": preview,
        "bytes": _estimated_bytes(preview["messages"]),
        "expired": expired,
        "runs": CleanupRun.objects.all()[:20],
        **_run_context(CleanupRun.objects.filter(status=CleanupRun.Status.RUNNING).first()),
    }
    return render(request, "dashboard/cleanup.html", context)


@login_required
@require_POST
def cleanup_start(request: HttpRequest) -> HttpResponse:
    _staff(request)
    dry_run = request.POST.get("dry_run") == "1"
    with transaction.atomic():
        busy = CleanupRun.objects.filter(
            status=CleanupRun.Status.RUNNING,
            dry_run=False,
            started_at__gt=timezone.now() - cleanup.RUN_STALE_AFTER,
        ).first()
        if busy and not dry_run:
            run = busy
        else:
            run = CleanupRun.objects.create(
                dry_run=dry_run, triggered_by=f"user:{request.user.get_username()}"
            )
            cleanup_expired.delay_on_commit(run_id=run.pk, dry_run=dry_run)
    if not request.htmx:
        return redirect("dashboard:cleanup")
    return render(request, "dashboard/cleanup.html#progress", _run_context(run))


@login_required
@require_GET
def cleanup_progress(request: HttpRequest, run_id: int) -> HttpResponse:
    _staff(request)
    run = CleanupRun.objects.filter(pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    return render(request, "dashboard/cleanup.html#progress", _run_context(run))


@login_required
@require_POST
def extend_sessions(request: HttpRequest) -> HttpResponse:
    """Give chosen sessions more time: expires_at = now + the chosen seconds."""
    _staff(request)
    try:
        seconds = int(request.POST.get("seconds", "3600"))
        ids = [int(i) for i in request.POST.getlist("session")]
    except ValueError:
        return HttpResponse("bad input", status=400)
    if not 60 <= seconds <= MAX_EXTEND_SECONDS or not ids or len(ids) > 1000:
        return HttpResponse("choose sessions and 60 seconds to a year", status=400)
    Session.objects.filter(id__in=ids).update(
        expires_at=timezone.now() + timedelta(seconds=seconds)
    )
    return redirect("dashboard:cleanup")
