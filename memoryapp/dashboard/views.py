"""Dashboard views: thin, function-based, each object fetched through a helper that starts
from what the user may see (another user's agent is a 404, a too-weak role a 403).

Everything shown that came from an agent or a model is rendered by Django's autoescaping
and never marked safe; the Content-Security-Policy forbids inline script and style.
"""

from __future__ import annotations

import base64
import binascii
from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from memoryapp.core.models import (
    ExtractionJob,
    Session,
    Turn,
)
from memoryapp.dashboard.access import _get_agent_and_role, agents_for
from memoryapp.dashboard.charts import tokens_per_day

PAGE = 50
OLDER_PAGE = 50
LIVE_LIMIT = 100


# --- pages -----------------------------------------------------------------------------


@login_required
@require_GET
def agents_overview(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    since = now - timedelta(hours=24)
    # One join on sessions for the counts; tokens and errors in one grouped query each.
    agents = (
        agents_for(request.user)
        .annotate(
            active_sessions=Count(
                "sessions", filter=Q(sessions__expires_at__gt=now), distinct=True
            ),
            expired_sessions=Count(
                "sessions", filter=Q(sessions__expires_at__lte=now), distinct=True
            ),
            messages=Coalesce(Sum("sessions__message_count"), 0),
            last_activity=Max("sessions__last_activity_at"),
        )
        .order_by("name")
    )
    agents = list(agents)
    ids = [a.pk for a in agents]
    tokens = dict(
        Turn.objects.filter(session__agent_id__in=ids, timestamp__gte=since)
        .values("session__agent_id")
        .annotate(
            t=Sum("input_tokens") + Sum("output_tokens")
        )  # each a bigint sum: never an int overflow
        .values_list("session__agent_id", "t")
    )
    errors = dict(
        ExtractionJob.objects.failed()
        .filter(session__agent_id__in=ids)
        .values("session__agent_id")
        .annotate(n=Count("pk"))
        .values_list("session__agent_id", "n")
    )
    for agent in agents:
        agent.tokens_24h = tokens.get(agent.pk, 0)
        agent.extraction_errors = errors.get(agent.pk, 0)
    return render(request, "dashboard/agents.html", {"agents": agents})


def _decode_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        return int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Http404("bad cursor") from None


def _encode_cursor(value: int) -> str:
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


@login_required
@require_GET
def agent_detail(request: HttpRequest, name: str) -> HttpResponse:
    agent, role = _get_agent_and_role(request, name)
    now = timezone.now()
    status = request.GET.get("status", "active")
    query = request.GET.get("q", "").strip()[:200]
    sessions = Session.objects.filter(agent=agent).annotate(
        errors=Count(
            "extraction_jobs", filter=Q(extraction_jobs__status=ExtractionJob.Status.FAILED)
        )
    )
    if status == "active":
        sessions = sessions.filter(expires_at__gt=now)
    elif status == "expired":
        sessions = sessions.filter(expires_at__lte=now)
    elif status == "errors":
        sessions = sessions.filter(pk__in=ExtractionJob.objects.failed().values("session_id"))
    else:
        status = "all"
    if query:
        sessions = sessions.filter(Q(key__icontains=query) | Q(goal__icontains=query))
    after = _decode_cursor(request.GET.get("cursor"))
    if after is not None:
        sessions = sessions.filter(id__lt=after)
    page = list(sessions.order_by("-id")[: PAGE + 1])
    next_cursor = _encode_cursor(page[PAGE - 1].id) if len(page) > PAGE else None
    context = {
        "agent": agent,
        "role": role,
        "chart": tokens_per_day(agent),
        "sessions": page[:PAGE],
        "next_cursor": next_cursor,
        "status": status,
        "q": query,
        "now": now,
    }
    if request.htmx and request.GET.get("cursor"):
        return render(request, "dashboard/agent.html#session-rows", context)
    return render(request, "dashboard/agent.html", context)
