"""`python -m agents.watch DIR`: live capture for a folder of Claude Code session logs
(e.g. `~/.claude/projects/<project>/`, or `~/.claude/projects/` for every project).

Every `--interval` seconds it looks at the folder's `.jsonl` logs (recursively) and sends
what is new in each, as the hook does (`agents.capture`): the same session keys, the same
state and lock files, so the watcher, the hook and `import_transcript` never store a turn
twice. A log still being written keeps its latest model call back until the model is
called again; once it has been quiet for `--quiet` seconds, that call goes too when it
ended with the reply and every tool call in it has its result. Subagents' logs go with
their session's log. When the server is down, the pass stops and the next one catches
up. Polling only (no dependency); `--once` does one pass; Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agents.capture import (
    DEFAULT_URL,
    Level,
    Target,
    capture_file,
    default_state_dir,
    fingerprint,
)
from agents.client import MemoryClient
from agents.importers.claude_code import first_event, is_subagent_file
from agents.importers.core import TranscriptError
from agents.importers.loader import detect_format

DEFAULT_INTERVAL = 2.0
DEFAULT_QUIET = 30.0
# One log is sent for at most this long per pass (the rest next pass), so a long backlog
# in one session neither holds its lock for long nor keeps the others waiting.
DEFAULT_FILE_BUDGET = 30.0


def session_logs(folder: Path) -> list[Path]:
    """The folder's Claude Code session logs, each subagent's log left to its session's
    (it is read with it) unless that log is missing."""
    logs = []
    for path in sorted(folder.rglob("*.jsonl")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if is_subagent_file(path) and _main_log(path) is not None:
            continue
        logs.append(path)
    return logs


def _main_log(subagent: Path) -> Path | None:
    if subagent.parent.name == "subagents":
        candidate = subagent.parent.parent.with_suffix(".jsonl")  # <session>/subagents/
    else:
        session_id = first_event(subagent).get("sessionId")  # older: beside the sessions
        candidate = subagent.parent / f"{session_id}.jsonl" if session_id else None
    return candidate if candidate is not None and candidate.is_file() else None


class Watcher:
    """One pass over the folder at a time; remembers which files are Claude Code logs
    (and which are not, until they change)."""

    def __init__(
        self,
        client: MemoryClient,
        target: Target,
        folder: Path,
        *,
        quiet: float = DEFAULT_QUIET,
        file_budget: float = DEFAULT_FILE_BUDGET,
        state_dir: Path | None = None,
        write: Callable[[str], None] = print,
    ) -> None:
        self.client = client
        self.target = target
        self.folder = folder
        self.quiet = quiet
        self.file_budget = file_budget
        self.state_dir = state_dir or default_state_dir()
        self.write = write
        self.logs: set[Path] = set()
        self.not_logs: dict[Path, list] = {}
        self.server_down = False

    def level(self, path: Path) -> Level:
        """`REPLIED` once every file of the log has been quiet long enough."""
        newest = max((mark[2] for mark in fingerprint(path)), default=0) / 1e9
        return Level.REPLIED if time.time() - newest >= self.quiet else Level.SETTLED

    def is_log(self, path: Path) -> bool:
        if path in self.logs:
            return True
        marks = fingerprint(path)
        if self.not_logs.get(path) == marks:
            return False
        try:
            found = detect_format(path)
        except (TranscriptError, OSError):
            found = None
        if found != "claude-code":
            self.not_logs[path] = marks
            return False
        self.not_logs.pop(path, None)
        self.logs.add(path)
        return True

    def run_once(self) -> int:
        """One pass; the number of turns sent."""
        sent = 0
        for path in session_logs(self.folder):
            if not self.is_log(path):
                continue
            try:
                outcome = capture_file(
                    self.client,
                    self.target,
                    path,
                    level=self.level(path),
                    state_dir=self.state_dir,
                    deadline=time.monotonic() + self.file_budget,
                    lock_deadline=time.monotonic(),  # a hook has it: next pass
                )
            except TranscriptError as exc:
                self.write(f"cannot read {path}: {exc}")
                continue
            except OSError as exc:  # the state folder, or a file gone meanwhile
                self.write(f"{path}: {exc}")
                continue
            if outcome.error and not outcome.server_down:
                self.write(outcome.line())  # this log's problem: the others go on
                continue
            if outcome.error:
                if not self.server_down:
                    self.write(outcome.line())
                self.server_down = True
                return sent  # the rest waits for the server too
            if self.server_down:
                self.write(f"{self.target.url} answers again")
                self.server_down = False
            for result in outcome.results:
                if result.sent:
                    self.write(result.lines()[0])
            sent += outcome.sent
        return sent


def _timeout(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("a positive number of seconds")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agents.watch",
        description="Send what is new in a folder of Claude Code session logs, as they grow.",
    )
    parser.add_argument("folder", type=Path, metavar="DIR")
    parser.add_argument("--url", default=os.environ.get("MEMORYAPP_URL", DEFAULT_URL))
    parser.add_argument("--key", default=os.environ.get("MEMORYAPP_KEY"))
    parser.add_argument("--interval", type=_timeout, default=DEFAULT_INTERVAL)
    parser.add_argument(
        "--quiet",
        type=float,
        default=DEFAULT_QUIET,
        help="seconds without a write after which a log's latest model call is sent too",
    )
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--state-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("an API key is needed: --key or MEMORYAPP_KEY")
    folder = args.folder.expanduser()
    if not folder.is_dir():
        parser.error(f"{folder}: not a folder")

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    target = Target(args.url, args.key)
    try:
        with MemoryClient(args.url, args.key, timeout=DEFAULT_FILE_BUDGET) as client:
            watcher = Watcher(client, target, folder, quiet=args.quiet, state_dir=args.state_dir)
            if args.once:
                watcher.run_once()
                return 1 if watcher.server_down else 0
            print(f"watching {folder} every {args.interval:g} s; Ctrl-C stops", flush=True)
            while not stop.is_set():
                watcher.run_once()
                sys.stdout.flush()
                stop.wait(args.interval)
    except KeyboardInterrupt:
        pass  # Ctrl-C: a turn being sent is sent again by the next run, stored once
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
