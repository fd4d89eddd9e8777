"""Extraction: concise memory from what an agent says and what its tools print.

Two pure functions, used by the Celery extraction task:

`infer_context(text)` reads assistant text and proposes working-context items (stored
with source `inferred`, confidence 0.6). Keys, each from conservative patterns that need a
code-ish token (a backticked path, a known framework or language name) so that ordinary
prose yields nothing:
- `active_file`: "working on `lib/app.ex`", "let's open `src/a.ts`", "editing `x.py`";
- `framework`: "using Phoenix 1.7", "built with Django", "a Rails app" (known names only);
- `current_task`: "implementing user auth", "I'm adding rate limiting to the API";
- `primary_language`: "this is an Elixir project", "written in Go" (known names only);
- `test_command`: "run the tests with `mix test`".

`finding_from_tool(tool, query, output, success)` turns one tool call into a finding: a
concise fact, never the raw output. The kind of tool comes from `TOOL_KINDS` (names from
several agent frameworks, compared case-insensitively), else from the shape of the output:

| kind | tool names | fact |
|---|---|---|
| read | fs:read, read_file, Read, open, open_file, view, view_file, cat, str_replace_editor (view) | path, line count, the names it defines (Python, JS/TS, Go, Rust, Elixir) |
| search | fs:search, grep, Grep, rg, search, search_dir, search_file, find_file, find, glob, Glob | number of matches and a few sample paths |
| rag | mind:rag-query, rag_query, rag, query_knowledge | the JSON `answer` field |
| shell | bash, shell, sh, terminal, execute_bash, run, run_command, python | command, exit status, a short tail |
| data load | load_data, load_file, load_ifc, or any large JSON output | path, item count, counts per kind |
| edit | edit, create, insert, str_replace, write_file, str_replace_editor (other commands) | the path edited and its new length |
| other | anything else | a 200-character truncation |
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

INFERRED_CONFIDENCE = 0.6
OTHER_LIMIT = 200
DATA_LOAD_MIN_CHARS = 5000

TOOL_KINDS: dict[str, str] = {
    **dict.fromkeys(
        ["fs:read", "read_file", "read", "open", "open_file", "view", "view_file", "cat"],
        "read",
    ),
    **dict.fromkeys(
        [
            "fs:search",
            "fs:grep",
            "fs:glob",
            "grep",
            "rg",
            "ripgrep",
            "search",
            "search_dir",
            "search_file",
            "find_file",
            "find",
            "glob",
            "file_search",
        ],
        "search",
    ),
    **dict.fromkeys(["mind:rag-query", "rag_query", "rag", "query_knowledge"], "rag"),
    **dict.fromkeys(
        [
            "bash",
            "shell",
            "sh",
            "terminal",
            "execute_bash",
            "run",
            "run_command",
            "cmd",
            "python",
            "python3",
        ],
        "shell",
    ),
    **dict.fromkeys(["load_data", "load_file", "load_ifc", "load_dataset", "fs:load"], "data"),
    **dict.fromkeys(
        ["edit", "create", "insert", "str_replace", "write", "write_file", "fs:write", "edit_file"],
        "edit",
    ),
}

FRAMEWORKS = [
    "Phoenix", "Django", "Flask", "FastAPI", "Rails", "Ruby on Rails", "Laravel", "Spring Boot",
    "Spring", "Express", "NestJS", "Next.js", "Nuxt", "React", "Vue", "Svelte", "SvelteKit",
    "Angular", "Remix", "Gin", "Echo", "Actix", "Axum", "Rocket", "Tokio", "LiveView", "Ecto",
    "Celery", "SQLAlchemy", "PyTorch", "TensorFlow", "pytest", "Jest", "Vitest", "htmx",
    "Tailwind", "Symfony", "ASP.NET", ".NET", "Electron", "Flutter", "Qt",
]  # fmt: skip
LANGUAGES = [
    "Python", "JavaScript", "TypeScript", "Go", "Golang", "Rust", "Elixir", "Erlang", "Ruby",
    "Java", "Kotlin", "Scala", "Swift", "C#", "C\\+\\+", "PHP", "Haskell", "OCaml", "Clojure",
    "Dart", "Lua", "Perl", "Julia", "Zig", "Nim",
]  # fmt: skip

_PATH = r"`((?:[\w.\-]+/)*[\w.\-]+\.[A-Za-z0-9]{1,8})`"
_ACTIVE_FILE = re.compile(
    r"\b(?:working on|working in|looking at|let'?s (?:open|edit|look at|modify)|"
    r"(?:now )?(?:opening|editing|modifying)|I'?ll (?:open|edit|modify))\s+"
    r"(?:the\s+)?(?:file\s+)?" + _PATH,
    re.IGNORECASE,
)
_VERSION = r"(?:\s+v?(\d+(?:\.\d+){0,2}))?"
_FRAMEWORK = re.compile(
    r"\b(?:using|built (?:with|on)|based on|written with|a|an)\s+("
    + "|".join(re.escape(f) for f in sorted(FRAMEWORKS, key=len, reverse=True))
    + r")"
    + _VERSION
    + r"(?=[\s.,;:)!]|$)(?!\s*(?:component|function|hook|method|class|module|test)s?\b)",
)
_FRAMEWORK_APP = re.compile(
    r"\b(?:a|an|this|the)\s+("
    + "|".join(re.escape(f) for f in sorted(FRAMEWORKS, key=len, reverse=True))
    + r")\s+(?:app|application|project|site|codebase|service)\b"
)
_LANGUAGE_NAMES = "(" + "|".join(LANGUAGES) + ")"
_PROJECT_NOUN = r"(?:project|codebase|repo|repository|app|application|library|service|environment)"
_LANGUAGE = re.compile(
    # "this is an Elixir project" needs the noun ("it's a Python error" is not a project);
    # "written in Go" does not.
    r"\b(?i:this is an?|it'?s an?)\s+" + _LANGUAGE_NAMES + r"(?:\s+\w+)?\s+" + _PROJECT_NOUN + r"\b"
    r"|\b(?i:is written in|written in|implemented in)\s+" + _LANGUAGE_NAMES + r"\b"
)
_TASK = re.compile(
    r"\b(?i:I'?m|I am|we'?re|we are|I'?ll be|currently|now|next,? I'?ll be)\s+"
    r"(implementing|building|adding|refactoring|migrating)\s+"
    r"((?:[A-Za-z][\w\-]*\s+){0,6}[A-Za-z][\w\-]*)"
)
_TASK_STOP = {
    "it", "this", "that", "them", "these", "those", "some", "more", "a", "an", "the", "to",
    "in", "on", "for", "with", "and", "changes", "code", "fix", "fixes", "print", "debug",
    "logging", "comments", "tests", "test", "support", "one", "another", "new", "missing",
}  # fmt: skip
_TEST_COMMAND = re.compile(
    r"\brun(?:ning)?\s+(?:the\s+)?tests?\s+(?:with|using|via)\s+`([A-Za-z.][^`\n]{1,79})`",
    re.IGNORECASE,
)


def infer_context(text: str) -> dict[str, str]:
    """Working-context items suggested by one assistant message (key -> value)."""
    found: dict[str, str] = {}
    if not text:
        return found
    text = text[:20000]
    if match := _ACTIVE_FILE.search(text):
        found["active_file"] = match.group(1)
    if match := (_FRAMEWORK.search(text) or _FRAMEWORK_APP.search(text)):
        name = match.group(1)
        version = match.group(2) if match.re is _FRAMEWORK and match.group(2) else ""
        found["framework"] = f"{name} {version}".strip()
    if match := _LANGUAGE.search(text):
        found["primary_language"] = (match.group(1) or match.group(2)).replace("\\", "")
    if match := _TASK.search(text):
        words = match.group(2).split()
        while words and words[0].lower() in _TASK_STOP:
            words.pop(0)
        while words and words[-1].lower() in _TASK_STOP:
            words.pop()
        if len(words) >= 2 and not all(w.lower() in _TASK_STOP for w in words):
            found["current_task"] = f"{match.group(1)} {' '.join(words)}"
    if match := _TEST_COMMAND.search(text):
        found["test_command"] = match.group(1).strip()
    return found


# --- findings from tool outputs --------------------------------------------------------


@dataclass(frozen=True)
class ExtractedFinding:
    tool: str
    query: str
    fact: str
    success: bool = True
    file_path: str = ""


_SWE_FOOTER = re.compile(r"\n?\((?:Open file|Current directory):[^\n]*\)\s*|\n?bash-\$\s*$")
_SWE_FILE_HEADER = re.compile(r"^\[File: ([^\]\n]+?) \((\d+) lines total\)\]", re.MULTILINE)
_CAT_N_HEADER = re.compile(r"result of running `cat -n` on ([^\s:]+):")
_LINE_NUMBER = re.compile(r"^\s*\d+(?::|\t| \| )", re.MULTILINE)
_FOUND_N = re.compile(r"Found (\d+) match(?:es)? for", re.IGNORECASE)
_NO_MATCHES = re.compile(r"\bNo (?:matches|results|files) found\b", re.IGNORECASE)
_EXIT_CODE = re.compile(
    r"(?:exit code|exit status|exited with(?: code)?|returned)\s*[:=]?\s*(-?\d+)", re.IGNORECASE
)

_DEFINITIONS: dict[str, list[re.Pattern[str]]] = {
    "python": [re.compile(r"^(?:async\s+)?def\s+(\w+)|^class\s+(\w+)", re.MULTILINE)],
    "javascript": [
        re.compile(
            r"^\s*export\s+(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?(?:async\s+)?"
            r"(?:function\*?|class|interface|type|const|let|var|enum)\s+(\w+)",
            re.MULTILINE,
        ),
        re.compile(
            r"^(?:async\s+)?function\*?\s+(\w+)|^class\s+(\w+)|^interface\s+(\w+)", re.MULTILINE
        ),
    ],
    "go": [
        re.compile(
            r"^func\s+(?:\([^)]*\)\s*)?(\w+)|^type\s+(\w+)\s+(?:struct|interface)", re.MULTILINE
        )
    ],
    "rust": [
        re.compile(
            r"^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:async\s+)?(?:unsafe\s+)?"
            r"(?:fn|struct|enum|trait|mod|type|union)\s+(\w+)",
            re.MULTILINE,
        )
    ],
    "elixir": [
        re.compile(
            r"^\s*defmodule\s+([\w.]+)|^\s*(?:def|defmacro|defstruct)\s+(\w+[?!]?)", re.MULTILINE
        )
    ],
}
_EXTENSIONS = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".jsx": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".ts": "javascript", ".tsx": "javascript", ".mts": "javascript",
    ".go": "go", ".rs": "rust", ".ex": "elixir", ".exs": "elixir",
}  # fmt: skip


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _arguments(query: str) -> dict[str, Any]:
    try:
        parsed = json.loads(query)
    except (ValueError, TypeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _strip_footer(output: str) -> str:
    return _ANSI.sub("", _SWE_FOOTER.sub("\n", output)).strip()


def tool_kind(tool: str, query: str, output: str) -> str:
    name = tool.strip().lower()
    args = _arguments(query)
    if name in ("str_replace_editor", "editor", "file_editor"):
        return "read" if args.get("command") == "view" else "edit"
    if name in TOOL_KINDS:
        return TOOL_KINDS[name]
    # Unknown name: judge by the output's shape.
    head = output[:2000]
    if _SWE_FILE_HEADER.search(head) or _CAT_N_HEADER.search(head):
        return "read"
    if _FOUND_N.search(head) or _NO_MATCHES.search(head):
        return "search"
    stripped = output.strip()
    if stripped.startswith("{") and '"answer"' in stripped[:5000]:
        try:
            if isinstance(json.loads(stripped).get("answer"), str):
                return "rag"
        except (ValueError, AttributeError):
            pass
    if len(stripped) >= DATA_LOAD_MIN_CHARS and stripped[:1] in "[{":
        return "data"
    if "[The command completed with exit code" in output:
        return "shell"
    return "other"


def definitions(path: str, source: str) -> list[str]:
    """Names a file defines or exports, in order, for the languages we know."""
    language = _EXTENSIONS.get(PurePosixPath(path).suffix.lower())
    if language is None:
        return []
    code = _LINE_NUMBER.sub("", source)
    names: list[str] = []
    for pattern in _DEFINITIONS[language]:
        for match in pattern.finditer(code):
            name = next((g for g in match.groups() if g), None)
            if name and name not in names:
                names.append(name)
    return names


def _read_fact(query: str, output: str, args: dict[str, Any]) -> tuple[str, str]:
    path = str(args.get("path") or args.get("file_path") or args.get("file") or "").strip()
    lines_total = None
    if match := _SWE_FILE_HEADER.search(output):
        path, lines_total = match.group(1).strip(), int(match.group(2))
    elif match := _CAT_N_HEADER.search(output):
        path = match.group(1).strip()
    if not path:
        path = query.strip().strip("\"'`").split()[0] if query.strip() else ""
    body = _strip_footer(output)
    body = _CAT_N_HEADER.split(body, maxsplit=1)[-1] if _CAT_N_HEADER.search(body) else body
    names = definitions(path, body)
    counted = lines_total if lines_total is not None else len(body.strip("\n").splitlines())
    size = "1 line" if counted == 1 else f"{counted} lines"
    if names:
        shown = ", ".join(names[:12]) + (f" (+{len(names) - 12} more)" if len(names) > 12 else "")
        return f"{size}; defines {shown}", path
    return size, path


def _search_fact(output: str) -> str:
    body = _strip_footer(output)
    if _NO_MATCHES.search(body[:500]):
        return "No matches"
    declared = _FOUND_N.search(body)
    paths: list[str] = []
    hits = 0
    for line in body.splitlines():
        line = line.strip()
        if not line or _FOUND_N.search(line) or line.startswith(("End of matches", "More than")):
            continue
        candidate = re.split(r":\d+[:\-]| \(\d+ match", line, maxsplit=1)[0].strip()
        if "/" in candidate or re.search(r"\.\w{1,8}$", candidate):
            hits += 1
            if candidate not in paths:
                paths.append(candidate)
    count = int(declared.group(1)) if declared else hits
    if not count:
        return _one_line(body, OTHER_LIMIT) or "No matches"
    sample = ", ".join(paths[:3]) + (", …" if len(paths) > 3 else "")
    files = f" in {len(paths)} files" if len(paths) > 1 else ""
    noun = "match" if count == 1 else "matches"
    return f"{count} {noun}{files}" + (f": {sample}" if sample else "")


def _shell_fact(
    query: str, output: str, success: bool | None, args: dict[str, Any]
) -> tuple[str, bool]:
    command = str(args.get("command") or args.get("cmd") or query or "").strip()
    body = _strip_footer(output)
    status = None
    if match := _EXIT_CODE.search(body[-500:]):
        status = int(match.group(1))
    failed_run = "Traceback (most recent call last)" in body
    body = re.sub(
        r"\[(?:The command completed|Command finished) with exit code -?\d+\.?\]", "", body
    )
    body = re.sub(r"\[Current working directory: [^\]]*\]|\[Python interpreter: [^\]]*\]", "", body)
    tail_lines = [line.strip() for line in body.splitlines() if line.strip()][-3:]
    tail = _one_line(" / ".join(tail_lines), 160)
    if status is not None:
        ok = status == 0
    elif success is not None:
        ok = success
    else:
        ok = not failed_run
    status_text = f"exit {status}" if status is not None else ("ok" if ok else "failed")
    fact = f"`{_one_line(command, 80)}` {status_text}" + (f": {tail}" if tail else "")
    return fact, ok


def _data_fact(query: str, output: str, args: dict[str, Any]) -> tuple[str, str]:
    path = str(args.get("path") or args.get("file") or args.get("file_path") or query).strip()
    try:
        data = json.loads(output)
    except ValueError:
        return f"Loaded {len(output):,} characters from {path or 'data'}", path
    name = data.get("name") if isinstance(data, dict) and isinstance(data.get("name"), str) else ""
    items = data
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if len(lists) == 1:
            items = next(iter(lists.values()))
        elif lists:
            counts = ", ".join(
                f"{len(v):,} {k}" for k, v in sorted(lists.items(), key=lambda kv: -len(kv[1]))[:6]
            )
            label = " ".join(p for p in (path, name and f"({name})") if p)
            return f"Loaded {label or 'data'}: {counts}", path
    if isinstance(items, list):
        kinds = Counter(
            str(item.get("type") or item.get("kind") or item.get("class") or item.get("category"))
            for item in items
            if isinstance(item, dict)
            and (item.get("type") or item.get("kind") or item.get("class") or item.get("category"))
        )
        label = " ".join(p for p in (path, name and f"({name})") if p) or "data"
        fact = f"Loaded {label}: {len(items):,} items"
        if kinds:
            fact += " — " + ", ".join(f"{n:,} {k}" for k, n in kinds.most_common(6))
        return fact, path
    return f"Loaded {path or 'data'}: {type(data).__name__} of {len(output):,} characters", path


def finding_from_tool(
    tool: str, query: str, output: str, success: bool | None = None, file_path: str = ""
) -> ExtractedFinding:
    kind = tool_kind(tool, query, output)
    args = _arguments(query)
    short_query = _one_line(query, 300)
    ok = True if success is None else success
    if kind == "read":
        fact, path = _read_fact(query, output, args)
        path = file_path or path
        return ExtractedFinding(tool, path or short_query, fact, ok, path)
    if kind == "search":
        pattern = args.get("pattern") or args.get("query") or args.get("file_name") or query
        return ExtractedFinding(
            tool, _one_line(str(pattern), 300), _search_fact(output), ok, file_path
        )
    if kind == "rag":
        try:
            answer = json.loads(output).get("answer")
        except (ValueError, AttributeError):
            answer = None
        fact = _one_line(answer, 300) if isinstance(answer, str) else _one_line(output, OTHER_LIMIT)
        return ExtractedFinding(tool, short_query, fact, ok, file_path)
    if kind == "shell":
        fact, shell_ok = _shell_fact(query, output, success, args)
        command = args.get("command") or args.get("cmd") or query
        return ExtractedFinding(tool, _one_line(str(command), 300), fact, shell_ok, file_path)
    if kind == "data":
        fact, path = _data_fact(query, output, args)
        return ExtractedFinding(tool, short_query, fact, ok, file_path or path)
    if kind == "edit":
        path = str(args.get("path") or args.get("file_path") or "").strip()
        lines = ""
        if match := _SWE_FILE_HEADER.search(output):
            path, lines = path or match.group(1).strip(), f", now {match.group(2)} lines"
        path = file_path or path
        failed = re.search(r"\b(?:error|failed|no such file|invalid)\b", output[:500], re.I)
        if failed:
            return ExtractedFinding(
                tool,
                path or short_query,
                _one_line(_strip_footer(output), OTHER_LIMIT),
                False,
                path,
            )
        return ExtractedFinding(
            tool, path or short_query, f"edited {path or 'a file'}{lines}", ok, path
        )
    return ExtractedFinding(
        tool,
        short_query,
        _one_line(_strip_footer(output), OTHER_LIMIT) or "(no output)",
        ok,
        file_path,
    )
