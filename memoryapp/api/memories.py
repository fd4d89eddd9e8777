"""Long-term memories: typed facts with a confidence that belong to the agent and outlive
its sessions. Changing a fact's content supersedes it; forgetting archives it."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.db import transaction
from django.http import HttpRequest
from ninja import Path, Query, Router, Status
from ninja.errors import HttpError

from memoryapp.api import pagination
from memoryapp.api.schemas import (
    MemoryDetail,
    MemoryHistoryOut,
    MemoryIn,
    MemoryOut,
    MemoryPage,
    MemoryPatch,
    MemoryRecorded,
    MemoryRevised,
    MemoryType,
)
from memoryapp.core import recall
from memoryapp.core.context import memory_dict
from memoryapp.core.limits import MAX_INT
from memoryapp.core.models import Memory, MemoryEvent
from memoryapp.http.common import (
    CONFLICTING_WRITE,
    READ,
    READ_ONE,
    WRITE_ONE,
    actor,
    agent_of,
    errors,
    live_session,
    memory_of,
)

router = Router(tags=["memories"])

MemoryId = Path(..., ge=1, le=MAX_INT)


def remember(request: HttpRequest, payload: MemoryIn) -> tuple[Memory, bool]:
    """Store a fact (or strengthen the same fact already known): (memory, created)."""
    with transaction.atomic():
        session = live_session(request, payload.session) if payload.session else None
        return Memory.remember(
            agent_of(request),
            payload.content,
            memory_type=payload.memory_type,
            confidence=payload.confidence,
            session=session,
            actor=actor(request),
        )


@router.post("/memories", response={200: MemoryRecorded, 201: MemoryRecorded, **WRITE_ONE})
def post_memory(request: HttpRequest, payload: MemoryIn):
    """Remember a fact. The same fact again strengthens the existing memory (200).
    `session` (optional) names the live session it was learned in (404 if none)."""
    memory, created = remember(request, payload)
    return Status(201 if created else 200, {"created": created, "memory": memory_dict(memory)})


@router.get("/memories", response={200: MemoryPage, **READ})
def list_memories(
    request: HttpRequest,
    query: str = Query("", max_length=1000),
    memory_type: MemoryType | None = None,
    min_confidence: float | None = Query(None, ge=0, le=1),
    status: Literal["active", "archived", "superseded", "all"] = "active",
    cursor: str | None = pagination.cursor(),
    limit: int = pagination.limit(20),
):
    """Recall: with a query, ranked by full-text relevance; without, by confidence, then
    the most recently changed."""
    filters = {"memory_type": memory_type, "min_confidence": min_confidence, "status": status}
    if query.strip():
        # Ranked: the position is how many hits were served.
        (offset,) = pagination.decode(cursor, "recall", int) or (0,)
        found, more = recall.recall_memories(
            agent_of(request), query=query, offset=offset, limit=limit, **filters
        )
        next_cursor = pagination.encode("recall", offset + limit) if more else None
    else:
        after = pagination.decode(cursor, "memories", float, datetime, int)
        found, more = recall.recall_memories(agent_of(request), after=after, limit=limit, **filters)
        last = found[-1] if found else None
        next_cursor = (
            pagination.encode("memories", last.confidence, last.updated_at, last.id)
            if more and last
            else None
        )
    return {"items": [memory_dict(m) for m in found], "next_cursor": next_cursor}


@router.get("/memories/{memory_id}", response={200: MemoryDetail, **READ_ONE})
def get_memory(request: HttpRequest, memory_id: int = MemoryId):
    memory = memory_of(request, memory_id)
    return {**memory_dict(memory), "superseded_by": memory.superseded_by_id}


@router.patch("/memories/{memory_id}", response={200: MemoryRevised, **CONFLICTING_WRITE})
def patch_memory(request: HttpRequest, payload: MemoryPatch, memory_id: int = MemoryId):
    """Change a memory. New content replaces the fact: the old memory is marked
    superseded with a link to the new one, which is returned (`supersedes`). A
    superseded memory cannot be changed (409): change its replacement."""
    changes = payload.model_dump(exclude_unset=True)
    if any(value is None for value in changes.values()):
        raise HttpError(422, "fields may be omitted but not null")
    with transaction.atomic():
        memory = memory_of(request, memory_id, for_change=True)
        result = memory.revise(actor=actor(request), **changes)
    return {**memory_dict(result), "supersedes": memory.id if result.id != memory.id else None}


@router.delete("/memories/{memory_id}", response={204: None, **errors(404, 409)})
def delete_memory(request: HttpRequest, memory_id: int = MemoryId):
    """Forget: the memory is archived (soft) and can be restored."""
    with transaction.atomic():
        memory = memory_of(request, memory_id, for_change=True)
        memory.archive(actor(request))
    return Status(204, None)


@router.post("/memories/{memory_id}/restore", response={200: MemoryOut, **errors(404, 409)})
def restore_memory(request: HttpRequest, memory_id: int = MemoryId):
    """Make an archived memory active again."""
    with transaction.atomic():
        memory = memory_of(request, memory_id, for_change=True)
        memory.restore(actor(request))
    return memory_dict(memory)


@router.get("/memories/{memory_id}/history", response={200: MemoryHistoryOut, **READ_ONE})
def memory_history(request: HttpRequest, memory_id: int = MemoryId):
    """Every change to the memory, oldest first: who changed what, before and after."""
    memory = memory_of(request, memory_id)
    events = MemoryEvent.objects.filter(
        target_kind=MemoryEvent.Target.MEMORY, target_id=memory.id
    ).order_by("created_at", "id")
    return {
        "items": [
            {
                "action": e.action,
                "before": e.before,
                "after": e.after,
                "actor": e.actor,
                "created_at": e.created_at,
            }
            for e in events
        ]
    }
