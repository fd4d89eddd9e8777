"""`{% finding_row item %}`: one finding of a list (the session page, the live poll's new
ones) as `dashboard/memories.html#item` renders it with `kind="finding"`.

A session page lists up to 200 findings, and that partial took about 170 µs a finding
(fifty variable lookups, twenty-odd escapes and a dozen conditions, most of which only
choose between kinds): a third of the page at 130 findings. This writes the same markup in
Python. The partial stays the reference and what every single finding is answered with
(after an edit, with its history open); tests/test_finding_row.py renders both for every
branch of the markup and requires the same HTML.
"""

from __future__ import annotations

import unicodedata
from html import escape

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.template.defaultfilters import date as date_filter
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator
from django.utils.timezone import template_localtime

from memoryapp.core.models import Finding
from memoryapp.dashboard.models import RANK, Membership
from memoryapp.dashboard.templatetags.links import item_url, session_url

register = template.Library()


def _text(value) -> str:
    return escape(str(value))


def _truncated(value, length: int) -> str:
    """`value|truncatechars:length`: Truncator counts characters of the NFC text, so a
    text no longer than `length` comes back as it is (without its per-character walk)."""
    text = unicodedata.normalize("NFC", str(value))
    if len(text) > length:
        text = Truncator(text).chars(length)
    return escape(text)


def _edited(item) -> str:
    """' · edited by … <time>…</time>', or nothing."""
    if not item.edited_by:
        return ""
    when = _text(date_filter(template_localtime(item.edited_at), "c"))
    return (
        f' · edited by <span class="actor">{_text(item.edited_by)}</span> '
        f'<time datetime="{when}">{_text(naturaltime(item.edited_at))}</time>'
    )


def _provenance(item, agent_name: str) -> str:
    if item.turn_id or item.message_id:
        parts = ["from "]
        if item.turn_id:
            parts.append(f"turn {int(item.turn.iteration)}")
        if item.message_id:
            if item.turn_id:
                parts.append(" · ")
            seq = int(item.message.seq)
            url = _text(session_url(agent_name, item.session.key))
            parts.append(f'<a href="{url}?at={seq}#msg-{seq}">message #{seq}</a>')
        if item.tool_call_id:
            call = item.tool_call
            parts.append(
                f' · call <code class="call">{_text(call.tool)} '
                f"{_truncated(call.query, 120)}</code>"
            )
        said = "".join(parts)
    elif item.added_by:
        said = f'added by <span class="actor">{_text(item.added_by)}</span>'
    elif item.source == Finding.Source.MANUAL:
        said = "added by hand"
    else:
        said = ""
    return said + _edited(item)


@register.simple_tag(takes_context=True)
def finding_row(context, item) -> SafeString:
    """The finding `item` as the item partial shows it in a list (its history closed), for
    the page's agent and the viewer's role."""
    agent_name = context["agent"].name
    pk = int(item.pk)
    element = f"item-finding-{pk}"
    # Set by Finding.mark_stale_reads; like the partial, no attribute, no flag.
    stale = getattr(item, "is_stale_read", False)
    flags = ("" if item.success else ' <span class="bad">failed</span>') + (
        ' <span class="bad">edited since read</span>' if stale else ""
    )
    # Set by the session page (from the context it assembled); elsewhere, no mark.
    in_prompt = getattr(item, "in_prompt", None)
    if in_prompt is True:
        flags += ' <span class="badge in-prompt">in the prompt</span>'
    elif in_prompt is False:
        flags += ' <span class="badge left-out">not in the prompt</span>'

    actions = []
    edit_url = _text(item_url("dashboard:item_edit", agent_name, "finding", pk))
    history_url = _text(item_url("dashboard:item_history", agent_name, "finding", pk))
    swap = f'hx-target="#{element}" hx-swap="outerHTML"'
    # Editors and staff (the partial's `role == "editor" or role == "staff"`).
    may_edit = RANK.get(context.get("role"), -1) >= RANK[Membership.Role.EDITOR]
    if may_edit and item.is_editable:
        actions.append(f'<a href="{edit_url}" hx-get="{edit_url}" {swap}>edit</a>')
    actions.append(f'<a href="{history_url}" hx-get="{history_url}" {swap}>history</a>')
    html = "\n".join(
        (
            f'<div class="item finding" id="{element}">',
            f"<div><strong>{_text(item.tool)}</strong> {_truncated(item.query, 200)} "
            f'<span class="badge">{_text(item.kind)}</span> '
            f'<span class="badge">{_text(item.source)}</span>{flags}</div>',
            f'<p class="content">{_text(item.fact)}</p>',
            f'<div class="meta provenance">{_provenance(item, agent_name)}</div>',
            '<div class="actions">',
            *actions,
            "</div>",
            f'<div class="history-slot" id="history-finding-{pk}"></div>',
            "</div>",
        )
    )
    # Every value above went through escape() (or int()): agent text is never raw.
    return mark_safe(html)  # noqa: S308
