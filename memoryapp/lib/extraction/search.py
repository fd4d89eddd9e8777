"""Searches: how many matches in how many files, and which.

Understands the outputs agents meet: Claude Code's Grep in its three modes (file list,
content lines with `-n` and `-A/-B/-C` context, where context lines are not matches, and
counts per file) and its Glob path lists; ripgrep and grep output (`path:12:text` matches,
`path-13-text` context, `--` group separators, `12:text` when one file was searched);
SWE-agent's `search_dir`/`search_file`/`find_file` reports; `find`, `fd` and `ls` lists.
Structured details (`numFiles`, `numMatches`, `filenames`, `truncated`) win over counting.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure, looks_failed
from memoryapp.lib.extraction.text import one_line, plural

SAMPLE = 4

_FOUND_FILES = re.compile(r"^Found (\d+) files?\b.*$", re.MULTILINE | re.IGNORECASE)
_FOUND_TOTAL = re.compile(
    r"^Found (\d+) total occurrences? across (\d+) files?\.?\s*$", re.MULTILINE | re.IGNORECASE
)
_SWE_FOUND = re.compile(r'^Found (\d+) match(?:es)? for "(.*?)" in (.+?):\s*$', re.MULTILINE)
_SWE_END = re.compile(r'^End of matches for ".*?" in .+$', re.MULTILINE)
_SWE_FILE_COUNT = re.compile(r"^(.+?) \((\d+) match(?:es)?\)$")
_SWE_LINE = re.compile(r"^Line (\d+):")
_NONE = re.compile(
    r"^\s*(?:No (?:matches|results|files|occurrences)(?: were)? found\b|No files matched\b"
    r"|No matches for\b|0 matches\b)",
    re.IGNORECASE,
)
_PAGINATION = re.compile(r"^\[Showing results with pagination[^\]]*\]\s*$", re.MULTILINE)
_TRUNCATED = re.compile(
    r"\(Results are truncated[^)]*\)|More than \d+ files matched|results truncated",
    re.IGNORECASE,
)
_MATCH = re.compile(r"^(?P<path>[^\s:][^:\n]*?):(?P<line>\d+):")
_CONTEXT = re.compile(r"^(?P<path>[^\s:][^:\n]*?)-(?P<line>\d+)-")
_LINE_MATCH = re.compile(r"^(?P<line>\d+):")
_LINE_CONTEXT = re.compile(r"^(?P<line>\d+)-")
_COUNT = re.compile(r"^(?P<path>[^\s:][^:\n]*?):(?P<count>\d+)$")
_PATH_TEXT = re.compile(r"^(?P<path>[^\s:][^:\n]*?):(?P<rest>.*)$")


def looks_like_path(text: str) -> bool:
    text = text.strip()
    if not text or " " in text or len(text) > 400 or text.startswith(("http:", "https:")):
        return False
    return "/" in text or bool(re.search(r"\.[A-Za-z0-9]{1,8}$", text)) or text.startswith(".")


@dataclass
class Matches:
    """What a search found: per file, its matching line numbers or its count."""

    mode: str = "content"  # content, files or count
    files: dict[str, int] = field(default_factory=dict)
    lines: dict[str, list[int]] = field(default_factory=dict)
    total: int | None = None
    file_total: int | None = None
    truncated: bool = False

    def add(self, path: str, line: int | None = None, count: int = 1) -> None:
        self.files[path] = self.files.get(path, 0) + count
        if line is not None:
            self.lines.setdefault(path, []).append(line)

    @property
    def match_count(self) -> int:
        return self.total if self.total is not None else sum(self.files.values())

    @property
    def file_count(self) -> int:
        return self.file_total if self.file_total is not None else len(self.files)


def parse(text: str, mode: str | None = None, scope: str = "") -> Matches:
    """Read a search's output. `mode` (content, files, count) when the caller knows it;
    `scope` is the searched path, the file matches belong to when no path is printed."""
    text = _PAGINATION.sub("", text)
    found = Matches(mode=mode or "content", truncated=bool(_TRUNCATED.search(text)))
    if match := _SWE_FOUND.search(text):
        return _parse_swe(text, match, found)
    _read_headers(text, mode, found)
    lines = _result_lines(text)
    if found.mode == "files" or (mode is None and lines and all(map(looks_like_path, lines))):
        _add_paths(lines, found)
    elif mode == "count" or (mode is None and lines and all(_COUNT.match(x) for x in lines)):
        _add_counts(lines, scope, found)
    else:
        for line in lines:
            _add_content_line(line, scope, found)
    return found


def _read_headers(text: str, mode: str | None, found: Matches) -> None:
    """Totals a search printed above its results (`Found 12 total occurrences across 3
    files`, `Found 6 files`)."""
    if total := _FOUND_TOTAL.search(text):
        found.mode = "count"
        found.total, found.file_total = int(total.group(1)), int(total.group(2))
    header = _FOUND_FILES.search(text)
    if header and mode in (None, "files"):
        found.mode = "files"
        found.file_total = int(header.group(1))


def _result_lines(text: str) -> list[str]:
    """The output's lines that may be results: not blank, not a `--` group separator,
    not a `Found ...` header."""
    return [
        line
        for line in text.splitlines()
        if line.strip()
        and line.strip() != "--"
        and not _FOUND_FILES.match(line)
        and not _FOUND_TOTAL.match(line)
    ]


def _add_paths(lines: list[str], found: Matches) -> None:
    """A file list: one path a line."""
    found.mode = "files"
    for line in lines:
        if looks_like_path(line):
            found.add(line.strip())


def _add_counts(lines: list[str], scope: str, found: Matches) -> None:
    """Counts per file, `path:12`, or a bare number when one file was searched."""
    found.mode = "count"
    for line in lines:
        if m := _COUNT.match(line):
            found.add(m.group("path"), count=int(m.group("count")))
        elif m := re.match(r"^(\d+)$", line.strip()):  # one file searched: just a number
            found.add(scope or "(file)", count=int(m.group(1)))


def _add_content_line(line: str, scope: str, found: Matches) -> None:
    """One line of content mode: a match (`path:12:`, `12:`), a context line (`path-13-`,
    `13-`, skipped), a path with its text, or a match in the searched file."""
    if (m := _MATCH.match(line)) and looks_like_path(m.group("path")):
        found.add(m.group("path"), int(m.group("line")))
    elif (m := _CONTEXT.match(line)) and looks_like_path(m.group("path")):
        return  # a context line (-A/-B/-C), not a match
    elif m := _LINE_MATCH.match(line):
        found.add(scope or "(file)", int(m.group("line")))
    elif _LINE_CONTEXT.match(line):
        return
    elif (m := _PATH_TEXT.match(line)) and looks_like_path(m.group("path")):
        found.add(m.group("path"))
    else:
        found.add(scope or "(file)")


def _parse_swe(text: str, header: re.Match, found: Matches) -> Matches:
    found.total = int(header.group(1))
    where = header.group(3).strip()
    body = _SWE_END.split(text[header.end() :])[0]
    for line in body.splitlines():
        line = line.strip()
        if not line:
            continue
        if m := _SWE_FILE_COUNT.match(line):
            found.add(m.group(1), count=int(m.group(2)))
        elif m := _SWE_LINE.match(line):
            found.add(where, int(m.group(1)))
        elif looks_like_path(line):
            found.mode = "files"
            found.add(line)
    if found.mode == "files":
        found.total = None
        found.file_total = int(header.group(1))
    return found


def _short_paths(paths: list[str]) -> tuple[list[str], str]:
    """Paths shown relative to their common directory when they share a deep one."""
    if len(paths) < 2:
        return paths, ""
    common = posixpath.commonpath(paths) if all(p.startswith("/") for p in paths) else ""
    if common in ("", "/"):
        return paths, ""
    if common in paths:
        common = posixpath.dirname(common)
    return [posixpath.relpath(p, common) for p in paths], common


def describe(found: Matches, noun: str = "match", nouns: str = "matches") -> str:
    """`12 matches in 3 files: a.ex (5), b.ex (4), …`, `6 files: …`, `No matches`."""
    more = "+" if found.truncated else ""
    if found.mode == "files":
        count = found.file_count
        if not count:
            return "No files found"
        paths = list(found.files)
        shown, under = _short_paths(paths[:SAMPLE])
        sample = ", ".join(shown) + (", …" if count > len(shown) else "")
        where = f" under {under}" if under else ""
        return f"{plural(count, 'file')}{more}{where}: {sample}"
    count = found.match_count
    if not count:
        return "No matches"
    files = sorted(found.files.items(), key=lambda kv: -kv[1])
    head = f"{count:,}{more} {noun if count == 1 else nouns}"
    if len(files) == 1 and found.file_count <= 1:
        path = files[0][0]
        numbers = found.lines.get(path, [])
        lines = ""
        if numbers:
            lines = " (line " if len(numbers) == 1 else " (lines "
            lines += ", ".join(str(n) for n in numbers[:SAMPLE])
            lines += (", …" if len(numbers) > SAMPLE else "") + ")"
        where = "" if path == "(file)" else f" in {path}"
        return f"{head}{where}{lines}"
    shown, under = _short_paths([path for path, _ in files[:SAMPLE]])
    sample = ", ".join(
        f"{name} ({n})" for name, (_, n) in zip(shown, files[:SAMPLE], strict=True)
    ) + (", …" if found.file_count > SAMPLE else "")
    where = f" under {under}" if under else ""
    return f"{head} in {plural(found.file_count, 'file')}{where}: {sample}"


LISTING_TOOLS = {"ls", "list_dir", "list_directory", "directory_tree", "tree"}


def extract(call: ToolCallData) -> Fact:
    text = call.clean
    if call.tool.strip().casefold() in LISTING_TOOLS:
        if failed(call):
            return failure(call)
        return Fact(summarize_listing(text), True)
    if failed(call) and not _NONE.search(text):
        return failure(call)
    if _NONE.search(text) or not text.strip():
        mode = _mode(call)
        return Fact(
            "No files found" if mode == "files" else "No matches", True, details={"count": 0}
        )
    if looks_failed(text) and not _MATCH.match(text):
        return failure(call)
    found = parse(text, _mode(call), _scope(call))
    _apply_details(call, found)
    return Fact(
        describe(found),
        True,
        details={"count": found.match_count, "files": found.file_count, "mode": found.mode},
    )


def _mode(call: ToolCallData) -> str | None:
    mode = call.detail("mode") or (call.args or {}).get("output_mode")
    name = call.tool.strip().casefold()
    if name in ("glob", "fs:glob", "find_file", "find", "list_files", "ls", "list_dir"):
        return "files"
    if mode in ("files_with_matches", "files"):
        return "files"
    if mode in ("count", "content"):
        return mode
    if name == "grep" and call.args is not None and call.detail("mode") is None:
        return "files" if not mode else None  # Claude Code's default mode lists files
    return None


def _scope(call: ToolCallData) -> str:
    scope = (call.args or {}).get("path")
    return scope if isinstance(scope, str) and looks_like_path(scope) else ""


def _apply_details(call: ToolCallData, found: Matches) -> None:
    """Claude Code's own counts are exact; text may have been cut."""
    files = call.detail("numFiles")
    names = call.detail("filenames")
    if found.mode == "files":
        if isinstance(files, int):
            found.file_total = files
        if isinstance(names, list) and not found.files:
            for name in names:
                if isinstance(name, str):
                    found.add(name)
    elif found.mode == "count":
        matches = call.detail("numMatches")
        if isinstance(matches, int):
            found.total = matches
        if isinstance(files, int):
            found.file_total = files
    if call.detail("truncated") is True:
        found.truncated = True


def summarize_listing(text: str) -> str:
    """An `ls`/`find` style listing: how many entries, and a few of them."""
    entries = [line.strip() for line in text.splitlines() if line.strip()]
    entries = [e for e in entries if e not in (".", "..") and not e.startswith("total ")]
    if not entries:
        return "empty"
    sample = ", ".join(one_line(e, 60) for e in entries[:SAMPLE])
    return f"{plural(len(entries), 'entry', 'entries')}: {sample}" + (
        ", …" if len(entries) > SAMPLE else ""
    )
