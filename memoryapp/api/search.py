"""Full-text search over everything the agent's memory holds."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest
from ninja import Query, Router

from memoryapp.api import pagination
from memoryapp.api.schemas import SearchPage
from memoryapp.core import search as fulltext
from memoryapp.http.common import READ, agent_of

router = Router(tags=["search"])


@router.get("/search", response={200: SearchPage, **READ})
def search_everything(
    request: HttpRequest,
    q: str = Query(..., min_length=1, max_length=500),
    kind: Literal["message", "finding", "memory"] | None = None,
    cursor: str | None = pagination.cursor(),
    limit: int = pagination.limit(20),
):
    """Full-text search over the agent's messages, findings and memories, ranked, with
    highlighted snippets (`highlights`: text segments, the matching ones marked)."""
    # Ranked: the position is how many hits were served.
    (offset,) = pagination.decode(cursor, "search", int) or (0,)
    hits = fulltext.search(
        agent_of(request),
        q,
        kinds=(kind,) if kind else fulltext.KINDS,
        offset=offset,
        limit=limit + 1,
        memory_status=None,
    )
    items = [
        {
            "kind": h.kind,
            "id": h.id,
            "rank": h.rank,
            "session": h.session,
            "seq": h.seq if h.kind == "message" else None,
            "role": h.role if h.kind == "message" else None,
            "tool": h.role if h.kind == "finding" else None,
            "memory_type": h.role if h.kind == "memory" else None,
            "status": h.status,
            "snippet": h.plain_snippet(),
            "highlights": h.segments(),
        }
        for h in hits[:limit]
    ]
    more = len(hits) > limit
    return {
        "items": items,
        "next_cursor": pagination.encode("search", offset + limit) if more else None,
    }
