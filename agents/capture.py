"""Live capture of Claude Code sessions: a hook command that sends what is new in a
session's log to a memory server while the agent works (`python -m agents.capture`).

Claude Code runs a hook command with the event as JSON on stdin (`session_id`,
`transcript_path`, `hook_event_name`, ...). The command reads the log at `transcript_path`
with the Claude Code importer (subagents' logs included) and `send`s what the server does
not have yet, under the key an import of the same file uses (the file's name, the session
id), so the hook, `python -m agents.watch` and a later `import_transcript` store nothing
twice: the server's import record says how far the session is, and every turn goes with
an Idempotency-Key made of its index and its body.

Only turns that can no longer change are sent. While a log grows, the turn of the latest
model call may still gain lines (the rest of the call, its tools' outputs), so it waits
until the model is called again. At `Stop` (and at `SubagentStop`, for that subagent) it
goes too, once the log holds the reply the hook was given (`last_assistant_message`:
Claude Code may run the hook before the reply is written, so the hook waits a moment for
it) and every tool call in it has its result; at `SessionEnd` everything goes. A turn is
stored once and whole, and two calls that see the log at different lengths send the same
bodies under the same keys.

Bounded: the whole call has a deadline (`MEMORYAPP_CAPTURE_TIMEOUT`, 3 s by default);
HTTP requests time out within it, sending stops in time to record how far it got, and at
the deadline the process exits whatever it was doing. It always exits 0 and prints
nothing on stdout (Claude Code would read it as the hook's answer); a failure (the server
down, a refused turn) is one line on stderr and in `capture.log`, and the next call
catches up. In a state folder (`MEMORYAPP_CAPTURE_STATE`, by default
`~/.cache/memoryapp/capture`), a small file per transcript and server records the sizes
and modification times of its files at the last complete send, so a call on an unchanged
log reads nothing and sends nothing; losing it only costs a re-read (the server's record
is the truth). A lock file beside it lets one call at a time work on a transcript.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import Any

import httpx

from agents.client import ApiError, MemoryClient
from agents.importers.core import (
    ImportedSession,
    TranscriptError,
    TurnBody,
    digest,
    session_key,
)
from agents.importers.loader import load_transcript
from agents.importers.send import SendResult, send

try:
    import fcntl
except ImportError:  # Windows: no lock; the server's idempotency still holds
    fcntl = None  # type: ignore[assignment]

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 3.0
LOG_NAME = "capture.log"
MAX_LOG_BYTES = 1_000_000  # then the log starts again, the previous one kept as .1
# Sending stops this share of the budget before the deadline, to record how far it got.
RECORD_MARGIN = 0.25
LOCK_POLL_SECONDS = 0.05
# A hook waits this long at most for another capture of the same log (that one sends what
# is there; what it missed goes with the next call), so it never holds up the agent.
HOOK_LOCK_WAIT_SECONDS = 1.0
# At Stop, how long to wait for Claude Code to write the reply the hook was given.
REPLY_WAIT_SECONDS = 1.0


class Level(IntEnum):
    """How much of a growing log may be sent."""

    SETTLED = 1  # the turns before the latest model call
    REPLIED = 2  # also that call's turn, when it ends with the reply, every tool answered
    ALL = 3  # everything, as an import does


@dataclass(frozen=True)
class Event:
    """What a hook event allows to be sent: its `level`; at a stop, which session stopped
    (`stopped`, a session key) and the reply it stopped with."""

    level: Level = Level.SETTLED
    stopped: str | None = None
    reply: str | None = None


def hook_event(payload: dict[str, Any], path: Path) -> Event:
    """`Stop`: the session's latest reply may go; `SubagentStop`: that subagent's (named
    by `agent_id`; without one, nothing more than `SETTLED`); `SessionEnd`: everything."""
    name = payload.get("hook_event_name")
    reply = payload.get("last_assistant_message")
    reply = reply if isinstance(reply, str) and reply.strip() else None
    key = session_key(path.stem)  # the importer's key for the log (see `claude_code.load`)
    if name == "Stop":
        return Event(Level.REPLIED, key, reply)
    agent_id = payload.get("agent_id")
    if name == "SubagentStop" and isinstance(agent_id, str) and agent_id:
        return Event(Level.REPLIED, session_key(f"{key}:agent-{agent_id}"), reply)
    if name == "SessionEnd":
        return Event(Level.ALL)
    return Event()


def _answered(turn: TurnBody) -> bool:
    return all(record.get("success") is not None for record in turn.get("tool_calls", []))


def _words(text: Any) -> str:
    return " ".join(str(text or "").split())


def _latest_call(turns: list[TurnBody]) -> int | None:
    calls = [i for i, turn in enumerate(turns) if turn["messages"][-1]["role"] == "assistant"]
    return calls[-1] if calls else None


def sendable(session: ImportedSession, level: Level, reply: str | None = None) -> ImportedSession:
    """The session with only the turns that can no longer change at this level. A turn is
    final once the model was called after it; the latest call's turn at `REPLIED` when
    every tool call in it has its result (and, given the `reply`, when its text ends with
    it); inputs still waiting for a reply at `ALL` only."""
    turns = session.turns
    if level < Level.ALL:
        last = _latest_call(turns)
        if last is None:
            turns = []
        else:
            keep = level >= Level.REPLIED and _answered(turns[last])
            if keep and reply is not None:
                keep = _words(turns[last]["messages"][-1]["content"]).endswith(_words(reply))
            turns = turns[: last + 1] if keep else turns[:last]
    return replace(session, turns=turns)


def has_replied(session: ImportedSession, reply: str | None) -> bool:
    """Whether the session's latest model call, with this reply, may go at `REPLIED`."""
    last = _latest_call(session.turns)
    return last is not None and len(sendable(session, Level.REPLIED, reply).turns) > last


