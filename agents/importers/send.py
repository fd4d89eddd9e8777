"""Sending imported sessions to a memory server, so that importing again stores nothing new.

`send` asks the server how far the session already is, skips that many turns and appends
the rest, each with an Idempotency-Key made of the session key, the turn's index and a
hash of its body: a retried request, a repeated import or two imports racing store each
turn once, and a log that grew since the last import appends only its new turns.

How far a session is: the number of the file's turns stored, which `send` records in the
session's metadata under `import` with a hash of the last one (the server's turn count
when there is no record, as for sessions imported before). The last turn of a live log
may still grow: inputs that had no reply yet get their reply, a tool call its output. A
reply that arrives later is appended as a turn of its own; a last turn that changed in
any other way is reported, and the stored copy kept (turns cannot be edited).

With `until` (a `time.monotonic()` deadline, as live capture gives it), `send` stops
appending when time is up and records how far it got, so the next call goes on from there.

`import_paths` is the command line of both `python -m agents.importers` and
`manage.py import_transcript`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agents.client import ApiError, MemoryClient
from agents.importers.core import ImportedSession, Problem, TranscriptError, TurnBody, digest
from agents.importers.export import import_exports
from agents.importers.loader import scan_path

IMPORT_STATE = "import"
# Metadata that changes with every line a live log gains: written with the import record
# after the turns, not in a request of its own before them.
VOLATILE_METADATA = frozenset({IMPORT_STATE, "ended_at"})


@dataclass
class SendResult:
    key: str
    sent: int = 0
    skipped: int = 0
    problems: list[Problem] = field(default_factory=list)
    updated: bool = False  # goal or metadata written
    left: int = 0  # turns not sent because time ran out (`until`)

    def lines(self) -> list[str]:
        """The result as printed: the key and counts, then each problem on its own line."""
        head = f"{self.key}: {_count(self.sent, 'turn')} sent, {self.skipped} skipped"
        if self.left:
            head += f", {self.left} left for the next call"
        if self.problems:
            head += f", {_count(len(self.problems), 'problem')}"
        return [head] + [
            f"  line {line}: {reason}" if line else f"  {reason}" for line, reason in self.problems
        ]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def idempotency_key(session_key: str, index: int | str, turn: TurnBody) -> str:
    return f"import:{digest(session_key)[:16]}:{index}:{digest(dict(turn))[:32]}"


def _append(client: MemoryClient, key: str, index: int | str, turn: TurnBody) -> None:
    client.append_turn(
        key,
        turn["messages"],
        usage=turn.get("usage"),
        tool_calls=turn.get("tool_calls"),
        model=turn.get("model"),
        timestamp=turn.get("timestamp"),
        idempotency_key=idempotency_key(key, index, turn),
    )


def _state(turns: list[TurnBody]) -> dict[str, Any]:
    last = turns[-1]
    return {
        "turns": len(turns),
        "last_turn": digest(dict(last)),
        "last_turn_messages": len(last["messages"]),
        "last_turn_messages_hash": digest(last["messages"]),
    }


def _stored(current: dict[str, Any] | None, turns: list[TurnBody]) -> tuple[int, dict | None]:
    """How many of the file's turns the server holds, and the record of the last import."""
    if current is None:
        return 0, None
    on_server = int(current["totals"]["turns"])
    metadata = current.get("metadata") if isinstance(current.get("metadata"), dict) else {}
    state = metadata.get(IMPORT_STATE)
    recorded = state.get("turns") if isinstance(state, dict) else None
    if not isinstance(recorded, int) or isinstance(recorded, bool) or recorded > on_server:
        # No record, or one the server no longer matches (its conversation was deleted).
        return min(on_server, len(turns)), None
    return min(recorded, len(turns)), state


