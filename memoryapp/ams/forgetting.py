"""Which long-term memories a forgetting pass forgets: Redis Agent Memory Server's policy
(`select_ids_for_forgetting`), on plain data. Too old (`max_age_days`), unused too long
(`max_inactive_days`; with both, a memory goes when it is both, or when it is older than
`hard_age_multiplier` times the age limit), or beyond a budget of the most recent
(`budget`, ranked by how recently each was used and made). Pinned memories and types
outside `memory_type_allowlist` are never forgotten."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Candidate:
    id: str
    memory_type: str
    created_at: datetime
    last_accessed: datetime


@dataclass(frozen=True)
class Policy:
    max_age_days: float | None = None
    max_inactive_days: float | None = None
    budget: int | None = None
    memory_type_allowlist: frozenset[str] | None = None
    hard_age_multiplier: float = 12.0


# The budget keeps the most recent: 60% how recently used (half-life 7 days), 40% how
# recently made (half-life 30 days), as Redis's server weighs them.
FRESHNESS_WEIGHT, NOVELTY_WEIGHT = 0.6, 0.4
FRESHNESS_HALF_LIFE_DAYS, NOVELTY_HALF_LIFE_DAYS = 7.0, 30.0


def _days(now: datetime, then: datetime) -> float:
    return max(0.0, (now - then).total_seconds() / 86400)


def recency(candidate: Candidate, now: datetime) -> float:
    fresh = 0.5 ** (_days(now, candidate.last_accessed) / FRESHNESS_HALF_LIFE_DAYS)
    novel = 0.5 ** (_days(now, candidate.created_at) / NOVELTY_HALF_LIFE_DAYS)
    return FRESHNESS_WEIGHT * fresh + NOVELTY_WEIGHT * novel


def to_forget(
    candidates: Iterable[Candidate], policy: Policy, now: datetime, pinned: frozenset[str]
) -> list[str]:
    """The ids to forget, in the order the candidates came."""
    forget: list[str] = []
    kept: list[Candidate] = []
    age_limit, idle_limit = policy.max_age_days, policy.max_inactive_days
    for candidate in candidates:
        if candidate.id in pinned:
            continue
        allow = policy.memory_type_allowlist
        if allow is not None and candidate.memory_type not in allow:
            continue
        age = _days(now, candidate.created_at)
        idle = _days(now, candidate.last_accessed)
        if age_limit is not None and idle_limit is not None:
            gone = age > age_limit * policy.hard_age_multiplier or (
                age > age_limit and idle > idle_limit
            )
        else:
            gone = (age_limit is not None and age > age_limit) or (
                idle_limit is not None and idle > idle_limit
            )
        if gone:
            forget.append(candidate.id)
        else:
            kept.append(candidate)
    if policy.budget is not None and policy.budget < len(kept):
        ranked = sorted(kept, key=lambda c: recency(c, now), reverse=True)
        keep = {c.id for c in ranked[: policy.budget]}
        forget.extend(c.id for c in kept if c.id not in keep)
    return forget