# --- local state ---------------------------------------------------------------------------


def default_state_dir() -> Path:
    configured = os.environ.get("MEMORYAPP_CAPTURE_STATE")
    if configured:
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "memoryapp" / "capture"


def log_files(path: Path) -> list[Path]:
    """The log and the subagents' logs loaded with it (see `claude_code.load`)."""
    files = [path]
    if path.suffix == ".jsonl" and not path.stem.startswith("agent-"):
        subagents = path.parent / path.stem / "subagents"
        if subagents.is_dir():
            files.extend(sorted(subagents.glob("agent-*.jsonl")))
        files.extend(sorted(path.parent.glob("agent-*.jsonl")))  # older Claude Code
    return files


def fingerprint(path: Path) -> list[list[Any]]:
    """Name, size and modification time of each file a load of `path` reads."""
    marks = []
    for file in log_files(path):
        try:
            stat = file.stat()
        except OSError:
            continue
        marks.append([str(file), stat.st_size, stat.st_mtime_ns])
    return marks


@dataclass
class Target:
    """A memory server and agent: where captured sessions go."""

    url: str
    key: str

    def state_name(self, path: Path) -> str:
        """One state file per server, agent and transcript (the key itself is not kept)."""
        return digest([self.url.rstrip("/"), digest(self.key), str(path.resolve())])[:32]


@dataclass
class Capture:
    """What one call did with one transcript: sent (results per session), found nothing
    new (`unchanged`), left it to another call holding the lock (`busy`), or failed."""

    path: Path
    results: list[SendResult] = field(default_factory=list)
    unchanged: bool = False
    busy: bool = False
    error: str | None = None
    # The error is the server's, not this log's (unreachable, 5xx, 429, a wrong key):
    # other logs would meet it too.
    server_down: bool = False

    @property
    def sent(self) -> int:
        return sum(r.sent for r in self.results)

    def line(self) -> str:
        if self.error:
            return f"{self.path}: {self.error}; the next call catches up"
        if self.busy:
            return f"{self.path}: another capture is sending it; left to that one"
        if self.unchanged:
            return f"{self.path}: nothing new"
        return "; ".join(r.lines()[0] for r in self.results) or f"{self.path}: no turns"


@contextmanager
def _locked(lock_path: Path, deadline: float | None) -> Iterator[bool]:
    """Hold the transcript's lock; yields False when another call held it past the
    deadline."""
    if fcntl is None:
        yield True
        return
    with lock_path.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(LOCK_POLL_SECONDS)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(path: Path, state: dict[str, Any]) -> None:
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)  # a reader sees the old state or the new, never half


