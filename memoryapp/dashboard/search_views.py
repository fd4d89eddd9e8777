"""Full-text search over an agent's messages, findings and memories."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from memoryapp.core import search as fulltext
from memoryapp.dashboard.access import _get_agent_and_role

PAGE = 50


@login_required
@require_GET
def search_page(request: HttpRequest, name: str) -> HttpResponse:
    """Full-text search over the agent's messages, findings and memories. Snippets are
    rendered from text segments, each escaped, the matches wrapped in <mark>."""
    agent, role = _get_agent_and_role(request, name)
    query = request.GET.get("q", "").strip()[:200]
    kind = request.GET.get("kind", "")
    kinds = (kind,) if kind in fulltext.KINDS else fulltext.KINDS
    try:
        offset = max(0, int(request.GET.get("offset") or 0))
    except ValueError:
        raise Http404("bad offset") from None
    hits = (
        fulltext.search(
            agent, query, kinds=kinds, offset=offset, limit=PAGE + 1, memory_status=None
        )
        if query
        else []
    )
    context = {
        "agent": agent,
        "role": role,
        "q": query,
        "kind": kind if kind in fulltext.KINDS else "",
        "hits": hits[:PAGE],
        "next_offset": offset + PAGE if len(hits) > PAGE else None,
    }
    template = "dashboard/search.html#results" if request.htmx else "dashboard/search.html"
    return render(request, template, context)
