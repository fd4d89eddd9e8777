"""Cleaning tool output before anything reads it: the wrappers agent frameworks put around
it (Claude Code's `<system-reminder>` blocks, `<tool_use_error>` tags, the
`<persisted-output>` preview of an output it saved to a file and TaskOutput's
`<retrieval_status>` envelope, SWE-agent's
`(Open file: …)` footer, OpenHands' `[The command completed with exit code 0.]` lines,
terminal colour codes), line-number prefixes (`     1→` from Claude Code, `     1\\t` from
`cat -n`, `12:` from SWE-agent's window), and cutting text to one bounded line."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.DOTALL)
_TOOL_ERROR_TAG = re.compile(r"</?tool_use_error>")
# Claude Code saves an output too large for the transcript to a file and shows a preview.
_PERSISTED = re.compile(
    r"<persisted-output>\s*(?:Output too large \((?P<size>[^)]*)\)\.\s*)?"
    r"(?:Full output saved to|Output has been saved to):?\s*(?P<path>[^\n]+?)\s*\n"
    r"(?:\s*Preview[^\n]*:\n)?(?P<preview>.*?)(?:</persisted-output>|\Z)",
    re.DOTALL,
)
# TaskOutput (a background command's result): tags around the command's own output.
_TASK_TAG = re.compile(
    r"<(retrieval_status|task_id|task_type|status|exit_code)>(.*?)</\1>", re.DOTALL
)
_TASK_OUTPUT = re.compile(r"<output>\n?(.*?)(?:</output>|\Z)", re.DOTALL)
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


@dataclass(frozen=True)
class Persisted:
    """An output Claude Code saved to a file, of which the transcript holds a preview."""

    path: str
    size: str
    preview: str


def persisted_output(output: str) -> Persisted | None:
    if "<persisted-output>" not in output or not (match := _PERSISTED.search(output)):
        return None
    return Persisted(match["path"].strip(), (match["size"] or "").strip(), match["preview"])


def _unpersisted(match: re.Match) -> str:
    size = f" of {match['size'].strip()}" if match["size"] else ""
    return f"{match['preview'].rstrip()}\n[only a preview{size} was seen; the rest is in a file]"


@dataclass(frozen=True)
class TaskOutput:
    """TaskOutput's answer: how the retrieval went, the task's status, exit code, output."""

    retrieval: str
    status: str
    exit_code: int | None
    output: str


def task_output(output: str) -> TaskOutput | None:
    head = output.lstrip()
    if not head.startswith("<retrieval_status>"):
        return None
    tags = {name: value.strip() for name, value in _TASK_TAG.findall(head)}
    body = _TASK_OUTPUT.search(head)
    code = tags.get("exit_code", "")
    return TaskOutput(
        tags.get("retrieval_status", ""),
        tags.get("status", ""),
        int(code) if re.fullmatch(r"-?\d{1,9}", code) else None,
        body.group(1).rstrip() if body else "",
    )


def strip_wrappers(output: str) -> str:
    """The output without framework wrappers and colour codes."""
    text = _ANSI.sub("", output)
    if envelope := task_output(text):
        text = envelope.output
    text = _PERSISTED.sub(_unpersisted, text)
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


def at_word(text: str, limit: int) -> str:
    """One line of at most `limit` characters, cut after a whole word when one ends in its
    last third (an ellipsis marks the cut): what a person reads quoted in a sentence."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space >= (limit * 2) // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


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
