"""Search over an agent's memory: first the memories that bear on the query, recalled by
words and meaning together as the agent recalls them (memoryapp.core.recall), each with
why; then full-text search over its messages, findings and memories: a count, numbered
pages, a match mode (all words, any word, the exact phrase) and each hit's date. A message
hit links to its message with `?at=<seq>`, which opens the page of pruned history that
holds it when it is no longer in the kept conversation."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from memoryapp.core import recall
from memoryapp.core import search as fulltext
from memoryapp.dashboard.access import _get_agent_and_role

PAGE = 20
MEANING = 5  # the memories recalled above the word hits
MODE_LABELS = (
    (fulltext.ALL, "all words"),
    (fulltext.ANY, "any word"),
    (fulltext.PHRASE, "the exact phrase"),
)


@login_required
@require_GET
def search_page(request: HttpRequest, name: str) -> HttpResponse:
    """The search page, or its results partial for htmx. Two queries whatever the number
    of hits: the count and the page. Snippets are rendered from text segments, each
    escaped, the matches wrapped in <mark>."""
    agent, role = _get_agent_and_role(request, name)
    query = request.GET.get("q", "").strip()[:200]
    kind = request.GET.get("kind", "")
    kind = kind if kind in fulltext.KINDS else ""
    mode = request.GET.get("mode", "")
    mode = mode if mode in fulltext.MODES else fulltext.ALL
    page = None
    meaning = meaning_more = None
    if query:
        results = fulltext.Results(
            agent,
            query,
            kinds=(kind,) if kind else fulltext.KINDS,
            mode=mode,
            memory_status=None,
        )
        # get_page: a page number that is not one shows the first or the last page.
        page = Paginator(results, PAGE).get_page(request.GET.get("page"))
        if kind in ("", "memory") and page.number == 1:
            meaning, meaning_more = recall.recall_memories(agent, query=query, limit=MEANING)
    context = {
        "agent": agent,
        "role": role,
        "q": query,
        "kind": kind,
        "mode": mode,
        "mode_labels": MODE_LABELS,
        "search_url": reverse("dashboard:search", args=[agent.name]),
        "page": page,
        "meaning": meaning,
        "meaning_more": meaning_more,
        "hits": list(page.object_list) if page else [],
        "page_numbers": (
            list(page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1))
            if page
            else []
        ),
    }
    # A history restore (back after an htmx swap) needs the whole page.
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, "dashboard/search.html#results", context)
    return render(request, "dashboard/search.html", context)