def _await_reply(
    path: Path,
    format: str,
    sessions: list[ImportedSession],
    marks: list[list[Any]],
    stopped: str,
    reply: str,
    give_up: float,
) -> tuple[list[ImportedSession], list[list[Any]]]:
    """The log read again as it grows, until the session that stopped holds its reply or
    time is up (Claude Code may run a Stop hook before it writes the reply)."""

    def written() -> bool:
        return any(s.key == stopped and has_replied(s, reply) for s in sessions)

    while not written() and time.monotonic() < give_up:
        time.sleep(LOCK_POLL_SECONDS)
        if fingerprint(path) != marks:
            marks = fingerprint(path)
            sessions = load_transcript(path, format)
    return sessions, marks


def _session_level(
    session: ImportedSession, level: Level, stopped: str | None, reply: str | None
) -> tuple[Level, str | None]:
    """The level a session is sent at, and the reply its latest call must hold: at a stop,
    only the session that stopped goes further than `SETTLED`, once its reply is there."""
    if level != Level.REPLIED or stopped is None:
        return level, None
    if session.key != stopped or (reply is not None and not has_replied(session, reply)):
        return Level.SETTLED, None
    return level, reply


def capture_file(
    client: MemoryClient,
    target: Target,
    path: Path,
    *,
    level: Level = Level.SETTLED,
    stopped: str | None = None,
    reply: str | None = None,
    state_dir: Path | None = None,
    deadline: float | None = None,
    lock_deadline: float | None = None,
    format: str = "claude-code",
) -> Capture:
    """Send what is new in one log, at `level`. With `stopped` (a session's key), only
    that session goes at `REPLIED`, the others at `SETTLED`; given its `reply`, it waits
    up to `REPLY_WAIT_SECONDS` for the log to hold it. With `deadline`
    (`time.monotonic()`), sends turns only until shortly before it; waits for the lock
    until `lock_deadline` (default: `deadline`). Server errors are returned in `error`,
    never raised; an unreadable file is a `TranscriptError`."""
    state_dir = state_dir or default_state_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    name = target.state_name(path)
    state_path = state_dir / f"{name}.json"
    outcome = Capture(path)
    lock_deadline = deadline if lock_deadline is None else lock_deadline
    with _locked(state_dir / f"{name}.lock", lock_deadline) as held:
        if not held:
            outcome.busy = True
            return outcome
        state = _read_state(state_path)
        marks = fingerprint(path)  # before reading: lines written meanwhile count as new
        if state.get("fingerprint") == marks and state.get("level", 0) >= level:
            outcome.unchanged = True
            return outcome
        sessions = load_transcript(path, format)
        until = None
        if deadline is not None:
            budget = max(deadline - time.monotonic(), 0.0)
            until = deadline - budget * RECORD_MARGIN
        if level == Level.REPLIED and stopped is not None and reply is not None:
            give_up = time.monotonic() + REPLY_WAIT_SECONDS
            if until is not None:
                give_up = min(give_up, until)
            sessions, marks = _await_reply(path, format, sessions, marks, stopped, reply, give_up)
        applied = []
        try:
            for session in sessions:
                own, own_reply = _session_level(session, level, stopped, reply)
                applied.append(own)
                result = send(client, sendable(session, own, own_reply), until=until)
                outcome.results.append(result)
                if result.left:
                    return outcome
        except ApiError as exc:
            outcome.error = f"the server refused it ({exc})"
            outcome.server_down = exc.status_code >= 500 or exc.status_code in (401, 429)
            return outcome
        except httpx.HTTPError as exc:
            outcome.error = f"cannot reach {target.url} ({exc or type(exc).__name__})"
            outcome.server_down = True
            return outcome
        _write_state(
            state_path,
            {
                "transcript": str(path),
                "fingerprint": marks,
                "level": int(min(applied, default=level)),
                "turns": {r.key: r.skipped + r.sent for r in outcome.results},
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )
    return outcome


# --- the hook command ----------------------------------------------------------------------


def write_log(state_dir: Path, line: str, *, also_stderr: bool = False) -> None:
    """One line in `capture.log` (never raises: logging must not fail the hook)."""
    stamped = f"{datetime.now().astimezone().isoformat(timespec='seconds')} {line}"
    if also_stderr:
        print(f"memoryapp capture: {line}", file=sys.stderr, flush=True)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        log = state_dir / LOG_NAME
        if log.exists() and log.stat().st_size > MAX_LOG_BYTES:
            os.replace(log, log.with_suffix(".log.1"))
        with log.open("a", encoding="utf-8") as handle:
            handle.write(stamped + "\n")
    except OSError:
        pass


def _timeout(value: str | None) -> float:
    try:
        seconds = float(value) if value else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT
    return seconds if 0 < seconds < float("inf") else DEFAULT_TIMEOUT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agents.capture",
        description=(
            "Claude Code hook: reads the hook's JSON on stdin and sends what is new in the "
            "session's log to a memory server. Always exits 0."
        ),
    )
    parser.add_argument("--url", default=os.environ.get("MEMORYAPP_URL", DEFAULT_URL))
    parser.add_argument(
        "--key", default=os.environ.get("MEMORYAPP_KEY"), help="the agent's API key"
    )
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=_timeout(os.environ.get("MEMORYAPP_CAPTURE_TIMEOUT")),
        help=f"seconds the whole call may take (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--state-dir", type=Path, default=None)
    return parser


