"""The default summarizer of pruned history: extractive, deterministic, no model.

The summary covers the whole pruned span, not its tail. It is rolled forward from a small
structured state (`State`, stored on the session as JSON) over the events newly pruned:
what people and the agent said (`Said`) and what its tool calls did (`Did`, with each
call's own extracted fact). The state keeps the task, the files created and edited, the
latest result of each command, the latest test run, decisions the agent stated, problems
still open (failures not followed by a success of the same command, an equivalent one
such as `cd assets && node build.js` after `node assets/build.js`, or the same file),
what was completed (commits, pushes, merges, closed issues), progress it reported, and
later instructions. It is a summary of summaries: rolling it forward never
re-reads what it already covers, and its size is bounded (`MAX_CHARS`) however long the
session grows. `render` turns the state into the lines the prompt shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memoryapp.lib.extraction import kinds
from memoryapp.lib.extraction.context import relative, same_runner, task_from_prompt
from memoryapp.lib.extraction.kinds import compact_command, equivalent_command
from memoryapp.lib.extraction.text import one_line, sentences

MAX_CHARS = 2400
MAX_LINES = 24
SENTENCE_CHARS = 160
FILES_KEPT = 40
COMMANDS_KEPT = 8
NOTES_KEPT = 5

_DECISION = re.compile(
    r"\b(?:I'll use|I will use|we'll use|we will use|decided to|I decided|going with|"
    r"instead of|rather than|the (?:fix|solution|approach|root cause|cause|problem|issue) "
    r"(?:is|was)|the plan is|I'll switch|switching to|chose|choosing)\b",
    re.IGNORECASE,
)
_PROGRESS = re.compile(
    r"^(?:Done|Fixed|Implemented|Added|Created|Updated|Removed|Refactored|Migrated|Ported|"
    r"Completed|Finished|All (?:\d+ )?tests? (?:now )?pass|The tests? (?:now )?pass|"
    r"Everything (?:now )?(?:works|passes)|Successfully)\b",
    re.IGNORECASE,
)
# Commands that complete work: what a person asks "was it done?" about.
_COMPLETING = (
    ("committed", re.compile(r"\bgit\s+commit\b")),
    ("pushed", re.compile(r"\bgit\s+push\b")),
    ("merged", re.compile(r"\bgit\s+merge\b|\bgh\s+pr\s+merge\b")),
    ("closed", re.compile(r"\b(?:bd|br|gh\s+issue|gh\s+pr|tk|linear|jira)\s+(?:close|done)\b")),
)
_FILLER = re.compile(
    r"^(?:Let me|I'll|I will|Now let me|Now I'll|Let's|First,? let me|Next,? I'll|Great|"
    r"Perfect|Excellent|Good|Okay|OK)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Said:
    """A user or assistant message in the pruned span."""

    seq: int
    role: str
    text: str


@dataclass(frozen=True)
class Did:
    """A tool call in the pruned span, with its own extracted fact."""

    seq: int
    kind: str
    tool: str
    query: str
    fact: str
    success: bool = True
    file_path: str = ""
    details: dict[str, Any] | None = None


def is_state(state) -> bool:
    """Whether `state` is a rolled state (what `roll` answers), not a stored value from
    before it or none: the others are rolled from an empty state and render nothing."""
    return isinstance(state, dict) and "edited" in state


def empty_state() -> dict:
    return {
        "task": "",
        "messages": 0,
        "first_seq": 0,
        "through_seq": 0,
        "calls": 0,
        "reads": 0,
        "searches": 0,
        "created": [],
        "edited": {},
        "commands": [],
        "tests": None,
        "decisions": [],
        "progress": [],
        "problems": [],
        "instructions": [],
        "completed": [],
        "unsummarised": [],
    }


def _push(items: list, value: Any, limit: int) -> None:
    if value in items:
        items.remove(value)
    items.append(value)
    del items[:-limit]


def _resolve(state: dict, subject: str) -> None:
    """A success of the same command or file closes the problems it had."""
    state["problems"] = [p for p in state["problems"] if p.get("subject") != subject]


def roll(
    state: dict | None,
    task: str,
    events: Iterable[Said | Did],
    *,
    cwd: str = "",
    pending: tuple[int, int] | None = None,
) -> dict:
    """The state after more of the session was pruned. `events` are in seq order;
    `pending` is the (first, last) seq range pruned but not read yet (the per-call bound
    was reached), shown as not summarised yet until a later roll reads it."""
    state = dict(state) if is_state(state) else empty_state()
    for name in ("created", "commands", "decisions", "progress", "problems", "instructions"):
        state[name] = list(state[name])
    state["completed"] = list(state.get("completed") or [])  # a state rolled before it
    state["edited"] = dict(state["edited"])
    if task and not state["task"]:
        state["task"] = one_line(task, 240)
    state["unsummarised"] = [list(pending)] if pending else []
    for event in events:
        state["through_seq"] = max(state["through_seq"], event.seq)
        if not state["first_seq"]:
            state["first_seq"] = event.seq
        if isinstance(event, Said):
            state["messages"] += 1
            _said(state, event)
        else:
            state["calls"] += 1
            _did(state, event, cwd)
    return state


def _same_task(a: str, b: str) -> bool:
    """The same prompt, however each was cut (the task line and a prompt's first sentence)."""
    a, b = a.rstrip(".…").casefold()[:100], b.rstrip(".…").casefold()[:100]
    shorter = min(len(a), len(b))
    return shorter > 0 and a[:shorter] == b[:shorter]


def _said(state: dict, event: Said) -> None:
    if event.role == "user":
        task = task_from_prompt(event.text)
        if task and not state["task"]:
            state["task"] = task
        elif task and not _same_task(task, state["task"]):
            _push(state["instructions"], f"{task} (message {event.seq})", NOTES_KEPT)
        return
    if event.role != "assistant":
        return
    for sentence in sentences(event.text)[:40]:
        if len(sentence) < 12:
            continue
        if _DECISION.search(sentence):
            _push(state["decisions"], one_line(sentence, SENTENCE_CHARS), NOTES_KEPT)
        elif _PROGRESS.match(sentence) and not _FILLER.match(sentence):
            _push(state["progress"], one_line(sentence, SENTENCE_CHARS), NOTES_KEPT)


def _did(state: dict, event: Did, cwd: str) -> None:
    path = relative(event.file_path, cwd) if event.file_path else ""
    if event.kind == kinds.READ:
        state["reads"] += 1
    elif event.kind == kinds.SEARCH:
        state["searches"] += 1
    elif event.kind == kinds.EDIT and event.success and path:
        if (event.details or {}).get("created") and path not in state["created"]:
            _push(state["created"], path, FILES_KEPT)
        else:
            edited = state["edited"]
            edited[path] = edited.pop(path, 0) + 1  # re-inserted: most recent last
            while len(edited) > FILES_KEPT:
                edited.pop(next(iter(edited)))
        _resolve(state, path)
    elif event.kind in (kinds.SHELL, kinds.BOOKKEEPING):
        _command(state, event)
        return
    if not event.success:
        subject = path or event.query
        problem = {
            "subject": subject,
            "text": one_line(event.fact, SENTENCE_CHARS),
            "seq": event.seq,
        }
        state["problems"] = [p for p in state["problems"] if p["subject"] != subject]
        state["problems"] = (state["problems"] + [problem])[-NOTES_KEPT:]


def _command(state: dict, event: Did) -> None:
    command = event.query
    runs = [r for r in (event.details or {}).get("run") or [] if isinstance(r, dict)]
    tests = [r for r in runs if r.get("category") == "tests"]
    if tests:
        run = tests[0]
        state["tests"] = {
            "command": one_line(compact_command(command), 60),
            "result": one_line(str(run.get("summary", "")), 100),
            "passed": bool(run.get("passed")),
            "first_failure": one_line(str(run.get("first_failure") or ""), 120),
            "seq": event.seq,
        }
    entry = {
        "command": one_line(command, 60),
        "fact": event.fact,
        "ok": event.success,
        "tests": bool(tests),
        "bookkeeping": event.kind == kinds.BOOKKEEPING,
    }
    state["commands"] = [c for c in state["commands"] if c["command"] != entry["command"]]
    state["commands"] = (state["commands"] + [entry])[-COMMANDS_KEPT:]
    subject = "command:" + (same_runner(command) if tests else equivalent_command(command))
    if event.success and (not tests or tests[0].get("passed")):
        _resolve(state, subject)
        if done := [label for label, pattern in _COMPLETING if pattern.search(command)]:
            line = f"{' and '.join(done).capitalize()}: {one_line(event.fact, SENTENCE_CHARS)}"
            _push(state["completed"], line, NOTES_KEPT)
    elif not event.success or tests:
        if tests:
            text = one_line(
                f"`{one_line(compact_command(command), 60)}`: {tests[0].get('summary')}",
                SENTENCE_CHARS,
            )
        else:
            text = one_line(event.fact, SENTENCE_CHARS)  # the fact names its command
        problem = {"subject": subject, "text": text, "seq": event.seq}
        state["problems"] = [p for p in state["problems"] if p["subject"] != subject]
        state["problems"] = (state["problems"] + [problem])[-NOTES_KEPT:]


def _listing(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[-limit:][::-1])
    more = len(items) - limit
    return shown + (f" (+{more} more)" if more > 0 else "")


def render(state: dict | None) -> list[str]:
    """The summary's lines, most important first, within `MAX_LINES` and `MAX_CHARS`."""
    if not is_state(state):
        return []
    lines = [*_scope_lines(state), *_file_and_test_lines(state), *_note_lines(state)]
    lines += _command_lines(state)
    kept: list[str] = []
    for line in lines:
        if len(kept) >= MAX_LINES or len("\n".join([*kept, line])) > MAX_CHARS:
            break
        kept.append(line)
    return kept


def _scope_lines(state: dict) -> list[str]:
    """The task, and which messages the summary covers and which it does not yet."""
    lines: list[str] = []
    if state["task"]:
        lines.append(f"Task: {state['task']}")
    if state["messages"] or state["calls"]:
        span = f"messages {state['first_seq']}–{state['through_seq']}"
        lines.append(
            f"Covers {span}: {state['messages']} said, {state['calls']} tool calls "
            f"({state['reads']} reads, {state['searches']} searches)."
        )
    for first, last in state.get("unsummarised") or []:
        lines.append(f"Messages {first}–{last} are not summarised yet.")
    return lines


def _file_and_test_lines(state: dict) -> list[str]:
    """The files created and edited, and the last test run."""
    lines: list[str] = []
    if state["created"]:
        lines.append(f"Files created: {_listing(state['created'])}")
    if state["edited"]:
        edited = [f"{p} ({n}×)" if n > 1 else p for p, n in state["edited"].items()]
        lines.append(f"Files edited: {_listing(edited)}")
    if tests := state.get("tests"):
        verdict = "passing" if tests["passed"] else "failing"
        first = f"; first failure: {tests['first_failure']}" if tests.get("first_failure") else ""
        lines.append(
            f"Tests ({verdict}, message {tests['seq']}): `{tests['command']}`: "
            f"{tests['result']}{first}"
        )
    return lines


def _note_lines(state: dict) -> list[str]:
    """Open problems, what was completed, decisions, progress and later instructions,
    newest first."""
    return [
        *(f"Open problem: {problem['text']}" for problem in state["problems"][::-1]),
        *(state.get("completed") or [])[::-1],
        *(f"Decision: {decision}" for decision in state["decisions"][::-1]),
        *(f"Progress: {note}" for note in state["progress"][::-1]),
        *(f"Later instruction: {instruction}" for instruction in state["instructions"][::-1]),
    ]


def _command_lines(state: dict) -> list[str]:
    """The last few commands that are not tests, bookkeeping, git or an open problem."""
    shown = {p["text"] for p in state["problems"]}  # a failing command is already there
    commands = [
        c
        for c in state["commands"][::-1]
        if not c.get("tests")
        and not c.get("bookkeeping")
        and not c.get("fact", "").startswith("`git")
        and one_line(c.get("fact", ""), SENTENCE_CHARS) not in shown
    ]
    return [f"Ran: {one_line(command['fact'], SENTENCE_CHARS)}" for command in commands[:4]]
