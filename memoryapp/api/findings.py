"""Findings: what tool calls taught the agent, and the check that lets it skip a call
whose answer it already has."""

from __future__ import annotations

import json
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest
from ninja import Query, Router, Status

from memoryapp.api import pagination
from memoryapp.api.schemas import (
    FindingCheckIn,
    FindingCheckOut,
    FindingIn,
    FindingPage,
    FindingRecorded,
)
from memoryapp.core.context import finding_dict
from memoryapp.core.known import check_call
from memoryapp.core.limits import MAX_FACT_CHARS
from memoryapp.core.models import Finding
from memoryapp.core.shapes import FindingCheck
from memoryapp.http.common import READ, READ_ONE, WRITE, WRITE_ONE, actor, live_session
from memoryapp.http.schemas import SessionKeyInPath

router = Router(tags=["findings"])


@router.get("/sessions/{key}/findings", response={200: FindingPage, **READ_ONE})
def list_findings(
    request: HttpRequest,
    key: SessionKeyInPath,
    cursor: str | None = pagination.cursor(),
    limit: int = pagination.limit(50),
):
    """The session's findings, most recently learned first."""
    session = live_session(request, key)
    after = pagination.decode(cursor, "findings", datetime, int)
    rows = Finding.objects.filter(session=session)
    if after is not None:
        updated_at, last_id = after
        rows = rows.filter(Q(updated_at__lt=updated_at) | Q(updated_at=updated_at, id__lt=last_id))
    page = list(
        rows.select_related("turn", "message", "tool_call").order_by("-updated_at", "-id")[
            : limit + 1
        ]
    )
    more = len(page) > limit
    page = page[:limit]
    next_cursor = pagination.encode("findings", page[-1].updated_at, page[-1].id) if more else None
    stale = Finding.stale_among(session, page)
    return {"items": [finding_dict(f, f.id in stale) for f in page], "next_cursor": next_cursor}


@router.post(
    "/sessions/{key}/findings", response={200: FindingRecorded, 201: FindingRecorded, **WRITE_ONE}
)
def post_finding(request: HttpRequest, key: SessionKeyInPath, payload: FindingIn):
    """Record what a tool call taught the agent. A finding that is already known (same
    tool, matching query) is updated instead of copied: 200 instead of 201."""
    with transaction.atomic():
        session = live_session(request, key, lock=True)
        finding, created = Finding.record(
            session, actor=actor(request), source=Finding.Source.AGENT, **payload.model_dump()
        )
    return Status(201 if created else 200, {"created": created, "finding": finding_dict(finding)})


def _check(request: HttpRequest, key: str, tool: str, query: str) -> FindingCheck:
    # A session that does not exist yet knows nothing (200, not 404).
    return check_call(live_session(request, key, missing_ok=True), tool, query)


@router.get("/sessions/{key}/findings/check", response={200: FindingCheckOut, **READ})
def check_finding(
    request: HttpRequest,
    key: SessionKeyInPath,
    tool: str = Query(..., min_length=1, max_length=200),
    query: str = Query("", max_length=MAX_FACT_CHARS),
):
    """Is this already known? Lets an agent skip a redundant tool call. `query` is the
    call's text or its JSON arguments. `known` only for the same call exactly; `related`
    names earlier findings that cover it (a search this one narrows, the same file at
    another range, a similar query), each with why. A read of a file edited since is
    `stale`, not known; a session that does not exist yet knows nothing (200, not 404).
    For arguments too long for a URL, POST the same question."""
    return _check(request, key, tool, query)


@router.post("/sessions/{key}/findings/check", response={200: FindingCheckOut, **WRITE})
def check_finding_post(request: HttpRequest, key: SessionKeyInPath, payload: FindingCheckIn):
    """The same question as `GET …/findings/check`, with the call in the body:
    `{"tool": "Edit", "query": {"file_path": …, "old_string": …, "new_string": …}}`.
    Asking changes nothing."""
    query = payload.query
    text = query if isinstance(query, str) else json.dumps(query, ensure_ascii=False)
    return _check(request, key, payload.tool, text)
