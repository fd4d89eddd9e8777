"""An agent's TTL: what a new one would do before it is saved (issue 38, item 5), and
applying it when it is.

A session expires its TTL after its last activity (Session.slide_expiry). A new TTL for
the agent applies to its live sessions at once (`apply_ttl`, called by the settings page
and `PATCH /agent` alike): each expires the new TTL after its last activity, so a
shorter TTL can expire some at once (the API answers 404 for them from then on, the next
cleanup removes them) and a longer one keeps them longer. `preview` says which, and when,
before saving. A session with a TTL of its own (a Redis Agent Memory Server client's
`ttl_seconds`) keeps it and is only counted; an already-expired session is not brought
back (the cleanup page extends those)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import F

from memoryapp.core.models import Agent, Session

SHOWN = 20  # sessions listed in each group
SOON = timedelta(days=1)


@dataclass
class Change:
    key: str
    last_activity_at: datetime
    expires_at: datetime  # now
    would_expire_at: datetime


@dataclass
class Preview:
    ttl_seconds: int
    at_once: list[Change] = field(default_factory=list)
    within_a_day: list[Change] = field(default_factory=list)
    at_once_count: int = 0
    within_a_day_count: int = 0
    later_count: int = 0  # sessions whose expiry moves but not within a day
    own_ttl_count: int = 0  # sessions with a TTL of their own, unchanged

    @property
    def changes_nothing(self) -> bool:
        return not (self.at_once_count or self.within_a_day_count or self.later_count)


def preview(agent: Agent, ttl_seconds: int, now: datetime) -> Preview:
    """What `ttl_seconds` as the agent's TTL would change, now."""
    found = Preview(ttl_seconds)
    live = Session.objects.for_agent(agent).active(now)
    found.own_ttl_count = live.filter(ttl_seconds__isnull=False).count()
    following = live.filter(ttl_seconds__isnull=True).order_by("last_activity_at", "pk")
    rows = following.values_list("key", "last_activity_at", "expires_at").iterator()
    for key, last_activity_at, expires_at in rows:
        would = last_activity_at + timedelta(seconds=ttl_seconds)
        if would == expires_at:
            continue
        change = Change(key, last_activity_at, expires_at, would)
        if would <= now:
            found.at_once_count += 1
            if len(found.at_once) < SHOWN:
                found.at_once.append(change)
        elif would <= now + SOON and would < expires_at:
            found.within_a_day_count += 1
            if len(found.within_a_day) < SHOWN:
                found.within_a_day.append(change)
        else:
            found.later_count += 1
    return found


def apply_ttl(agent: Agent, now: datetime) -> int:
    """The agent's TTL on its live sessions that follow it, in one UPDATE; how many."""
    return (
        Session.objects.for_agent(agent)
        .active(now)
        .filter(ttl_seconds__isnull=True)
        .update(expires_at=F("last_activity_at") + timedelta(seconds=agent.ttl_seconds))
    )
