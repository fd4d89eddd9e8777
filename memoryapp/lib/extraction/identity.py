"""Which call a finding answers: an exact identity, scoped per kind.

- read: the normalised path (plus the line window of a partial read);
- search: the pattern, its scope (path, glob, type) and mode, and the tool (a Glob
  pattern and a Grep pattern are different questions);
- shell: the exact command (a `description` or `timeout` does not make another call);
- web: the URL (fetch) or the query text (search);
- edit: the path and the edit's own arguments (every edit is its own call);
- anything else: the tool and the canonical JSON of its arguments.

A call's query may be a plain string or the tool's own JSON arguments; both forms of the
same call have the same identity (`src/a.py` and `{"file_path": "src/a.py"}` for a read,
`git status` and `{"command": "git status", "description": "…"}` for a shell). Only
natural-language retrieval (RAG) also matches near-duplicates, in `memoryapp.lib.matching`.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from memoryapp.lib.extraction import kinds

PATH_FIELDS = (
    "file_path", "path", "file", "filename", "target_file", "absolute_path", "notebook_path", "uri",
)  # fmt: skip
SEARCH_SCOPE_FIELDS = ("path", "glob", "type", "include", "exclude", "dir", "directory", "file")
SEARCH_MODE_FIELDS = ("output_mode", "-i", "case_sensitive", "multiline", "head_limit", "offset")
PATTERN_FIELDS = ("pattern", "query", "regex", "search_term", "file_name", "name", "q")
URL_FIELDS = ("url", "uri", "href", "link")
WINDOW_FIELDS = ("offset", "limit", "view_range", "start_line", "end_line", "line", "lines")


def normalize_path(path: str, cwd: str = "") -> str:
    """`./src//a.ts`, `src\\a.ts` and `src/a.ts/` are `src/a.ts`; `a/../b` is `b`; a
    relative path is taken from `cwd` when the session says where it works, so `lib/x.ex`
    and `/app/lib/x.ex` are one file there."""
    text = str(path).strip().strip("\"'`").replace("\\", "/")
    if not text:
        return ""
    if text.startswith("file://"):
        text = text[len("file://") :]
    if cwd and cwd.startswith("/") and not text.startswith(("/", "~")):
        text = posixpath.join(cwd, text)
    normal = posixpath.normpath(text)
    return "" if normal == "." else normal


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def normalize_text(text: str) -> str:
    return " ".join(str(text).split())


def normalize_url(url: str) -> str:
    text = str(url).strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.scheme:
        return text
    path = parts.path or "/"
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def first_field(args: dict[str, Any] | None, fields: tuple[str, ...]) -> str:
    for field in fields:
        value = (args or {}).get(field)
        if isinstance(value, str) and value.strip():
            return value
    return ""


@dataclass(frozen=True)
class CallKey:
    """A call's identity (`key`, compared exactly) and how to show its query."""

    key: str
    display: str
    path: str = ""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _read_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    path = first_field(args, PATH_FIELDS)
    window = {f: args[f] for f in WINDOW_FIELDS if args and args.get(f) not in (None, "", [])}
    if not args:
        words = _words(query)
        path = words[0] if words else ""
        if len(words) > 1:  # SWE-agent's `open path 120`: a window around line 120
            window = {"line": " ".join(words[1:])}
    if isinstance((args or {}).get("paths"), list):  # read_multiple_files
        path = ",".join(normalize_path(p, cwd) for p in args["paths"] if isinstance(p, str))
    path = normalize_path(path, cwd)
    if not path:
        return _other_key(tool, args, query)
    key = f"read:{path}" + (f"#{canonical_json(window)}" if window else "")
    shown = path + (f" ({_window_text(window)})" if window else "")
    return CallKey(key, shown, path)


def _window_text(window: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in window.items())


def _search_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    name = kinds.normalize_tool(tool)
    if args is None:
        words = _words(query)
        args = {"pattern": words[0]} if words else {"pattern": ""}
        if len(words) > 1:
            args["path"] = " ".join(words[1:])
    pattern = first_field(args, PATTERN_FIELDS)
    scope = {
        f: (normalize_path(args[f], cwd) if f in ("path", "dir", "directory", "file") else args[f])
        for f in SEARCH_SCOPE_FIELDS
        if args.get(f) not in (None, "", [])
    }
    mode = {f: args[f] for f in SEARCH_MODE_FIELDS if args.get(f) not in (None, "", False)}
    if name == "grep" and mode.get("output_mode") == "files_with_matches":
        del mode["output_mode"]  # Claude Code's default mode: the same call either way
    used = set(PATTERN_FIELDS[:1]) | set(SEARCH_SCOPE_FIELDS) | set(SEARCH_MODE_FIELDS)
    extra = {
        f: v
        for f, v in args.items()
        if f not in used and f not in PATTERN_FIELDS and not _display_only(f)
    }
    key = "search:" + canonical_json(
        {"tool": name, "pattern": pattern, "scope": scope, "mode": mode, "extra": extra}
    )
    shown = pattern
    if scope:
        shown += " in " + ", ".join(str(v) for v in scope.values())
    if mode.get("output_mode"):
        shown += f" ({mode['output_mode']})"
    return CallKey(key, shown or name, scope.get("path", ""))


