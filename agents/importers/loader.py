"""Which format a file is in, and reading files and folders into sessions.

`--format auto` goes by the extension, then by the content: `.jsonl` lines that are
Claude Code events, OpenHands events or runs, or OpenAI-style documents; JSON that is a
SWE-agent trajectory, an OpenHands event list, or an OpenAI-style/ToolBench document;
markdown with aider's `# aider chat started at` headers. A file that fits none is an
`UnknownFormat` error naming it.

A memoryapp export (`{"format": "memoryapp-export", ...}`, see `agents.importers.export`)
is recognised too, but it is not read into turns: it goes whole to `POST /api/v1/import`,
which recreates it exactly. `scan_path` lists such files in `exports`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.importers import aider, claude_code, export, openai, openhands, swe_agent
from agents.importers.core import ImportedSession, TranscriptError, finalize, session_key

EXPORT = export.FORMAT
FORMATS = ("claude-code", "swe-agent", "openai", "openhands", "aider", EXPORT)
ALIASES = {"toolbench": "openai", "toolllama": "openai"}
CANDIDATE_SUFFIXES = frozenset({".jsonl", ".json", ".traj", ".md", ".markdown"})
SNIFF_LINES = 50
SNIFF_CHARS = 200_000


class UnknownFormat(TranscriptError):
    """A readable file that is in none of the formats the importers know."""


class ExportFile(TranscriptError):
    """A memoryapp export: imported whole (`agents.importers.export`), not as turns."""


@dataclass
class PathImport:
    """What reading a file or a folder gave: sessions, files that are not transcripts
    (`skipped`), files that could not be read at all (`failed`), each with a reason, and
    memoryapp exports (`exports`: sent whole with `agents.importers.export`)."""

    sessions: list[ImportedSession] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    exports: list[Path] = field(default_factory=list)


def _unknown(path: Path) -> UnknownFormat:
    return UnknownFormat(
        f"{path}: not a transcript format the importers know ({', '.join(FORMATS)}); "
        "name one with --format"
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig", errors="replace"))
    except RecursionError:
        raise TranscriptError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:
        raise TranscriptError(f"{path}: not valid JSON ({exc})") from None


def _sniff_lines(path: Path) -> str | None:
    with path.open("rb") as handle:
        for count, raw in enumerate(handle):
            if count >= SNIFF_LINES:
                break
            try:
                item = json.loads(raw.decode("utf-8", "replace").lstrip("\ufeff"))
            except (ValueError, RecursionError):
                continue
            if claude_code.looks_like_event(item):
                return "claude-code"
            if isinstance(item, dict) and (
                isinstance(item.get("history"), list) or openhands.is_event(item)
            ):
                return "openhands"
            if isinstance(item, dict) and (
                openai.is_document(item) or isinstance(item.get("role"), str)
            ):
                return "openai"
    return None


def _sniff_document(data: Any) -> str | None:
    if export.is_document(data):
        return EXPORT
    if swe_agent.is_document(data):
        return "swe-agent"
    if openhands.is_document(data):
        return "openhands"
    if openai.is_document(data):
        return "openai"
    return None


def detect_format(path: str | Path) -> str:
    """The format of a file (one of `FORMATS`); `UnknownFormat` when none fits."""
    return _detect(Path(path))[0]


def _detect(path: Path) -> tuple[str, Any]:
    """The format and, for whole-file JSON, the parsed document (read once)."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        found = _sniff_lines(path)
        if found:
            return found, None
        raise _unknown(path)
    if suffix == ".traj":
        return "swe-agent", _read_json(path)
    with path.open("rb") as handle:
        head = handle.read(SNIFF_CHARS).decode("utf-8", "replace").lstrip("\ufeff")
    if aider.is_history(head):
        return "aider", None
    stripped = head.lstrip()
    if stripped[:1] in ("[", "{"):
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig", errors="replace"))
        except (ValueError, RecursionError):
            if suffix == ".json":
                raise TranscriptError(f"{path}: not valid JSON") from None
            found = _sniff_lines(path)  # JSON lines under another name
            if found:
                return found, None
            raise _unknown(path) from None
        found = _sniff_document(data)
        if found:
            return found, data
    raise _unknown(path)


def _canonical(format: str) -> str:
    name = ALIASES.get(format, format)
    if name != "auto" and name not in FORMATS:
        raise TranscriptError(f"unknown format {format!r}; one of auto, {', '.join(FORMATS)}")
    return name


