"""Cleaning tool output before anything reads it: the wrappers agent frameworks put around
it (Claude Code's `<system-reminder>` blocks and `<tool_use_error>` tags, SWE-agent's
`(Open file: …)` footer, OpenHands' `[The command completed with exit code 0.]` lines,
terminal colour codes), line-number prefixes (`     1→` from Claude Code, `     1\\t` from
`cat -n`, `12:` from SWE-agent's window), and cutting text to one bounded line."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.DOTALL)
_TOOL_ERROR_TAG = re.compile(r"</?tool_use_error>")
_SWE_FOOTER = re.compile(
    r"\n?\((?:Open file|Current directory|Interactive session):[^\n]*\)[ \t]*|\n?bash-\$\s*$"
)
_OPENHANDS_NOTES = re.compile(
    r"\[(?:The command completed with exit code -?\d+\.?|Command finished with exit code -?\d+"
    r"|Current working directory: [^\]\n]*|Python interpreter: [^\]\n]*"
    r"|Below is the output of the previous command\.?)\]"
)

# SWE-agent's window header: `[File: path (N lines total)]`, with the path and the total.
SWE_FILE_HEADER = re.compile(r"^\[File: ([^\]\n]+?) \((\d+) lines total\)\]", re.MULTILINE)

# A line-number prefix per numbering style: Claude Code's arrow, cat -n's tab, SWE-agent's
# colon. Each captures the number.
_NUMBERED = (
    re.compile(r"^ *(\d+)→"),
    re.compile(r"^ *(\d+)\t"),
    re.compile(r"^(\d+):"),
)


def strip_wrappers(output: str) -> str:
    """The output without framework wrappers and colour codes."""
    text = _ANSI.sub("", output)
    text = _REMINDER.sub("", text)
    text = _TOOL_ERROR_TAG.sub("", text)
    text = _SWE_FOOTER.sub("\n", text)
    text = _OPENHANDS_NOTES.sub("", text)
    return text.strip("\n")


@dataclass(frozen=True)
class Numbered:
    """Text with its line-number prefixes removed, and the numbers it showed."""

    text: str
    first: int | None = None
    last: int | None = None


def strip_line_numbers(text: str) -> Numbered:
    """Remove line-number prefixes when (nearly) every non-empty line has one style."""
    lines = text.split("\n")
    filled = [line for line in lines if line.strip()]
    if not filled:
        return Numbered(text)
    for pattern in _NUMBERED:
        hits = sum(1 for line in filled if pattern.match(line))
        if hits and hits >= 0.8 * len(filled):
            numbers: list[int] = []
            out = []
            for line in lines:
                match = pattern.match(line)
                if match:
                    numbers.append(int(match.group(1)))
                    out.append(line[match.end() :])
                else:
                    out.append(line)
            return Numbered("\n".join(out), min(numbers), max(numbers))
    return Numbered(text)


def one_line(text: str, limit: int) -> str:
    """All on one line, cut at `limit` characters (an ellipsis marks the cut)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def tail_line(text: str, limit: int) -> str:
    """All on one line, keeping the end when it is too long (results come last)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else "…" + flat[-(limit - 1) :].lstrip()


def last_lines(text: str, count: int) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-count:]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")


def sentences(text: str) -> list[str]:
    flat = " ".join(text.split())
    return [s for s in _SENTENCE_END.split(flat) if s]


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"
