"""Agent text made readable for people: markdown through a real CommonMark parser and an
allow-list sanitiser, tool calls as a name and pretty-printed arguments, and each tool
result placed under the call it answers.

Plain data in, plain data out; the dashboard's template filters wrap these. Nothing here
trusts its input: markdown-it escapes raw HTML (`html=False`), and nh3 then removes every
tag and attribute outside the allow-list and every link that is not http(s) or mailto.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import nh3
from markdown_it import MarkdownIt

# Past this many characters a message is shown as plain text: parsing megabytes of tool
# output on every page view is slow and reads no better.
MAX_MARKDOWN_CHARS = 20_000
# A message longer than this (characters or lines) starts collapsed.
COLLAPSE_CHARS = 1_500
COLLAPSE_LINES = 25
PREVIEW_CHARS = 240
MAX_ARGUMENT_CHARS = 20_000

# `breaks`: a newline is a line break, as in chat text and the prompt's summary lines.
_md = MarkdownIt(
    "commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True}
).enable(["table", "strikethrough"])

ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "code",
    "em", "strong", "del", "s", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr",
    "th", "td",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "code": {"class"}}


def markdown_html(text: str) -> str:
    """Sanitised HTML for a message's markdown. Images are dropped (they would load from
    anywhere); headings keep their level; links get rel=nofollow noopener.

    Messages do not change, and the session page shows the same hundred on every view and
    refresh: a message's HTML is kept (up to CACHED_MARKDOWN of them, each of at most
    CACHED_MARKDOWN_CHARS) instead of being parsed and sanitised again (a sixth of the
    page's time)."""
    if len(text) <= CACHED_MARKDOWN_CHARS:
        return _cached_markdown_html(text)
    return _markdown_html(text)


CACHED_MARKDOWN = 1024
CACHED_MARKDOWN_CHARS = 8_000


@functools.lru_cache(maxsize=CACHED_MARKDOWN)
def _cached_markdown_html(text: str) -> str:
    return _markdown_html(text)


def _markdown_html(text: str) -> str:
    env: dict = {}
    tokens = _md.parse(text, env)
    for token in tokens:
        if token.type == "inline" and token.children:
            token.children = [_literal_underscores(child) for child in token.children]
    html = _md.renderer.render(tokens, _md.options, env)
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="nofollow noopener noreferrer",
    )


def _literal_underscores(token):
    """Underscores stay underscores: in agent text they are names (`__init__.py`,
    `snake_case`), far more often than emphasis; `*` and `**` still emphasise."""
    if token.type in ("em_open", "em_close", "strong_open", "strong_close") and "_" in (
        token.markup or ""
    ):
        token.type, token.tag, token.nesting, token.content = "text", "", 0, token.markup
    return token


def is_long(text: str) -> bool:
    return len(text) > COLLAPSE_CHARS or text.count("\n") >= COLLAPSE_LINES


def preview(text: str) -> str:
    """The first words of a long message, on one line."""
    flat = " ".join(text[: PREVIEW_CHARS * 2].split())
    return flat[:PREVIEW_CHARS] + (
        "…" if len(flat) > PREVIEW_CHARS or len(text) > len(flat) else ""
    )


@dataclass
class Call:
    """One tool call of an assistant message, as people read it."""

    id: str
    name: str
    arguments: str  # pretty-printed JSON when the arguments are JSON, else as sent
    result: dict | None = None  # the tool message that answers it, when it is shown


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value[:MAX_ARGUMENT_CHARS]
        if isinstance(value, str):
            return value[:MAX_ARGUMENT_CHARS]
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    return text[:MAX_ARGUMENT_CHARS]


def tool_calls(raw: Any) -> list[Call]:
    """The calls of a message's `tool_calls`, whatever shape the agent sent: OpenAI's
    `{id, type, function: {name, arguments}}`, or flat `{id, name, input|arguments}`."""
    if not isinstance(raw, list):
        return []
    calls = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        function = item.get("function") if isinstance(item.get("function"), dict) else {}
        name = function.get("name") or item.get("name") or item.get("tool") or "tool"
        if "arguments" in function:
            arguments = function["arguments"]
        else:
            arguments = item.get("input", item.get("arguments", item.get("args")))
        calls.append(
            Call(
                id=str(item.get("id") or ""),
                name=str(name)[:200],
                arguments="" if arguments in (None, "", {}) else _pretty(arguments),
            )
        )
    return calls


def thread(messages: list[dict]) -> list[dict]:
    """Adds `calls` (list of Call) to each message and moves every tool result under the
    call it answers, when that call is shown earlier in the same list. Returns the
    messages still shown at top level, in order."""
    open_calls: dict[str, Call] = {}
    shown = []
    for message in messages:
        calls = tool_calls(message.get("tool_calls"))
        message["calls"] = calls
        answered = open_calls.pop(message.get("tool_call_id") or "", None)
        if message.get("role") == "tool" and answered is not None:
            answered.result = message
            continue
        for call in calls:
            if call.id:
                open_calls[call.id] = call
        shown.append(message)
    return shown
