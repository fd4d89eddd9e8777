"""Numbers for the server-rendered SVG charts (no script, no inline style)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from memoryapp.core.models import Agent, Turn

CHART_DAYS = 30
HEIGHT = 120  # the SVG's height; bars stand on BASELINE and the tallest is TALLEST high
BASELINE = 110
TALLEST = 100


def _height(value: int, peak: int) -> int:
    return round(TALLEST * value / peak)


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
        height = _height(row["tokens"], peak)
        bars.append(
            {
                "x": i * 14,
                "y": BASELINE - height,
                "h": height,
                "day": row["day"],
                "tokens": row["tokens"],
            }
        )
    return {"bars": bars, "width": max(14 * len(rows), 14), "height": HEIGHT}


def tokens_per_turn(turns: list[Turn]) -> dict:
    """Input and output tokens per iteration, side by side."""
    if not turns:
        return {"bars": [], "width": 0, "height": HEIGHT}
    peak = max(max(t.input_tokens, t.output_tokens) for t in turns) or 1
    bars, x = [], 0
    for turn in turns:
        h_in = _height(turn.input_tokens, peak)
        h_out = _height(turn.output_tokens, peak)
        bars.append(
            {
                "iteration": turn.iteration,
                "x_in": x,
                "x_out": x + 5,
                "h_in": h_in,
                "h_out": h_out,
                "y_in": BASELINE - h_in,
                "y_out": BASELINE - h_out,
                "input": turn.input_tokens,
                "output": turn.output_tokens,
            }
        )
        x += 12
    return {"bars": bars, "width": x, "height": HEIGHT}