def _display_only(field: str) -> bool:
    """Arguments that change how a result is shown, not what it is."""
    return field in (
        "-n", "-A", "-B", "-C", "context", "description", "timeout", "security_risk",
        "run_in_background", "thought", "reason", "explanation",
    )  # fmt: skip


def _shell_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    command = kinds.command_of(args, query).strip()
    if not command and args:
        return _other_key(tool, args, query)
    return CallKey("shell:" + command, command)


def _web_fetch_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    url = first_field(args, URL_FIELDS) if args else query.strip()
    if not url:
        return _other_key(tool, args, query)
    normal = normalize_url(url)
    # A fetch that answers a question about the page (Claude Code's WebFetch) is another
    # call when the question differs.
    prompt = normalize_text(first_field(args, ("prompt", "question", "instruction")))
    if prompt:
        return CallKey(f"web:{normal}#{prompt.casefold()}", f"{normal} ({prompt})")
    return CallKey("web:" + normal, normal)


def _web_search_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    text = first_field(args, PATTERN_FIELDS) if args else query
    if not text:
        return _other_key(tool, args, query)
    scope = {
        f: args[f] for f in ("allowed_domains", "blocked_domains", "site") if args and args.get(f)
    }
    key = "websearch:" + normalize_text(text).casefold()
    if scope:
        key += "#" + canonical_json(scope)
    return CallKey(key, normalize_text(text))


def _edit_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    path = normalize_path(first_field(args, PATH_FIELDS), cwd) if args else ""
    if args is None:  # SWE-agent's `create path`; its `edit 4:4 …` names no path
        words = _words(query.split("\n", 1)[0])
        if words and ("/" in words[-1] or "." in words[-1]):
            path = normalize_path(words[-1], cwd)
    rest = {k: v for k, v in (args or {}).items() if k not in PATH_FIELDS and not _display_only(k)}
    body = canonical_json(rest) if args else query.strip()
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    key = f"edit:{kinds.normalize_tool(tool)}:{path}:{digest}"
    return CallKey(key, path or normalize_text(query)[:200], path)


def _rag_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    text = first_field(args, PATTERN_FIELDS + ("question", "text")) if args else query
    text = normalize_text(text or query)
    return CallKey(f"rag:{kinds.normalize_tool(tool)}:{text.casefold()}", text)


def _other_key(tool: str, args: dict[str, Any] | None, query: str, cwd: str = "") -> CallKey:
    name = kinds.normalize_tool(tool)
    if args is not None:
        meaningful = {k: v for k, v in args.items() if not _display_only(k)}
        values = list(meaningful.values())
        if len(values) == 1 and isinstance(values[0], str):
            value = normalize_text(values[0])  # {"query": "x"} is the call "x"
            return CallKey(f"call:{name}:{value}", value)
        text = canonical_json(meaningful)
        return CallKey(f"call:{name}:{text}", text)
    value = normalize_text(query)
    return CallKey(f"call:{name}:{value}", value)


_KEYS = {
    kinds.READ: _read_key,
    kinds.SEARCH: _search_key,
    kinds.SHELL: _shell_key,
    kinds.EDIT: _edit_key,
    kinds.WEB_FETCH: _web_fetch_key,
    kinds.WEB_SEARCH: _web_search_key,
    kinds.RAG: _rag_key,
}


def call_key(kind: str, tool: str, query: str | dict | None, cwd: str = "") -> CallKey:
    """The identity of `tool(query)` for a call of `kind`; relative paths are taken from
    `cwd`, the session's working directory, when it is known."""
    args = kinds.arguments(query)
    text = query if isinstance(query, str) else ""
    if kind == kinds.BOOKKEEPING and kinds.normalize_tool(tool) in kinds.TOOL_KINDS:
        if kinds.TOOL_KINDS[kinds.normalize_tool(tool)] == kinds.SHELL:
            return _shell_key(tool, args, text)
    if kind == kinds.BOOKKEEPING and args and isinstance(args.get("todos"), list):
        key = _other_key(tool, args, text)
        return CallKey(key.key, f"todo list of {len(args['todos'])}")
    return _KEYS.get(kind, _other_key)(tool, args, text, cwd)
