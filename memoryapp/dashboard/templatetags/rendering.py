"""Template filters for agent text: `{{ text|markdown }}` is markdown rendered by a real
parser and sanitised by an allow-list (memoryapp.lib.render), the one place the dashboard
marks agent-derived HTML safe; everything else stays autoescaped."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.safestring import SafeString, mark_safe

from memoryapp.lib import render

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    # Sanitised by nh3's allow-list after markdown-it escaped all raw HTML.
    return mark_safe(render.markdown_html(text or ""))  # noqa: S308


@register.filter
def renders_as_markdown(text: str) -> bool:
    return bool(text) and len(text) <= render.MAX_MARKDOWN_CHARS


@register.filter
def is_long(text: str) -> bool:
    return render.is_long(text or "")


@register.filter
def preview(text: str) -> str:
    return render.preview(text or "")


@register.filter
def moment(text: str) -> datetime | str:
    """An ISO 8601 time kept as text in a JSON field (a message's revisions), as a
    datetime for the `date` filter; text that is not one stays as it is."""
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return text
