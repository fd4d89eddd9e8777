"""Numbers for the server-rendered SVG charts (no script, no inline style)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from memoryapp.core.models import Agent, Turn

CHART_DAYS = 30


def tokens_per_day(agent: Agent, days: int = CHART_DAYS) -> dict:
    since = timezone.now() - timedelta(days=days)
    rows = (
        Turn.objects.filter(session__agent=agent, timestamp__gte=since)
        .annotate(day=TruncDate("timestamp"))
        .values("day")
        .annotate(tokens=Sum(F("input_tokens") + F("output_tokens")))
        .order_by("day")
    )
    rows = list(rows)
    peak = max((r["tokens"] for r in rows), default=0) or 1
    bars = []
    for i, row in enumerate(rows):
        height = round(100 * row["tokens"] / peak)
        bars.append(
            {
                "x": i * 14,
                "y": 110 - height,
                "h": height,
                "day": row["day"],
                "tokens": row["tokens"],
            }
        )
    return {"bars": bars, "width": max(14 * len(rows), 14), "height": 120}