def run_hook(payload_text: str, args: argparse.Namespace, deadline: float, state_dir: Path) -> None:
    try:
        payload = json.loads(payload_text)
    except ValueError:
        write_log(state_dir, "stdin is not the hook's JSON; nothing done", also_stderr=True)
        return
    transcript = payload.get("transcript_path") if isinstance(payload, dict) else None
    if not isinstance(transcript, str) or not transcript:
        write_log(
            state_dir, "no transcript_path in the hook's JSON; nothing done", also_stderr=True
        )
        return
    if not args.key:
        write_log(state_dir, "no API key: set MEMORYAPP_KEY (or --key)", also_stderr=True)
        return
    path = Path(transcript).expanduser()
    if not path.is_file():
        write_log(state_dir, f"{path}: no such file (yet); nothing done")
        return
    event = hook_event(payload, path)
    target = Target(args.url, args.key)
    budget = max(deadline - time.monotonic(), 0.05)
    with MemoryClient(args.url, args.key, timeout=budget) as client:
        try:
            outcome = capture_file(
                client,
                target,
                path,
                level=event.level,
                stopped=event.stopped,
                reply=event.reply,
                state_dir=state_dir,
                deadline=deadline,
                lock_deadline=min(deadline, time.monotonic() + HOOK_LOCK_WAIT_SECONDS),
            )
        except TranscriptError as exc:
            write_log(state_dir, f"cannot read the log: {exc}", also_stderr=True)
            return
    if outcome.error:
        write_log(state_dir, outcome.line(), also_stderr=True)
    elif outcome.sent or outcome.busy:
        write_log(state_dir, f"{payload.get('hook_event_name')}: {outcome.line()}")


def main(argv: list[str] | None = None) -> int:
    # Claude Code reads a hook's stdout as its answer: nothing of ours may go there.
    stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        return _main(argv)
    finally:
        sys.stdout = stdout


def _main(argv: list[str] | None) -> int:
    started = time.monotonic()
    try:
        args = _parser().parse_args(argv)
    except SystemExit:  # argparse exits 2 on a bad argument, which would block the agent
        return 0
    deadline = started + args.timeout
    state_dir = args.state_dir or default_state_dir()
    if sys.stdin is None or sys.stdin.isatty():
        write_log(state_dir, "expects the hook's JSON on stdin; nothing done", also_stderr=True)
        return 0

    def work() -> None:
        try:
            run_hook(sys.stdin.read(), args, deadline, state_dir)
        except Exception as exc:  # a hook never fails the agent's tool call
            write_log(state_dir, f"failed: {exc!r}", also_stderr=True)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(max(deadline - time.monotonic(), 0))
    if worker.is_alive():
        write_log(
            state_dir,
            f"gave up after {args.timeout:g} s (server slow or busy); the next call catches up",
            also_stderr=True,
        )
        sys.stderr.flush()
        os._exit(0)  # the worker may be inside a request: leave now, not at its end
    return 0


if __name__ == "__main__":
    sys.exit(main())
