"""Markdown that a memory context injects into an agent's prompt.

Sections, each left out when empty (an empty context gives an empty prompt):
- `## Session State`: goal, current subtask and its status, active files, recent tools;
- `## Earlier Conversation`: the summary of pruned history;
- `## Session Context`: working context, `- **Active file**: lib/app.ex`;
- `# Execution Memory`: findings grouped by kind (memoryapp.lib.extraction.kinds): Files
  Already Read, Previous Search Results, Files Changed, Commands Run, Web Pages and
  Searches, Subagent Results, Other Findings, and Bookkeeping last and short;
- `## Remembered Information`: `- [fact] (high confidence) content (2026-11-20)`.

Everything here came from an agent or a model, so text is put on one line, where it cannot
add a heading, a list item or a section, and a structural marker at its start is escaped;
inside the line it stays verbatim (commands, paths and ids must be copied exactly).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memoryapp.lib.extraction import kinds
from memoryapp.lib.extraction.text import one_line

# Markers that make a line a heading, quote, list item, rule or setext underline.
_LINE_START = re.compile(r"^(\s*)([#>=]|[-+*](?=\s|[-*_]{2})|_{3}|\d+[.)](?=\s|$))")


def escape_markdown(text: str) -> str:
    """One line of text, safe to place inside the prompt's markdown: on one line it cannot
    start a heading, a list item or a section of its own, and a marker at its start is
    escaped. Everything else stays verbatim, because the reader is a model that must copy
    commands, paths and ids exactly (`5k-_VTxqtCEI`, `mix test 2>&1 | tail -5`)."""
    flat = " ".join(str(text).split())
    return _LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), flat)


def humanize_key(key: str) -> str:
    words = re.sub(r"[_\-.\s]+", " ", key).strip()
    return escape_markdown(words[:1].upper() + words[1:]) if words else "(empty)"


def format_value(value: Any) -> str:
    if isinstance(value, str):
        return escape_markdown(value)
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return escape_markdown(", ".join(str(v) for v in value))
    return escape_markdown(json.dumps(value, ensure_ascii=False, sort_keys=True))


def confidence_badge(confidence: float) -> str:
    if confidence >= 0.8:
        return "(high confidence)"
    if confidence >= 0.5:
        return "(medium confidence)"
    return "(low confidence)"


@dataclass(frozen=True)
class WorkingItem:
    key: str
    value: Any
    confidence: float = 1.0


@dataclass(frozen=True)
class MemoryItem:
    memory_type: str
    content: str
    confidence: float
    updated: datetime | None = None


@dataclass(frozen=True)
class FindingItem:
    tool: str
    query: str
    fact: str
    file_path: str = ""
    success: bool = True
    kind: str = kinds.OTHER
    stale: bool = False
    earlier: int = 0  # earlier findings this one stands for (memoryapp.lib.usefulness)


@dataclass(frozen=True)
class SessionState:
    goal: str = ""
    subtask: str = ""
    subtask_status: str = ""
    active_files: list[str] = field(default_factory=list)
    recent_tools: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.goal or self.subtask or self.active_files or self.recent_tools)


def working_line(item: WorkingItem) -> str:
    return f"- **{humanize_key(item.key)}**: {format_value(item.value)}"


def memory_line(item: MemoryItem) -> str:
    date = f" ({item.updated.date().isoformat()})" if item.updated else ""
    kind = escape_markdown(item.memory_type)
    return f"- [{kind}] {confidence_badge(item.confidence)} {escape_markdown(item.content)}{date}"


FINDING_GROUPS = kinds.GROUP_ORDER
# Bookkeeping (todo lists, trackers) is shown last and at most this many lines.
BOOKKEEPING_LINES = 2


def finding_group(kind: str) -> str:
    """The group a finding is shown under, by its kind (memoryapp.lib.extraction.kinds)."""
    return kinds.group_of(kind)


def finding_line(item: FindingItem) -> str:
    notes = ""
    if not item.success:
        notes += " (failed)"
    if item.stale:
        notes += " (edited since; read it again)"
    if item.earlier:
        notes += _folded_note(item.kind, item.earlier)
    fact = escape_markdown(item.fact)
    if item.kind == kinds.READ:
        subject = item.file_path or item.query
        return f"- {escape_markdown(subject)}: {fact}{notes}"
    if item.kind == kinds.SEARCH:
        return f"- {escape_markdown(item.query)}: {fact}{notes}"
    if item.kind in (kinds.EDIT, kinds.SHELL, kinds.WEB_FETCH, kinds.SUBAGENT):
        return f"- {fact}{notes}"  # the fact names its file, command, URL or task
    if item.kind == kinds.WEB_SEARCH:
        return f"- {escape_markdown(item.query)}: {fact}{notes}"
    query = f" ({escape_markdown(item.query)})" if item.query else ""
    return f"- {escape_markdown(item.tool)}{query}: {fact}{notes}"


def _folded_note(kind: str, earlier: int) -> str:
    if kind == kinds.EDIT:
        return f" (after {earlier} earlier edit{'s' if earlier > 1 else ''})"
    if kind == kinds.SHELL:
        return f" (the latest of {earlier + 1} runs)"
    if kind == kinds.BOOKKEEPING:
        return f" (the latest of {earlier + 1} updates)"
    return f" ({earlier + 1} times)"


GOAL_CHARS = 400


def state_section(state: SessionState | None) -> str:
    if state is None or state.is_empty():
        return ""
    lines = ["## Session State"]
    if state.goal:
        lines.append(f"- **Goal**: {escape_markdown(one_line(state.goal, GOAL_CHARS))}")
    if state.subtask:
        status = f" ({escape_markdown(state.subtask_status)})" if state.subtask_status else ""
        lines.append(f"- **Current subtask**: {escape_markdown(state.subtask)}{status}")
    if state.active_files:
        lines.append(f"- **Active files**: {escape_markdown(', '.join(state.active_files))}")
    if state.recent_tools:
        lines.append(f"- **Recent tools**: {escape_markdown(', '.join(state.recent_tools))}")
    return "\n".join(lines)


def summary_section(summary: str) -> str:
    if not summary.strip():
        return ""
    body = "\n".join(escape_markdown(line) for line in summary.splitlines() if line.strip())
    return "## Earlier Conversation\n" + body


def working_section(lines: Iterable[str]) -> str:
    lines = list(lines)
    return "## Session Context\n" + "\n".join(lines) if lines else ""


def memories_section(lines: Iterable[str]) -> str:
    lines = list(lines)
    return "## Remembered Information\n" + "\n".join(lines) if lines else ""


def findings_section(items: Iterable[FindingItem]) -> str:
    grouped: dict[str, list[str]] = {name: [] for name in FINDING_GROUPS}
    for item in items:
        lines = grouped[finding_group(item.kind)]
        if item.kind == kinds.BOOKKEEPING and len(lines) >= BOOKKEEPING_LINES:
            continue
        lines.append(finding_line(item))
    parts = [f"**{name}:**\n" + "\n".join(lines) for name, lines in grouped.items() if lines]
    return "# Execution Memory\n\n" + "\n\n".join(parts) if parts else ""


def join_sections(sections: Iterable[str]) -> str:
    return "\n\n".join(s for s in sections if s)