def _grown_tail(
    turns: list[TurnBody], done: int, state: dict[str, Any], problems: list[Problem]
) -> TurnBody | None:
    """The part of the last stored turn that was not there when it was stored, when it
    grew by messages; None (and a problem, when it changed otherwise)."""
    if done == 0 or done != state.get("turns"):
        return None
    tail = turns[done - 1]
    if digest(dict(tail)) == state.get("last_turn"):
        return None
    count = state.get("last_turn_messages")
    messages = tail["messages"]
    if (
        isinstance(count, int)
        and 0 < count < len(messages)
        and digest(messages[:count]) == state.get("last_turn_messages_hash")
    ):
        return {**tail, "messages": messages[count:]}  # type: ignore[typeddict-item]
    if digest(messages) == state.get("last_turn_messages_hash"):
        reason = (
            f"turn {done} got tool outputs or usage after it was imported; its stored tool "
            "calls keep what was known then (the tool messages are in the next turn)"
        )
    else:
        reason = f"turn {done} changed after it was imported; the stored copy was kept"
    problems.append((0, reason))
    return None


def _lasting(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in VOLATILE_METADATA}


def send(
    client: MemoryClient, session: ImportedSession, *, until: float | None = None
) -> SendResult:
    """Write the session's goal (when the server has none) and metadata first, so that
    extraction knows the session's working directory while the turns arrive; append the
    turns the server does not have yet; then record how far the import got. With `until`
    (a `time.monotonic()` deadline), stop appending when it has passed."""
    result = SendResult(key=session.key, problems=list(session.problems))
    turns = session.turns
    if not turns:
        return result
    try:
        current: dict[str, Any] | None = client.session(session.key)
    except ApiError as exc:
        if exc.status_code != 404:
            raise
        current = None
    done, state = _stored(current, turns)
    result.skipped = done

    on_server = (current or {}).get("metadata") or {}
    metadata = {**on_server, **session.metadata}
    changes: dict[str, Any] = {}
    if session.goal and not (current or {}).get("goal"):
        changes["goal"] = session.goal
    if _lasting(metadata) != _lasting(on_server):
        changes["metadata"] = metadata
    if changes:
        on_server = client.put_session(session.key, **changes)["metadata"]
        result.updated = True

    if state is not None:
        grown = _grown_tail(turns, done, state, result.problems)
        if grown is not None:
            _append(client, session.key, f"{done - 1}+{state['last_turn_messages']}", grown)
            result.sent += 1
    stored = done
    for index in range(done, len(turns)):
        if until is not None and time.monotonic() >= until:
            result.left = len(turns) - index
            break
        _append(client, session.key, index, turns[index])
        result.sent += 1
        stored = index + 1

    if stored:
        final = {**metadata, IMPORT_STATE: _state(turns[:stored])}
        if final != on_server:
            client.put_session(session.key, metadata=final)
            result.updated = True
    return result


def import_paths(
    client: MemoryClient,
    paths: Sequence[str | Path],
    *,
    format: str = "auto",
    session_key: str | None = None,
    replace: bool = False,
    write: Callable[[str], None] = print,
) -> int:
    """Import files and folders, printing one result per session; the exit status: 1 when
    a file could not be read at all or the server refused a turn, else 0 (lines that could
    not be read are reported and skipped, never fatal). Memoryapp exports among them are
    sent whole (`agents.importers.export`; `replace`: over sessions with the same key)."""
    if session_key and (len(paths) != 1 or Path(paths[0]).is_dir()):
        raise TranscriptError("--session names one session: give exactly one file")
    status = 0
    for path in paths:
        found = scan_path(path, format, session_key)
        for _, reason in found.skipped:
            write(f"skipped {reason}")
        for _, reason in found.failed:
            write(f"error: {reason}")
            status = 1
        for session in found.sessions:
            try:
                result = send(client, session)
            except ApiError as exc:
                write(f"{session.key}: the server refused it ({exc}); the rest was not sent")
                status = 1
                continue
            except httpx.TransportError as exc:
                write(f"{session.key}: cannot reach the server ({exc})")
                return 1
            for line in result.lines():
                write(line)
        if found.exports:
            status |= import_exports(
                client, found.exports, session_key=session_key, replace=replace, write=write
            )
    return status