def _load(
    path: Path, format: str, key: str | None, data: Any, index: claude_code.SubagentIndex
) -> tuple[list[ImportedSession], list[Path]]:
    if format == EXPORT:
        raise ExportFile(
            f"{path}: a memoryapp export; it is imported whole (manage.py import_transcript, "
            "python -m agents.importers.export), not read into turns"
        )
    if format == "claude-code":  # a subagent's log is named after its parent session
        return claude_code.load(path, key, index)
    key = key or session_key(path.stem)
    if format == "aider":
        return aider.load(path, key), []
    if path.suffix.lower() == ".jsonl":
        if format == "openhands":
            return openhands.load_lines(path, key), []
        if format == "openai":
            return openai.load_lines(path, key), []
    if data is None:
        data = _read_json(path)
    if format == "swe-agent":
        if not swe_agent.is_document(data):
            raise TranscriptError(f"{path}: not a SWE-agent trajectory (no `history`)")
        return swe_agent.load_document(data, key, path), []
    if format == "openhands":
        if not openhands.is_document(data):
            raise TranscriptError(f"{path}: not an OpenHands event list")
        return openhands.load_document(data, key, path), []
    if not openai.is_document(data):
        raise TranscriptError(f"{path}: not an OpenAI-style message list or ToolBench file")
    return openai.load_document(data, key, path), []


def _read(
    path: Path, format: str, key: str | None, index: claude_code.SubagentIndex
) -> tuple[list[ImportedSession], list[Path]]:
    if not path.is_file():
        raise TranscriptError(f"{path}: no such file")
    name, data = _detect(path) if format == "auto" else (format, None)
    try:
        sessions, read = _load(path, name, key, data, index)
    except OSError as exc:
        raise TranscriptError(f"{path}: {exc.strerror or exc}") from None
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        # The formats read line by line report odd lines and go on; a whole document in
        # an unexpected shape is a file that could not be read.
        if isinstance(exc, TranscriptError):
            raise
        raise TranscriptError(f"{path}: not readable as {name} ({exc!r})") from None
    return [finalize(s) for s in sessions], read


def load_transcript(
    path: str | Path, format: str = "auto", session_key: str | None = None
) -> list[ImportedSession]:
    """The sessions of one file: usually one; a Claude Code log gives its subagents too, an
    aider history one per run, an `output.jsonl` one per line. `session_key` replaces the
    key taken from the file's name (subagents and runs keep their suffixes)."""
    try:
        return _read(Path(path), _canonical(format), session_key, claude_code.SubagentIndex())[0]
    except OSError as exc:
        raise TranscriptError(f"{path}: {exc.strerror or exc}") from None


def _folder_files(folder: Path) -> list[Path]:
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.suffix.lower() in CANDIDATE_SUFFIXES and path.is_file():
            files.append(path)
    return files


def _keys(folder: Path, files: list[Path]) -> dict[Path, str]:
    """Each file's session key: its name, or its path in the folder when names repeat."""
    stems: dict[str, int] = {}
    for path in files:
        stems[path.stem] = stems.get(path.stem, 0) + 1
    return {
        path: session_key(
            path.stem
            if stems[path.stem] == 1
            else ":".join(path.relative_to(folder).with_suffix("").parts)
        )
        for path in files
    }


def scan_path(path: str | Path, format: str = "auto", session_key: str | None = None) -> PathImport:
    """Read a file or every transcript in a folder (recursively). In a folder, files in no
    known format are skipped, and subagent logs that belong to a session read in the same
    run are read with it, not again on their own."""
    path = Path(path)
    format = _canonical(format)
    result = PathImport()
    index = claude_code.SubagentIndex()
    if not path.is_dir():
        try:
            result.sessions = _read(path, format, session_key, index)[0]
        except ExportFile:
            result.exports.append(path)
        except (TranscriptError, OSError) as exc:
            result.failed.append((path, str(exc)))
        return result
    if session_key:
        raise TranscriptError(f"{path}: a folder holds many sessions; --session names one")
    files = _folder_files(path)
    keys = _keys(path, [f for f in files if not f.stem.startswith("agent-")])
    subagents = [f for f in files if f.stem.startswith("agent-") and f.suffix == ".jsonl"]
    read: set[Path] = set()
    for file in [f for f in files if f not in subagents] + subagents:
        if file in read:
            continue
        try:
            sessions, consumed = _read(file, format, keys.get(file), index)
        except ExportFile:
            result.exports.append(file)
            continue
        except UnknownFormat as exc:
            result.skipped.append((file, str(exc)))
            continue
        except (TranscriptError, OSError) as exc:
            result.failed.append((file, str(exc)))
            continue
        result.sessions.extend(sessions)
        read.update(consumed)
    return result


def load_path(path: str | Path, format: str = "auto") -> list[ImportedSession]:
    """The sessions of a file, or of every transcript in a folder (see `scan_path`). A
    file that could not be read is a `TranscriptError`; in a folder, so is the first
    unreadable file, while files in no known format are left out."""
    result = scan_path(path, format)
    if result.failed:
        raise TranscriptError(result.failed[0][1])
    return result.sessions
