"""aider chat histories (`.aider.chat.history.md`): markdown, appended to by every run.

`# aider chat started at <time>` starts a session (key: the file's key and the start time).
`#### ` lines are what the user typed; `> ` lines are what aider printed (lint and test
output, "Applied edit to ...", commits, token reports); everything else is the model's
reply. A session's first `> ` block is aider's banner (command line, version, model,
files added): it goes to metadata, not into the conversation. Later `> ` blocks become
user messages named `aider` in the next turn's inputs (they are what the user saw before
typing on), and their "Applied edit to <file>" and "Commit <sha> <message>" lines become
tool calls of the reply before them (`edit`, `git_commit`), "Tokens: N sent, M received"
its usage. aider edits through the reply's text, not through function calls, so the
assistant messages carry no `tool_calls`.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.client import ToolCall
from agents.importers.core import (
    ImportedSession,
    Problem,
    TurnBody,
    TurnBuilder,
    cut,
    iso_timestamp,
    tool_record,
)

FORMAT = "aider"
HEADER = re.compile(r"^# aider chat started at (?P<start>.+?)\s*$")
MODEL = re.compile(r"^(?:Main model|Models?):\s*(?P<model>\S+)")
VERSION = re.compile(r"^Aider v(?P<version>\S+)")
ADDED = re.compile(r"^Added (?P<file>.+?) to the chat\.?$")
APPLIED = re.compile(r"^Applied edit to (?P<file>.+?)\s*$")
FAILED = re.compile(
    r"^(?:Failed to apply edit to |Unable to apply edit to |## SearchReplaceNoExactMatch: "
    r"This SEARCH block failed to exactly match lines in )(?P<file>.+?)\s*$"
)
COMMIT = re.compile(r"^Commit (?P<sha>[0-9a-f]{7,40}) (?P<message>.+)$")
MODE_LINE = re.compile(r"^-\*-.*-\*-\s*$")
TOKENS = re.compile(r"(?P<count>[\d.,]+)\s*(?P<unit>[kKmM]?)\s+(?P<what>sent|received)\b")
MAX_FILES = 50


def is_history(head: str) -> bool:
    return any(HEADER.match(line) for line in head.splitlines())


def _kind(line: str) -> str:
    if line.startswith("#### ") or line.rstrip() == "####":
        return "user"
    if line.startswith("> ") or line.rstrip() == ">":
        return "output"
    return "text" if line.strip() else "blank"


def _strip(line: str, kind: str) -> str:
    if kind == "text":
        return line.rstrip("\n")
    # aider ends quoted and typed lines with two spaces (a markdown line break).
    return line[5:].rstrip() if kind == "user" else line[2:].rstrip()


def _blocks(lines: list[tuple[int, str]]) -> list[tuple[str, int, str]]:
    """Consecutive lines of one kind, as `(kind, first line number, text)`."""
    blocks: list[tuple[str, int, list[str]]] = []
    for number, line in lines:
        kind = _kind(line)
        if kind == "blank":
            if blocks and blocks[-1][0] == "text":
                blocks[-1][2].append("")
            continue
        if blocks and blocks[-1][0] == kind:
            blocks[-1][2].append(_strip(line, kind))
        else:
            blocks.append((kind, number, [_strip(line, kind)]))
    return [(kind, number, "\n".join(text).strip("\n")) for kind, number, text in blocks]


def _count(text: str, unit: str) -> int | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:  # "1.2.3": not a count
        return None
    return round(value * {"k": 1e3, "m": 1e6}.get(unit.lower(), 1))


class _Session:
    def __init__(self, key: str, start: str | None, first_line: int) -> None:
        self.key = key
        self.timestamp = _start_timestamp(start)
        self.first_line = first_line
        self.builder = TurnBuilder()
        self.goal: str | None = None
        self.model: str | None = None
        self.metadata: dict[str, Any] = {"format": FORMAT}
        if start:
            self.metadata["started_at"] = start
        self.files: list[str] = []
        self.last_turn: TurnBody | None = None

    def read(self, blocks: list[tuple[str, int, str]]) -> list[TurnBody]:
        banner = self.timestamp is not None or "started_at" in self.metadata
        for kind, _, text in blocks:
            if kind == "output" and banner:
                self._banner(text)
                banner = False
                continue
            banner = False
            if kind == "user":
                self.builder.add_input({"role": "user", "content": text})
                if self.goal is None and text.strip() and not text.lstrip().startswith("/"):
                    self.goal = text
            elif kind == "text":
                self.last_turn = self.builder.add_model_call(
                    {"role": "assistant", "content": text},
                    model=self.model,
                    timestamp=self.timestamp,
                )
            else:
                self._output(text)
        if self.files:
            self.metadata["files"] = self.files[:MAX_FILES]
        return self.builder.finish()

    def _banner(self, text: str) -> None:
        for index, line in enumerate(text.splitlines()):
            line = line.strip()
            if index == 0 and line and not VERSION.match(line):
                self.metadata["command"] = cut(line, 300)
            self._facts(line)

    def _facts(self, line: str) -> None:
        if match := VERSION.match(line):
            self.metadata["version"] = match["version"]
        elif match := MODEL.match(line):
            self.model = match["model"]
            self.metadata.setdefault("model", self.model)
        elif (match := ADDED.match(line)) and match["file"] not in self.files:
            self.files.append(cut(match["file"], 300))

    def _output(self, text: str) -> None:
        records: list[ToolCall] = []
        for line in text.splitlines():
            line = line.strip()
            self._facts(line)
            if match := APPLIED.match(line):
                records.append(self._record("edit", {"file_path": match["file"]}, line, True))
            elif match := FAILED.match(line):
                records.append(self._record("edit", {"file_path": match["file"]}, line, False))
            elif match := COMMIT.match(line):
                record = self._record("git_commit", {"message": match["message"]}, line, True)
                record["details"] = {"commit": match["sha"]}
                records.append(record)
            elif line.startswith("Tokens:") and self.last_turn is not None:
                counts = {m["what"]: _count(m["count"], m["unit"]) for m in TOKENS.finditer(line)}
                sent, received = counts.get("sent"), counts.get("received")
                if sent is not None and received is not None and "usage" not in self.last_turn:
                    self.last_turn["usage"] = {"input_tokens": sent, "output_tokens": received}
        if records and self.last_turn is not None:
            self.builder.add_calls(self.last_turn, records)
        self.builder.add_input({"role": "user", "name": "aider", "content": text})

    def _record(self, tool: str, query: dict[str, Any], line: str, success: bool) -> ToolCall:
        record = tool_record(tool, query, file_path=query.get("file_path"))
        record["output"] = line
        record["success"] = success
        return record


def _start_timestamp(start: str | None) -> str | None:
    if not start:
        return None
    try:
        return iso_timestamp(datetime.strptime(start.strip(), "%Y-%m-%d %H:%M:%S").isoformat())
    except ValueError:
        return iso_timestamp(start)


def load(path: Path, key: str) -> list[ImportedSession]:
    """One session per `aider chat started` block; text before the first block (a history
    whose start was cut off) is a session of its own, `<key>:preamble`."""
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    chunks: list[tuple[str | None, int, list[tuple[int, str]]]] = [(None, 1, [])]
    for number, line in enumerate(text.splitlines(), start=1):
        if number == 1 and MODE_LINE.match(line):
            continue  # aider starts the file with an editor mode line
        if match := HEADER.match(line):
            chunks.append((match["start"], number, []))
        else:
            chunks[-1][2].append((number, line))
    sessions: list[ImportedSession] = []
    seen: dict[str, int] = {}
    for start, first_line, lines in chunks:
        name = start.replace(" ", "T") if start else "preamble"
        seen[name] = seen.get(name, 0) + 1
        suffix = f"-{seen[name]}" if seen[name] > 1 else ""
        reader = _Session(f"{key}:{name}{suffix}", start, first_line)
        turns = reader.read(_blocks(lines))
        spoken = any(m["role"] != "user" or "name" not in m for t in turns for m in t["messages"])
        if not spoken:
            continue  # a run that only printed its banner (or was interrupted at once)
        problems: list[Problem] = []
        reader.metadata |= {"file": path.name, "line": first_line}
        sessions.append(
            ImportedSession(
                key=reader.key,
                turns=turns,
                metadata=reader.metadata,
                goal=reader.goal,
                problems=problems,
            )
        )
    return sessions
