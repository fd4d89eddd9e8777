"""Bookkeeping: todo lists and issue trackers. Recorded, so a person sees them, but the
prompt shows them last and few, so they never crowd real findings out.

A todo list says how many items are in progress, pending and done, naming the one in
progress; an issue-tracker command (`bd show …`, `gh issue view …`) is summarised like
any shell command; other tracker tools like any other tool.
"""

from __future__ import annotations

import re

from memoryapp.lib.extraction import kinds, other, shell
from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure
from memoryapp.lib.extraction.text import one_line, plural


def _todos(call: ToolCallData) -> list[dict] | None:
    todos = (call.args or {}).get("todos") or call.detail("newTodos")
    if isinstance(todos, list) and all(isinstance(t, dict) for t in todos):
        return todos
    return None


_ISSUE = r"[A-Za-z][\w]*-[\w.]+"
_CREATED = re.compile(rf"Created issue:?\s+({_ISSUE})")
_TITLE_LINE = re.compile(r"^\s*Title:\s*(.+)$", re.MULTILINE)
_UPDATED = re.compile(rf"Updated issue:?\s+({_ISSUE})")
_CLOSED = re.compile(rf"Closed(?: issue)?:?\s+({_ISSUE})(?::\s*(.+))?")
_SHOWN = re.compile(rf"^({_ISSUE}): (.+)$", re.MULTILINE)
_FIELD = re.compile(r"^(Status|Priority|Type):\s*(\S+)", re.MULTILINE)
_LISTED = re.compile(
    rf"^\s*(?:\d+\.\s*)?(?:\[(P\d)\]\s*)?({_ISSUE})(?:\s*\[(P\d)\][^:-]*)?(?::| -) (.+?)\s*$",
    re.MULTILINE,
)
_COUNT = re.compile(r"\((\d+) issues?|Found (\d+) issues?|^(\d+) issues?", re.MULTILINE)


def issues_in(text: str) -> dict[str, str]:
    """Issue ids and the titles a tracker printed beside them."""
    found: dict[str, str] = {}
    for match in _LISTED.finditer(text):
        title = re.sub(r"\s*\[(?:P\d|open|closed|in_progress)[^\]]*\]\s*$", "", match.group(4))
        found.setdefault(match.group(2), one_line(title, 100))
    if (created := _CREATED.search(text)) and (title := _TITLE_LINE.search(text)):
        found[created.group(1)] = one_line(title.group(1), 100)
    return found


def issue_title(issue: str, output: str) -> str:
    """The title a tracker printed beside `issue` anywhere in its first lines (`● X · Title
    [P1]`, `X: Title`), for a command that names one issue; '' when it printed none."""
    for line in output.splitlines()[:15]:
        if issue in line:
            rest = line.split(issue, 1)[1]
            rest = re.sub(r"^[\s:·\-–—|\]\)]+", "", rest)
            rest = re.sub(r"\s*[\[(](?:P\d|open|in_progress|closed|bug|task|feature)\b.*$", "",
                          rest, flags=re.IGNORECASE)  # fmt: skip
            if len(rest.split()) >= 2:
                return one_line(rest, 100)
    return ""


def tracker_digest(text: str) -> str:
    """What an issue tracker's command said: the issue shown, listed, created, updated or
    closed (beads' `bd`, and trackers printing `id: title` the same way)."""
    if created := _CREATED.search(text):
        title = _TITLE_LINE.search(text)
        return f"created {created.group(1)}" + (
            f": {one_line(title.group(1), 100)}" if title else ""
        )
    if closed := _CLOSED.search(text):
        reason = f": {one_line(closed.group(2), 100)}" if closed.group(2) else ""
        return f"closed {closed.group(1)}{reason}"
    if updated := _UPDATED.search(text):
        return f"updated {updated.group(1)}"
    fields = dict(_FIELD.findall(text))
    shown = _SHOWN.search(text.lstrip())
    if shown and fields and text.lstrip().startswith(shown.group(0)):
        facts = ", ".join(fields[k].lower() if k == "Status" else fields[k] for k in fields)
        return f"{shown.group(1)}: {one_line(shown.group(2), 100)} — {facts}"
    listed = issues_in(text)
    if listed:
        count = _COUNT.search(text)
        total = next((int(g) for g in count.groups() if g), len(listed)) if count else len(listed)
        items = "; ".join(f"{i} {t}" for i, t in list(listed.items())[:3])
        return f"{plural(total, 'issue')}: {items}" + ("; …" if total > 3 else "")
    return ""


def extract(call: ToolCallData) -> Fact:
    name = kinds.normalize_tool(call.tool)
    if kinds.TOOL_KINDS.get(name) == kinds.SHELL:
        fact = shell.extract(call)
        digest = tracker_digest(call.clean)
        if digest and fact.success:
            command = kinds.compact_command(kinds.command_of(call.args, call.query))
            text = f"`{one_line(command, 100)}`: {digest}"
            return Fact(
                text, True, fact.file_path, {**fact.details, "issues": issues_in(call.clean)}
            )
        return fact
    if failed(call):
        return failure(call)
    todos = _todos(call)
    if todos is not None:
        counts: dict[str, int] = {}
        for todo in todos:
            status = str(todo.get("status") or "pending")
            counts[status] = counts.get(status, 0) + 1
        current = next((t for t in todos if t.get("status") == "in_progress"), None) or next(
            (t for t in todos if t.get("status") == "pending"), None
        )
        parts = [f"{n} {status.replace('_', ' ')}" for status, n in counts.items()]
        fact = f"{len(todos)} todos: {', '.join(parts)}"
        if current:
            label = current.get("content") or current.get("title") or ""
            fact += f"; now: {one_line(str(label), 100)}"
        return Fact(fact, True, details={"todos": counts})
    return other.extract(call)
