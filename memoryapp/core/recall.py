"""Recall: an agent's memories for a query, by its words and by its meaning together.

Two rankings of the same filtered memories are fused: the full-text one (memoryapp.core.
search: stop words dropped) and the vectors' (memoryapp.core.embeddings: cosine
similarity to the query's vector). A memory's fused score is the sum of
`weight / (RRF_K + rank)` over the rankings it is in (reciprocal rank fusion); a memory
that names one of the query's identifiers (`test_upload_resume`, `src/app.py`) comes
before every other; a memory found by its vector alone must be MARGIN more similar to
the query than the query's nearest anchor (memoryapp.lib.embedding.ANCHORS: sentences
about nothing an agent remembers), so a query that nothing bears on recalls nothing.
A memory not embedded yet counts its word rank for both rankings, so it is not buried
while the background catches up. Each memory answered carries `why`: the words matched,
the similarity and the fused score.

The ranking reads at most CANDIDATES of each kind, so a query's pages end after the best
few hundred: recall is for the best matches, browsing is the list without a query. The
constants were set on the tune split of bench/probes/recall.json (bench/recall.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from django.db.models import Q

from memoryapp.core import embeddings, search
from memoryapp.core.models import Agent, Memory
from memoryapp.lib import relevance

CANDIDATES = 100
RRF_K = 10
LEXICAL_WEIGHT = 0.15
VECTOR_WEIGHT = 1.0
# How much closer than the query's nearest anchor a memory found by meaning alone must be.
# On the tune questions of bench/probes/recall.json: 95% of the relevant memories are at
# least 0.052 closer, and no off-topic question's best memory more than 0.036.
MARGIN = 0.045


@dataclass(frozen=True)
class Why:
    """Why a memory was recalled: the query's words it holds, whether it names one of the
    query's identifiers, its vector's similarity (None: not among the nearest, or no
    vectors) and how much that exceeds the query's baseline (MARGIN), and the fused
    score that ordered it."""

    terms: list[str]
    identifier: bool
    similarity: float | None
    margin: float | None
    score: float

    def as_dict(self) -> dict:
        return asdict(self)


def _filtered(agent, *, memory_type, min_confidence, status, session_key):
    memories = Memory.objects.for_agent(agent)
    if status != "all":
        memories = memories.filter(status=status)
    if memory_type:
        memories = memories.filter(memory_type=memory_type)
    if min_confidence:
        memories = memories.filter(confidence__gte=min_confidence)
    if session_key:
        memories = memories.filter(session__key=session_key)
    return memories


def rank(
    agent: Agent,
    query: str,
    *,
    memory_type: str | None = None,
    min_confidence: float | None = None,
    status: str = "active",
    session_key: str | None = None,
    margin: float = MARGIN,
    within=None,
) -> list[Memory]:
    """The memories that bear on `query`, best first, each with `.why` (a Why); of the
    queryset `within` only, when given (the AMS search's filters). A query of stop words
    alone recalls nothing, by words or by meaning."""
    asked = relevance.Query.of(query)
    if not asked.terms and not asked.identifiers:
        return []
    lexical = search.search(
        agent,
        query,
        kinds=("memory",),
        limit=CANDIDATES,
        memory_status=None if status == "all" else status,
        memory_type=memory_type or None,
        min_confidence=min_confidence or None,
        memory_session=session_key or None,
        snippets=False,
    )
    lexical_rank = {hit.id: position for position, hit in enumerate(lexical, 1)}
    filtered = _filtered(
        agent,
        memory_type=memory_type,
        min_confidence=min_confidence,
        status=status,
        session_key=session_key,
    )
    if within is not None:
        filtered = filtered.filter(id__in=within.values("id"))
    vector, baseline = embeddings.query_vector(query)
    nearest, with_vector = embeddings.nearest_memories(agent, vector, filtered, CANDIDATES)
    similarity = dict(nearest)
    vector_rank = {memory_id: position for position, (memory_id, _) in enumerate(nearest, 1)}
    ids = set(lexical_rank) | {i for i, s in nearest if s - baseline >= margin}
    found = []
    for memory in filtered.select_related("session").filter(id__in=ids):
        terms = asked.matched(memory.content)
        score = 0.0
        if memory.id in lexical_rank:
            score += LEXICAL_WEIGHT / (RRF_K + lexical_rank[memory.id])
        if memory.id in vector_rank:
            score += VECTOR_WEIGHT / (RRF_K + vector_rank[memory.id])
        elif with_vector and memory.id not in with_vector and memory.id in lexical_rank:
            # Not embedded yet (just written, or a new embedder at work): its words stand
            # in for its meaning, so it is not buried under the memories that have one.
            score += VECTOR_WEIGHT / (RRF_K + lexical_rank[memory.id])
        memory.why = Why(
            terms=terms,
            identifier=asked.names(terms),
            similarity=round(similarity[memory.id], 4) if memory.id in similarity else None,
            margin=round(similarity[memory.id] - baseline, 4) if memory.id in similarity else None,
            score=round(score, 6),
        )
        found.append(memory)
    found.sort(key=lambda m: (not m.why.identifier, -m.why.score, -m.confidence, -m.id))
    return found


def recall_memories(
    agent: Agent,
    *,
    query: str = "",
    memory_type: str | None = None,
    min_confidence: float | None = None,
    status: str = "active",
    session_key: str | None = None,
    offset: int = 0,
    after: tuple[float, datetime, int] | None = None,
    limit: int = 20,
) -> tuple[list, bool]:
    """An agent's memories, filtered: ranked by `rank` with a query, else by confidence
    then recency. Answers (a page of memories, whether more follow). Pages start at
    `offset`, or without a query just after `after`, the (confidence, updated_at, id) of
    the last memory of the page before (a keyset: writes never shift pages). Used by the
    API's recall, the recall tool, the AMS search and the dashboard's memories page."""
    if query.strip():
        ranked = rank(
            agent,
            query,
            memory_type=memory_type,
            min_confidence=min_confidence,
            status=status,
            session_key=session_key,
        )
        found = ranked[offset : offset + limit + 1]
    else:
        memories = _filtered(
            agent,
            memory_type=memory_type,
            min_confidence=min_confidence,
            status=status,
            session_key=session_key,
        ).select_related("session")
        if after is not None:
            confidence, updated_at, last_id = after
            memories = memories.filter(
                Q(confidence__lt=confidence)
                | Q(confidence=confidence, updated_at__lt=updated_at)
                | Q(confidence=confidence, updated_at=updated_at, id__lt=last_id)
            )
        found = list(
            memories.order_by("-confidence", "-updated_at", "-id")[offset : offset + limit + 1]
        )
    return found[:limit], len(found) > limit
