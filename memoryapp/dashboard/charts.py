"""Numbers for the dashboard's bar charts: tokens per day on the agent page, tokens per
iteration on the session page.

Both answer one `Chart`, which templates/dashboard/_chart.html draws as server-rendered
SVG (bars, y ticks with values, x labels, a hover title per column) and lists as a table
for readers who cannot hover or see it; no script and no inline style, as the CSP wants.
Bars are laid out in viewBox units of a plot that stretches to the card's width; ticks and
labels are placed in pixels (vertically) and percents (horizontally) so their text is never
stretched with it. The functions that shape the numbers are pure; only `tokens_per_day`
reads the database, in one grouped query.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.utils import dateformat, timezone

from memoryapp.core.models import Agent, Turn
from memoryapp.dashboard.templatetags.numbers import thousands

CHART_DAYS = 30
PLOT_TOP = 8  # px above the plot, so the top tick's label is not cut
PLOT_HEIGHT = 160  # px, equal to the plot's viewBox height: 1 unit is 1 px vertically
X_AXIS_HEIGHT = 22  # px under the plot for the x labels
SLOT = 10  # viewBox units per column; the plot is SLOT * columns wide
MIN_SLOTS = 12  # a session of three turns draws three bars, not three walls
MAX_X_LABELS = 8  # more would collide on a narrow card
TICK_INTERVALS = 4


@dataclass(frozen=True)
class Series:
    name: str  # "input", as read after a number: "1,200 input"
    css_class: str  # the bar's class: its colour comes from the stylesheet


INPUT = Series("input", "in")
OUTPUT = Series("output", "out")


@dataclass(frozen=True)
class Bar:
    series: Series
    value: int
    x: float  # viewBox units
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Column:
    """One day or one iteration: its bars, its label, its total."""

    label: str  # in full, for the hover title and the table: "Sun, Mar 3", "#12"
    axis_label: str  # on the x axis; empty where labels are thinned out
    axis_minor: bool  # every other label, hidden on a narrow screen (by the stylesheet)
    x: float  # the slot's left edge, viewBox units
    center: float  # the slot's middle, percent of the plot's width
    bars: tuple[Bar, ...]
    total: int
    # Written here rather than in the template (a column costs it a dozen lookups less):
    title: str = ""  # the hover text: "#12: 1,250 tokens (1,200 input, 50 output)"
    cells: tuple[str, ...] = ()  # the table's numbers: each bar's value, then the total


@dataclass(frozen=True)
class Tick:
    value: int
    label: str  # compact: "2.5k"
    y: float  # px from the top of the SVG


@dataclass(frozen=True)
class Chart:
    title: str  # the chart's accessible name
    caption: str
    x_name: str  # the table's first column: "Day", "Iteration"
    empty_text: str  # said instead of a chart whose columns are all zero
    series: tuple[Series, ...]
    columns: tuple[Column, ...]
    ticks: tuple[Tick, ...]
    width: int  # the plot's viewBox width
    slot: int = SLOT
    plot_top: int = PLOT_TOP
    plot_height: int = PLOT_HEIGHT
    height: int = PLOT_TOP + PLOT_HEIGHT + X_AXIS_HEIGHT
    label_y: int = PLOT_TOP + PLOT_HEIGHT + 15

    @property
    def total(self) -> int:
        return sum(column.total for column in self.columns)

    @property
    def peak(self) -> Column | None:
        """The column with the largest total (the latest of equals), None when all are 0."""
        best = None
        for column in self.columns:
            if column.total and (best is None or column.total >= best.total):
                best = column
        return best


def nice_ticks(peak: int, intervals: int = TICK_INTERVALS) -> list[int]:
    """Tick values from 0 to a round number at or above `peak`, at most `intervals` + 1
    of them, in steps of 1, 2, 2.5 or 5 times a power of ten (never a fraction)."""
    if peak <= 0:
        return [0]
    raw = peak / intervals
    if raw <= 1:
        step = 1
    else:
        magnitude = 10 ** math.floor(math.log10(raw))
        factors = (1, 2, 2.5, 5, 10) if magnitude >= 10 else (1, 2, 5, 10)
        step = int(next(f * magnitude for f in factors if f * magnitude >= raw))
    top = math.ceil(peak / step) * step
    return list(range(0, top + 1, step))


def compact_number(value: int) -> str:
    """An axis label: 950, 2.5k, 12k, 1.25M."""
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return str(value)


def _ticks(top: int, values: list[int]) -> tuple[Tick, ...]:
    return tuple(
        Tick(value, compact_number(value), round(PLOT_TOP + PLOT_HEIGHT * (1 - value / top), 1))
        for value in values
    )


def _height(value: int, top: int) -> float:
    height = PLOT_HEIGHT * value / top
    # A non-zero value stays visible however small beside the peak.
    return round(max(height, 1.0) if value else 0.0, 2)


def _axis_labels(count: int) -> list[bool]:
    """Which columns get an x label: every k-th, counted back from the newest."""
    every = math.ceil(count / MAX_X_LABELS) or 1
    return [(count - 1 - i) % every == 0 for i in range(count)]


def _minor_labels(count: int) -> list[bool]:
    """Every other labelled column, counted back from the newest: the labels a narrow
    screen drops so that the rest do not collide."""
    every = math.ceil(count / MAX_X_LABELS) or 1
    return [(count - 1 - i) % (2 * every) == every for i in range(count)]


def _chart(
    *,
    title: str,
    caption: str,
    x_name: str,
    empty_text: str,
    labels: Sequence[tuple[str, str]],
    values: Sequence[tuple[int, ...]],
    series: tuple[Series, ...],
    stacked: bool,
) -> Chart:
    """Bars for `values` (one tuple per column, one value per series), stacked or side by
    side, scaled to the top tick."""
    peak = max((sum(v) if stacked else max(v) for v in values if v), default=0)
    tick_values = nice_ticks(peak)
    top = tick_values[-1] or 1
    slots = max(len(values), MIN_SLOTS)
    width = SLOT * slots
    shown, minor = _axis_labels(len(values)), _minor_labels(len(values))
    columns = []
    for i, ((label, axis_label), column_values) in enumerate(zip(labels, values, strict=True)):
        left = i * SLOT
        bars = []
        if stacked:
            base = 0.0
            for one, value in zip(series, column_values, strict=True):
                height = _height(value, top)
                base += height
                bars.append(Bar(one, value, left + 1.5, round(PLOT_HEIGHT - base, 2), 7, height))
        else:
            bar_width = 8 / len(series)
            for j, (one, value) in enumerate(zip(series, column_values, strict=True)):
                height = _height(value, top)
                x = left + 1 + j * bar_width
                bars.append(Bar(one, value, x, round(PLOT_HEIGHT - height, 2), bar_width, height))
        total = sum(column_values)
        numbers = [thousands(value) for value in column_values]
        said = ", ".join(f"{n} {one.name}" for n, one in zip(numbers, series, strict=True))
        columns.append(
            Column(
                label=label,
                axis_label=axis_label if shown[i] else "",
                axis_minor=minor[i],
                x=left,
                center=round(100 * (left + SLOT / 2) / width, 3),
                bars=tuple(bars),
                total=total,
                title=f"{label}: {thousands(total)} tokens ({said})",
                cells=(*numbers, thousands(total)),
            )
        )
    return Chart(
        title=title,
        caption=caption,
        x_name=x_name,
        empty_text=empty_text,
        series=series,
        columns=tuple(columns),
        ticks=_ticks(top, tick_values),
        width=width,
    )


def daily_chart(
    tokens_by_day: Mapping[date, tuple[int, int]], first: date, days: int = CHART_DAYS
) -> Chart:
    """Input and output tokens for each of `days` days from `first`, stacked; a day with
    no turns is a column of zero."""
    window = [first + timedelta(days=i) for i in range(days)]
    last = window[-1]
    return _chart(
        title=f"Tokens per day, the last {days} days",
        caption=f"Tokens per day, {dateformat.format(first, 'M j')} to "
        f"{dateformat.format(last, 'M j')}",
        x_name="Day",
        empty_text=f"No tokens in the last {days} days.",
        labels=[
            (dateformat.format(day, "D, M j"), dateformat.format(day, "M j")) for day in window
        ],
        values=[tuple(tokens_by_day.get(day, (0, 0))) for day in window],
        series=(INPUT, OUTPUT),
        stacked=True,
    )


def tokens_per_day(agent: Agent, days: int = CHART_DAYS, today: date | None = None) -> Chart:
    """The agent's tokens per day over the last `days` days (today included, in the
    current time zone), in one grouped query."""
    today = today or timezone.localdate()
    first = today - timedelta(days=days - 1)
    since = timezone.make_aware(datetime.combine(first, time.min))
    rows = (
        Turn.objects.filter(session__agent=agent, timestamp__gte=since)
        .annotate(day=TruncDate("timestamp"))
        .values("day")
        .annotate(input=Sum("input_tokens"), output=Sum("output_tokens"))
        .order_by()
    )
    by_day = {row["day"]: (row["input"] or 0, row["output"] or 0) for row in rows}
    return daily_chart(by_day, first, days)


def tokens_per_turn(turns: Sequence[Turn]) -> Chart:
    """Input and output tokens per iteration, side by side; `turns` oldest first."""
    first = turns[0].iteration if turns else 0
    last = turns[-1].iteration if turns else 0
    return _chart(
        title="Input and output tokens per iteration",
        caption=f"Tokens per iteration, #{first} to #{last}",
        x_name="Iteration",
        empty_text="No token counts were reported for these iterations.",
        labels=[(f"#{turn.iteration}", f"#{turn.iteration}") for turn in turns],
        values=[(turn.input_tokens, turn.output_tokens) for turn in turns],
        series=(INPUT, OUTPUT),
        stacked=False,
    )
