"""The default summarizer of pruned history: extractive, deterministic, no model.

A rolling summary is a list of lines: a head line with the task (the first user message)
and one line per summarized message (its first sentence), oldest first. Rolling it
forward adds lines for newly pruned messages and drops the oldest body lines past
`MAX_LINES` / `MAX_CHARS`, so its size is bounded however long the session grows. The
caller passes at most `WINDOW` newly pruned messages, so the work is bounded too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_LINES = 24
MAX_CHARS = 2400
WINDOW = 200
SENTENCE_CHARS = 160
OMITTED = "(earlier steps omitted)"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True)
class Pruned:
    seq: int
    role: str
    content: str
    name: str = ""


def first_sentence(text: str, limit: int = SENTENCE_CHARS) -> str:
    flat = " ".join(text.split())
    if not flat:
        return ""
    sentence = _SENTENCE_END.split(flat, maxsplit=1)[0]
    if len(sentence) > limit:
        sentence = sentence[: limit - 1].rstrip() + "…"
    return sentence


def message_line(message: Pruned) -> str:
    text = first_sentence(message.content)
    if not text:
        return ""
    if message.role == "tool":
        label = f"Tool {message.name}" if message.name else "Tool"
        return f"{label}: {first_sentence(message.content, 100)}"
    return f"{message.role.capitalize()}: {text}"


def roll(
    previous: list[str], task: str, newly_pruned: Iterable[Pruned], skipped: int = 0
) -> list[str]:
    """The summary after more messages were pruned. `skipped` counts pruned messages
    that fell outside the window and were not read."""
    head = [f"Task: {first_sentence(task, 240)}"] if task else []
    body = [line for line in previous if not line.startswith("Task: ") and line != OMITTED]
    omitted = OMITTED in previous
    if skipped:
        body.append(f"({skipped} messages not summarized)")
    body.extend(line for m in newly_pruned if m.role != "system" and (line := message_line(m)))

    def size(lines: list[str]) -> tuple[int, int]:
        return len(lines), len("\n".join(lines))

    # Drop the oldest lines until the summary fits, keeping the task and the newest.
    while body:
        lines = head + ([OMITTED] if omitted else []) + body
        count, chars = size(lines)
        if count <= MAX_LINES and chars <= MAX_CHARS:
            return lines
        body.pop(0)
        omitted = True
    return head + ([OMITTED] if omitted else [])
