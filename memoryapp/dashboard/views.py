"""Dashboard views: thin, function-based, each object fetched through a helper that starts
from what the user may see (another user's agent is a 404, a too-weak role a 403).

Everything shown that came from an agent or a model is rendered by Django's autoescaping
and never marked safe; the Content-Security-Policy forbids inline script and style.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Max, Q, Sum
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseStopPolling

from memoryapp.core.context import assemble_context
from memoryapp.core.conversation import message_dict, restore_history
from memoryapp.core.limits import MAX_TOKEN_BUDGET
from memoryapp.core.models import (
    ContextItem,
    ExtractionJob,
    Finding,
    Message,
    Session,
    Subtask,
    ToolCall,
    Turn,
)
from memoryapp.dashboard.access import _get_agent_and_role, _get_session_for_user, agents_for
from memoryapp.dashboard.charts import tokens_per_day, tokens_per_turn
from memoryapp.lib import prompt as fmt

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
        .annotate(t=Sum(F("input_tokens") + F("output_tokens")))
        .values_list("session__agent_id", "t")
    )
    errors = dict(
        ExtractionJob.objects.filter(session__agent_id__in=ids, status=ExtractionJob.Status.FAILED)
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
        errors=Count("extraction_jobs", filter=Q(extraction_jobs__status="failed"))
    )
    if status == "active":
        sessions = sessions.filter(expires_at__gt=now)
    elif status == "expired":
        sessions = sessions.filter(expires_at__lte=now)
    elif status == "errors":
        sessions = sessions.filter(extraction_jobs__status="failed").distinct()
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


def _turn_extras(session: Session, iterations: set[int]) -> tuple[dict, dict]:
    """Tool calls and findings of the given turns, each in one query."""
    calls: dict[int, list] = {}
    for call in ToolCall.objects.filter(session=session, turn__iteration__in=iterations).annotate(
        iteration=F("turn__iteration")
    ):
        calls.setdefault(call.iteration, []).append(call)
    findings: dict[int, list] = {}
    for finding in Finding.objects.filter(session=session, step__in=iterations):
        findings.setdefault(finding.step, []).append(finding)
    return calls, findings


def _budget_bars(context: dict) -> list[dict]:
    bars = []
    for section, label in (
        ("system", "System"),
        ("conversation", "Conversation"),
        ("working", "Working context"),
        ("long_term", "Long-term memory"),
    ):
        bars.append(
            {
                "label": label,
                "used": context["token_counts"][section],
                "budget": context["budget"][section],
            }
        )
    return bars


@login_required
@require_GET
def session_detail(request: HttpRequest, name: str, key: str) -> HttpResponse:
    agent, role = _get_agent_and_role(request, name)
    session = _get_session_for_user(request, agent, key)
    if request.htmx and request.htmx.target == "pruned-marker":  # "hide them"
        return _pruned_marker(request, agent, session, expanded=False)
    try:
        typed_budget = int(request.GET.get("budget") or 0) or None
    except ValueError:
        typed_budget = None
    if typed_budget is not None:
        typed_budget = max(0, min(typed_budget, MAX_TOKEN_BUDGET))
    context_view = assemble_context(session, token_budget=typed_budget, record_access=False)
    history = restore_history(
        session,
        max_messages=agent.max_messages,
        max_tokens=agent.default_conversation_budget(),
    )
    messages = history["messages"]
    turn_of = dict(
        Message.objects.filter(session=session, seq__in=[m["seq"] for m in messages]).values_list(
            "seq", "turn__iteration"
        )
    )
    calls, findings_by_step = _turn_extras(session, set(turn_of.values()))
    rows = []
    for message in messages:
        iteration = turn_of.get(message["seq"])
        rows.append({**message, "iteration": iteration})
    # Tool calls and findings follow the last message of the turn that made them.
    last_seq_of_turn = {}
    for row in rows:
        if row["iteration"] is not None:
            last_seq_of_turn[row["iteration"]] = row["seq"]
    for row in rows:
        iteration = row["iteration"]
        row["is_turn_end"] = iteration is not None and last_seq_of_turn.get(iteration) == row["seq"]
        row["turn_tool_calls"] = calls.get(iteration, []) if row["is_turn_end"] else []
        row["turn_findings"] = findings_by_step.get(iteration, []) if row["is_turn_end"] else []
    first_kept = next((m["seq"] for m in messages if m["role"] != "system"), None)
    turns = list(Turn.objects.filter(session=session).order_by("-iteration")[:50])[::-1]
    findings = list(
        Finding.objects.filter(session=session)
        .select_related("session", "turn", "message", "tool_call")
        .order_by("-updated_at", "-id")[:200]
    )
    stale = Finding.stale_among(session, findings)
    context_items = list(
        ContextItem.objects.filter(session=session)
        .select_related("session")
        .order_by("-confidence", "key")
    )
    grouped = {group: [] for group in fmt.FINDING_GROUPS}
    for finding in findings:
        finding.is_stale_read = finding.id in stale
        grouped[fmt.finding_group(finding.kind)].append(finding)
    context = {
        "agent": agent,
        "role": role,
        "session": session,
        "rows": rows,
        "pruned_count": history["pruned_count"],
        "pruned_tokens": history["pruned_tokens"],
        "first_kept": first_kept,
        "summary": context_view["summary"],
        "bars": _budget_bars(context_view),
        "cut": context_view["cut"],
        "typed_budget": typed_budget,
        "budget_total": context_view["budget"]["total"],
        "total_tokens": context_view["token_counts"]["total"],
        "prompt": context_view["prompt"],
        "context_items": context_items,
        "findings_grouped": [(g, grouped[g]) for g in fmt.FINDING_GROUPS],
        "subtasks": Subtask.objects.filter(session=session),
        "turns": turns,
        "chart": tokens_per_turn(turns),
        "last_seq": session.message_count,
        "last_finding": max((f.id for f in findings), default=0),
        "items_since": max((i.updated_at.timestamp() for i in context_items), default=0),
        "now": timezone.now(),
        "failed_jobs": ExtractionJob.objects.filter(
            session=session, status=ExtractionJob.Status.FAILED
        ).order_by("-id")[:5],
    }
    if request.htmx and request.GET.get("budget") is not None:
        return render(request, "dashboard/session.html#budget", context)
    return render(request, "dashboard/session.html", context)


def _pruned_marker(
    request: HttpRequest, agent, session: Session, *, expanded: bool, extra: dict | None = None
) -> HttpResponse:
    """The pruned-history marker alone: collapsed, or expanded around a first page."""
    history = restore_history(
        session, max_messages=agent.max_messages, max_tokens=agent.default_conversation_budget()
    )
    kept = [m["seq"] for m in history["messages"] if m["role"] != "system"]
    context = {
        "agent": agent,
        "session": session,
        "expanded": expanded,
        "first_kept": kept[0] if kept else session.message_count + 1,
        "pruned_count": history["pruned_count"],
        "pruned_tokens": history["pruned_tokens"],
        **(extra or {}),
    }
    return render(request, "dashboard/_pruned_marker.html", context)


@login_required
@require_GET
def session_older(request: HttpRequest, name: str, key: str) -> HttpResponse:
    """Pruned messages, a page at a time, newest page first from `before`, each page in
    order. Asked for by the pruned marker itself (htmx targets it), the marker comes
    back expanded around the first page, its link now hiding them."""
    agent, role = _get_agent_and_role(request, name)
    session = _get_session_for_user(request, agent, key)
    try:
        before = int(request.GET.get("before", ""))
    except ValueError:
        raise Http404("bad position") from None
    # One row more than a page says whether an older page exists.
    rows = list(
        Message.objects.filter(session=session, seq__lt=before)
        .exclude(role=Message.Role.SYSTEM)
        .order_by("-seq")[: OLDER_PAGE + 1]
    )
    page = rows[:OLDER_PAGE][::-1]
    context = {
        "agent": agent,
        "session": session,
        "older": [message_dict(m) for m in page],
        "next_before": page[0].seq if page and len(rows) > OLDER_PAGE else None,
    }
    if request.htmx and request.htmx.target == "pruned-marker":
        return _pruned_marker(request, agent, session, expanded=True, extra=context)
    # A small include, shared by the fragment and the page that works without JavaScript.
    template = "dashboard/_older.html" if request.htmx else "dashboard/older.html"
    return render(request, template, context)


@login_required
@require_GET
def session_live(request: HttpRequest, name: str, key: str) -> HttpResponse:
    """What is new since the last poll: messages after `after_seq`, findings after
    `after_finding`. A constant number of queries whatever the session holds."""
    agent, role = _get_agent_and_role(request, name)
    session = _get_session_for_user(request, agent, key)
    try:
        after_seq = int(request.GET.get("after_seq", "0"))
        after_finding = int(request.GET.get("after_finding", "0"))
        items_since = float(request.GET.get("items_since", "0"))
    except ValueError:
        raise Http404("bad position") from None
    if session.is_expired():
        return HttpResponseStopPolling()
    # Working-context items change in place: when any changed, send the whole (small) list.
    changed = ContextItem.objects.filter(
        session=session, updated_at__gt=datetime.fromtimestamp(items_since, tz=UTC)
    ).aggregate(latest=Max("updated_at"))["latest"]
    items = (
        list(ContextItem.objects.filter(session=session).order_by("-confidence", "key"))
        if changed
        else None
    )
    messages = list(
        Message.objects.filter(session=session, seq__gt=after_seq).order_by("seq")[:LIVE_LIMIT]
    )
    findings = list(
        Finding.objects.filter(session=session, id__gt=after_finding).order_by("id")[:LIVE_LIMIT]
    )
    context = {
        "agent": agent,
        "session": session,
        "new_messages": [message_dict(m) for m in messages],
        "new_findings": findings,
        "after_seq": messages[-1].seq if messages else after_seq,
        "after_finding": findings[-1].id if findings else after_finding,
        "changed_items": items,
        "items_since": changed.timestamp() if changed else items_since,
        "role": role,
    }
    return render(request, "dashboard/session.html#live", context)
