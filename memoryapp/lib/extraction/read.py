"""Reads: what a file the agent read is and defines.

The fact names the lines read (`338 lines`, or `lines 193–252 of 338` for a partial read),
what the file defines (parsed with tree-sitter through `memoryapp.lib.code`), a manifest's
project name and main dependencies (`mix.exs`, `package.json`, …), or a markdown file's
headings. Line-number prefixes and wrappers are removed first; a read that failed keeps
the tool's error. Directory listings (an editor's `view` of a directory) count entries.
"""

from __future__ import annotations

import re

from memoryapp.lib.code.definitions import definitions, summarize_definitions
from memoryapp.lib.code.languages import language_of
from memoryapp.lib.code.manifests import read_manifest, summarize_manifest
from memoryapp.lib.extraction.base import Fact, ToolCallData, failure, looks_failed
from memoryapp.lib.extraction.identity import PATH_FIELDS, first_field, normalize_path
from memoryapp.lib.extraction.text import SWE_FILE_HEADER, one_line, plural, strip_line_numbers

_SWE_MORE = re.compile(r"^\((\d+) more lines? (above|below)\)$", re.MULTILINE)
_CAT_N_HEADER = re.compile(r"(?:Here's )?the result of running `cat -n` on ([^\n]+?):\n")
_DIRECTORY = re.compile(
    r"files and directories up to \d+ levels? deep in ([^\n,]+?)(?:, excluding[^\n]*)?:\n"
)
_HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*#*\s*$", re.MULTILINE)
_READ_ERRORS = re.compile(
    r"does not exist|no such file|not found|is a directory|permission denied|invalid `?path",
    re.IGNORECASE,
)


def _path(call: ToolCallData) -> str:
    text = call.clean
    if match := SWE_FILE_HEADER.search(text):
        return match.group(1).strip()
    if match := _CAT_N_HEADER.search(text):
        return match.group(1).strip()
    path = call.detail("file.filePath", "filePath", "file_path") or first_field(
        call.args, PATH_FIELDS
    )
    if not path and call.args is None and call.query.strip():
        path = call.query.strip().split()[0]
    return normalize_path(call.file_path or path or "")


def extract(call: ToolCallData) -> Fact:
    path = _path(call)
    text = call.clean
    # A file's own text may start with "Error"; a failed read also names what went wrong.
    if call.success is False or (looks_failed(call.output) and _READ_ERRORS.search(text[:300])):
        return failure(call, path)
    if match := _DIRECTORY.search(text):
        entries = [line.strip() for line in text[match.end() :].splitlines() if line.strip()]
        return Fact(f"directory: {plural(len(entries), 'entry', 'entries')}", True, path)

    source, first, last, total = _lines_read(call, text)
    details: dict = {"lines": [first, last, total]}
    language = language_of(path)
    if language:
        details["language"] = language
    size = _size(first, last, total)
    if not source.strip():
        return Fact(f"{size}; empty" if size else "empty file", True, path, details)
    return _content_fact(path, source, language, size, details)


def _lines_read(call: ToolCallData, text: str) -> tuple[str, int | None, int | None, int | None]:
    """(the file's text without wrappers and line numbers, the first and last line shown,
    the file's length in lines when known)."""
    total = None
    if match := SWE_FILE_HEADER.search(text):
        total = int(match.group(2))
        text = text[match.end() :]
    elif match := _CAT_N_HEADER.search(text):
        text = text[match.end() :]
    text = _SWE_MORE.sub("", text)
    numbered = strip_line_numbers(text)
    source = numbered.text
    first, last = numbered.first, numbered.last

    # Structured details (Claude Code's toolUseResult) know the file's real size.
    start = call.detail("file.startLine", "startLine")
    shown = call.detail("file.numLines", "numLines")
    total = call.detail("file.totalLines", "totalLines") or total
    if isinstance(start, int) and isinstance(shown, int) and shown > 0:
        first, last = start, start + shown - 1
    if first is None:
        count = len(source.rstrip("\n").split("\n")) if source.strip() else 0
        first, last = (1, count) if count else (None, None)
    if isinstance(total, int) and last is not None:
        last = min(last, total) if total else last
    return source, first, last, total


def _content_fact(path: str, source: str, language: str | None, size: str, details: dict) -> Fact:
    """What a non-empty file is: a manifest's project, the definitions, a document's
    headings, or just its size."""
    if manifest := read_manifest(path, source):
        details["manifest"] = {
            "language": manifest.language,
            "name": manifest.name,
            "frameworks": manifest.frameworks,
            "test_command": manifest.test_command,
            "dependencies": manifest.dependencies[:30],
            # Lines of it only (an offset or a limit): its other dependencies unseen.
            "partial": _partial(*details["lines"]),
        }
        return Fact(f"{size}; {summarize_manifest(manifest)}", True, path, details)
    found = definitions(path, source)
    if found:
        details["definitions"] = len(found)
        return Fact(f"{size}; defines {summarize_definitions(found)}", True, path, details)
    if language == "markdown" or path.lower().endswith((".md", ".markdown", ".rst")):
        headings = [one_line(h, 60) for _, h in _HEADING.findall(source)][:6]
        if headings:
            return Fact(f"{size}; sections: {', '.join(headings)}", True, path, details)
    return Fact(size or plural(len(source.splitlines()), "line"), True, path, details)


def _partial(first: int | None, last: int | None, total: int | None) -> bool:
    return bool(first and first > 1) or bool(total and last and last < total)


def _size(first: int | None, last: int | None, total: int | None) -> str:
    if first is None or last is None:
        return plural(total, "line") if total else ""
    if total and (first > 1 or last < total):
        return f"lines {first}–{last} of {total:,}"
    if not total and first > 1:
        return f"lines {first}–{last}"
    return plural(total or last, "line")
