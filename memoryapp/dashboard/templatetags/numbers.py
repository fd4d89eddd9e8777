"""Template filters that make numbers read as what they measure: `{{ ttl|duration }}`
says "30 days" or "1 hour, 30 minutes" where the settings hold 2592000 or 5400 seconds.
`format_duration` is the same rule for Python callers (the settings form's help).
`{{ count|thousands }}` is humanize's `intcomma`, made cheap for whole numbers."""

from __future__ import annotations

import functools
from datetime import timedelta

from django import template
from django.contrib.humanize.templatetags.humanize import intcomma
from django.utils import translation
from django.utils.formats import get_format

register = template.Library()

UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
NBSP = "\xa0"  # "30 days" never breaks between the number and its unit


def format_duration(seconds: int, parts: int = 2) -> str:
    """The largest `parts` non-zero units of `seconds`: 86400 → "1 day", 5400 → "1 hour,
    30 minutes", 90061 → "1 day, 1 hour" (like Django's timesince, the rest is dropped)."""
    seconds = int(seconds)
    if seconds <= 0:
        return f"0{NBSP}seconds"
    said, rest = [], seconds
    for name, size in UNITS:
        count, rest = divmod(rest, size)
        if count:
            said.append(f"{count:,}{NBSP}{name}{'' if count == 1 else 's'}")
        if len(said) == parts:
            break
    return ", ".join(said)


@register.filter
def duration(value: int | float | timedelta | None) -> str:
    """Seconds (or a timedelta) as a duration; empty for None or anything not a number."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if value is None or isinstance(value, bool):
        return ""
    try:
        return format_duration(int(value))
    except (TypeError, ValueError):
        return ""


def rounded_duration(seconds: float) -> str:
    """A distance in time in its largest unit, rounded: 29 days 23 hours → "30 days",
    100 minutes → "2 hours" (what "expires in" and "ago" need; exact TTLs use
    `format_duration`)."""
    seconds = abs(seconds)
    for name, size in UNITS:
        if seconds >= size or size == 1:
            count = max(1, round(seconds / size))
            if name != "day" and count * size >= UNITS[UNITS.index((name, size)) - 1][1]:
                bigger, bigger_size = UNITS[UNITS.index((name, size)) - 1]
                count, name = round(count * size / bigger_size), bigger
            return f"{count:,}{NBSP}{name}{'' if count == 1 else 's'}"
    return f"0{NBSP}seconds"


@register.filter
def until(value) -> str:
    """How long until `value` (a datetime), rounded to its largest unit: "30 days"."""
    from django.utils import timezone

    if value is None:
        return ""
    return rounded_duration((value - timezone.now()).total_seconds())


@register.filter
def since(value) -> str:
    """How long ago `value` was, rounded to its largest unit: "3 hours"."""
    from django.utils import timezone

    if value is None:
        return ""
    return rounded_duration((timezone.now() - value).total_seconds())


@functools.lru_cache(maxsize=64)
def _grouping(language: str | None) -> str | None:
    """The language's thousands separator when it groups digits by three, else None."""
    if get_format("NUMBER_GROUPING") != 3:
        return None
    return str(get_format("THOUSAND_SEPARATOR"))


@register.filter(is_safe=True)
def thousands(value):
    """What `intcomma` answers, "12,345" (the active language's separator): for a whole
    number without looking the language's number format up again and going through
    Decimal. A session page shows a few thousand numbers (each turn of its chart, each
    message's tokens); intcomma spent a sixth of the page's time on them."""
    if type(value) is int:
        separator = _grouping(translation.get_language())
        if separator is not None:
            return f"{value:,}".replace(",", separator)
    return intcomma(value)
