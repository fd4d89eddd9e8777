"""Importing a memoryapp export into a memory server.

An export (`GET /api/v1/sessions/{key}/export`, `GET /api/v1/agent/export`, `manage.py
export_session`) is one JSON document marked `{"format": "memoryapp-export", "version":
1, ...}`. It is never replayed turn by turn like a transcript: the write API cannot set
the history and timestamps it holds. It goes whole to `POST /api/v1/import`, which
recreates it exactly in one transaction (or refuses it and changes nothing).

    with MemoryClient(url, key) as client:
        print(send_file(client, "agent.json").lines())

From the command line, against a running server:

    python -m agents.importers.export FILE [FILE...] --url URL --key KEY [--session KEY] [--replace]

On the server's own host, `manage.py import_transcript FILE --agent NAME` does the same
in process (and is not held to the server's request size limit).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agents.client import ApiError, MemoryClient
from agents.importers.core import TranscriptError

FORMAT = "memoryapp-export"
# The marker is among a document's first fields; this much of a file is enough to see it.
SNIFF_BYTES = 4096


def is_document(data: Any) -> bool:
    """Whether parsed JSON is a memoryapp export (of any version: the server says which
    it reads)."""
    return isinstance(data, dict) and data.get("format") == FORMAT


def looks_like_export(path: str | Path) -> bool:
    """Whether a file starts like an export, without reading all of it."""
    try:
        with Path(path).open("rb") as handle:
            head = handle.read(SNIFF_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    return head.lstrip("\ufeff \t\r\n").startswith("{") and f'"{FORMAT}"' in head


def read_document(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise TranscriptError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise TranscriptError(f"{path}: not valid JSON ({exc})") from None
    if not is_document(data):
        raise TranscriptError(f'{path}: not a memoryapp export (no "format": "{FORMAT}")')
    return data


@dataclass
class ExportSent:
    """What the server did with one export document (`POST /import`'s answer)."""

    path: str
    scope: str
    sessions: list[str]
    expired: list[str]
    memories: int
    extraction_queued: int

    def lines(self) -> list[str]:
        head = (
            f"{self.path}: {self.scope} export imported: {_count(len(self.sessions), 'session')}"
            f", {_count(self.memories, 'memory', 'memories')}"
        )
        lines = [head]
        if self.sessions:
            lines.append("  sessions: " + ", ".join(self.sessions))
        if self.expired:
            lines.append("  expired before the import, not created: " + ", ".join(self.expired))
        if self.extraction_queued:
            lines.append(
                f"  {_count(self.extraction_queued, 'turn')} not extracted yet at export: queued"
            )
        return lines


def _count(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number} {noun if number == 1 else (plural or noun + 's')}"


def send_document(
    client: MemoryClient,
    document: dict[str, Any],
    *,
    session_key: str | None = None,
    replace: bool = False,
) -> dict[str, Any]:
    """`POST /import` with the document; the server's answer (`ApiError` when refused:
    409 a session exists, 413 too large, 422 the document is wrong somewhere). Not
    retried after a timeout: a second try of an import that went through is a 409."""
    return client.import_export(document, session=session_key, replace=replace)


def send_file(
    client: MemoryClient,
    path: str | Path,
    *,
    session_key: str | None = None,
    replace: bool = False,
) -> ExportSent:
    answer = send_document(client, read_document(path), session_key=session_key, replace=replace)
    return ExportSent(path=str(path), **answer)


def import_exports(
    client: MemoryClient,
    paths: Sequence[str | Path],
    *,
    session_key: str | None = None,
    replace: bool = False,
    write: Callable[[str], None] = print,
) -> int:
    """Send each export file, printing what was imported; the exit status: 1 when a file
    could not be read or the server refused one, else 0."""
    if session_key and len(paths) != 1:
        raise TranscriptError("--session names one session: give exactly one export")
    status = 0
    for path in paths:
        try:
            result = send_file(client, path, session_key=session_key, replace=replace)
        except TranscriptError as exc:
            write(f"error: {exc}")
            status = 1
            continue
        except ApiError as exc:
            write(f"{path}: the server refused it, nothing was imported ({_refusal(exc)})")
            status = 1
            continue
        except httpx.TransportError as exc:
            write(f"{path}: cannot reach the server ({exc})")
            return 1
        for line in result.lines():
            write(line)
    return status


def _refusal(exc: ApiError) -> str:
    if exc.status_code == 413:
        return (
            f"{exc}; the server's MEMORYAPP_MAX_BODY_BYTES is smaller than the file: raise "
            "it, or import on the server's host with manage.py import_transcript"
        )
    if exc.status_code == 422 and isinstance(exc.detail, list):
        return "422: " + "; ".join(
            f"{'.'.join(str(p) for p in problem.get('loc', [])[2:])}: {problem.get('msg')}"
            for problem in exc.detail[:10]
            if isinstance(problem, dict)
        )
    return str(exc)
