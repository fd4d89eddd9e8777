"""The cleanup page (Django staff only): what is expired right now, a dry run, a real run
(after a confirmation) as a Celery task with a live progress bar, past runs, and extending
chosen sessions.

The page's regions are named partials of dashboard/cleanup.html. When a run ends, the
progress fragment brings the counts, the expired list and the past runs along as
out-of-band swaps, so the page never shows what the run already removed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.db.models import Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryapp.core import cleanup
from memoryapp.core.limits import MAX_TTL_SECONDS
from memoryapp.core.models import CleanupRun, Session
from memoryapp.core.tasks import cleanup_expired

EXPIRED_SHOWN = 50
PAST_RUNS_SHOWN = 20
MAX_EXTEND_SECONDS = MAX_TTL_SECONDS
PAGE = "dashboard/cleanup.html"


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


def _counts(now: datetime) -> dict:
    preview = cleanup.preview(now)
    return {"preview": preview, "bytes": _estimated_bytes(preview["messages"])}


def _expired(now: datetime) -> dict:
    expired = Session.objects.expired(now).select_related("agent").order_by("expires_at")
    return {"expired": list(expired[:EXPIRED_SHOWN]), "expired_shown": EXPIRED_SHOWN}


def _past_runs(now: datetime) -> dict:
    return {"runs": list(CleanupRun.objects.all()[:PAST_RUNS_SHOWN])}


def _run_context(run: CleanupRun | None) -> dict:
    return {"run": run, "percent": round(100 * run.progress) if run else 0}


def _progress(now: datetime) -> dict:
    return _run_context(CleanupRun.objects.running().first())


# The page's regions by element id, with the partial that renders each and what it needs.
# An htmx request aimed at one of them (HX-Target) gets that partial alone.
REGIONS: dict[str, tuple[str, Callable[[datetime], dict]]] = {
    "expired-now": ("counts", _counts),
    "expired-sessions": ("expired", _expired),
    "past-runs": ("runs", _past_runs),
    "progress": ("progress", _progress),
}


def _whole_page(request: HttpRequest, now: datetime, **extra: object) -> HttpResponse:
    context: dict = dict(extra)
    for _, build in REGIONS.values():
        context.update(build(now))
    return render(request, PAGE, context)


@login_required
@require_GET
def cleanup_page(request: HttpRequest) -> HttpResponse:
    _staff(request)
    now = timezone.now()
    if request.htmx and request.htmx.target in REGIONS:
        partial, build = REGIONS[request.htmx.target]
        return render(request, f"{PAGE}#{partial}", build(now))
    return _whole_page(request, now)


def _confirmation(request: HttpRequest) -> HttpResponse:
    """The step before a real run: what it will remove, and a button that says so."""
    now = timezone.now()
    if request.htmx:
        return render(request, f"{PAGE}#confirm", _counts(now))
    return _whole_page(request, now, confirming=True)


def _progress_response(request: HttpRequest, run: CleanupRun) -> HttpResponse:
    context = _run_context(run)
    if request.htmx and run.status != CleanupRun.Status.RUNNING:
        # The run has ended: what it removed leaves the counts and the expired list, and it
        # joins the past runs. These regions come along out of band.
        now = timezone.now()
        context |= _counts(now) | _expired(now) | _past_runs(now) | {"ended": True}
    return render(request, f"{PAGE}#progress", context)


@login_required
@require_http_methods(["GET", "POST"])
def cleanup_start(request: HttpRequest) -> HttpResponse:
    """GET, or a real run posted without `confirm=yes`: the confirmation. A dry run needs
    none: it changes nothing but its own row in the past runs."""
    _staff(request)
    dry_run = request.POST.get("dry_run") == "1"
    if request.method == "GET" or (not dry_run and request.POST.get("confirm") != "yes"):
        return _confirmation(request)
    with transaction.atomic():
        busy = None if dry_run else CleanupRun.objects.under_way().first()
        if busy:
            run = busy
        else:
            run = CleanupRun.objects.create(
                dry_run=dry_run, triggered_by=f"user:{request.user.get_username()}"
            )
            cleanup_expired.delay_on_commit(run_id=run.pk, dry_run=dry_run)
    if not request.htmx:
        return redirect("dashboard:cleanup")
    run.refresh_from_db()  # in-process tasks have run on commit, and may have finished
    return _progress_response(request, run)


@login_required
@require_GET
def cleanup_progress(request: HttpRequest, run_id: int) -> HttpResponse:
    _staff(request)
    run = CleanupRun.objects.filter(pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    return _progress_response(request, run)


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
    # Back where it was asked (an expired session's own page), when that is this site.
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
        return redirect(back)
    return redirect("dashboard:cleanup")
