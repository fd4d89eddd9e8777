"""What kind of tool call this is: the one table every caller uses.

Extraction picks the module that parses a call by its kind (`read.py` parses reads,
`search.py` searches, …), the prompt groups findings by kind, and the dashboard shows the
same groups. Tool names come from several agent frameworks (Claude Code, SWE-agent,
OpenHands, aider, MCP servers) and compare case-insensitively; adding a tool name is one
line in `TOOL_KINDS`.

A few tools decide their kind by their arguments (`str_replace_editor` with `view` reads,
with anything else edits), MCP tools (`mcp__server__tool`) by their own name or their
server's, shell commands that run an issue tracker count as bookkeeping, and a tool nobody
listed is judged by the shape of its output.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from memoryapp.lib.extraction.text import SWE_FILE_HEADER

READ = "read"
SEARCH = "search"
SHELL = "shell"
EDIT = "edit"
WEB_FETCH = "web_fetch"
WEB_SEARCH = "web_search"
SUBAGENT = "subagent"
BOOKKEEPING = "bookkeeping"
RAG = "rag"
DATA = "data"
OTHER = "other"

KINDS = (READ, SEARCH, SHELL, EDIT, WEB_FETCH, WEB_SEARCH, SUBAGENT, BOOKKEEPING, RAG, DATA, OTHER)

TOOL_KINDS: dict[str, str] = {
    # reads
    "read": READ, "read_file": READ, "fs:read": READ, "open": READ, "open_file": READ,
    "view": READ, "view_file": READ, "cat": READ, "notebookread": READ, "read_notebook": READ,
    "goto": READ, "scroll_up": READ, "scroll_down": READ, "read_text_file": READ,
    "read_multiple_files": READ, "get_file_contents": READ,
    # searches
    "grep": SEARCH, "glob": SEARCH, "rg": SEARCH, "ripgrep": SEARCH, "search": SEARCH,
    "search_dir": SEARCH, "search_file": SEARCH, "find_file": SEARCH, "find": SEARCH,
    "file_search": SEARCH, "fs:search": SEARCH, "fs:grep": SEARCH, "fs:glob": SEARCH,
    "ls": SEARCH, "list_dir": SEARCH, "list_directory": SEARCH, "list_files": SEARCH,
    "codebase_search": SEARCH, "grep_search": SEARCH, "search_files": SEARCH,
    "directory_tree": SEARCH, "search_code": SEARCH,
    # shells
    "bash": SHELL, "shell": SHELL, "sh": SHELL, "terminal": SHELL, "execute_bash": SHELL,
    "run": SHELL, "run_command": SHELL, "cmd": SHELL, "python": SHELL, "python3": SHELL,
    "execute_command": SHELL, "run_terminal_cmd": SHELL, "exec_command": SHELL,
    "run_shell_command": SHELL, "bashoutput": SHELL, "taskoutput": SHELL,
    "execute_ipython_cell": SHELL,
    "container.exec": SHELL, "local_shell": SHELL,
    # edits and writes
    "edit": EDIT, "multiedit": EDIT, "write": EDIT, "create": EDIT, "insert": EDIT,
    "str_replace": EDIT, "write_file": EDIT, "fs:write": EDIT, "edit_file": EDIT,
    "notebookedit": EDIT, "apply_patch": EDIT, "replace_in_file": EDIT, "write_to_file": EDIT,
    "create_file": EDIT, "append": EDIT, "undo_edit": EDIT, "edit_notebook": EDIT,
    "search_replace": EDIT, "move_file": EDIT, "delete_file": EDIT,
    # the web
    "webfetch": WEB_FETCH, "web_fetch": WEB_FETCH, "fetch": WEB_FETCH, "browse": WEB_FETCH,
    "open_url": WEB_FETCH, "read_url": WEB_FETCH, "fetch_url": WEB_FETCH, "browser": WEB_FETCH,
    "scrape": WEB_FETCH, "visit": WEB_FETCH,
    "websearch": WEB_SEARCH, "web_search": WEB_SEARCH, "search_web": WEB_SEARCH,
    "google_search": WEB_SEARCH, "brave_search": WEB_SEARCH, "brave_web_search": WEB_SEARCH,
    "tavily_search": WEB_SEARCH, "bing_search": WEB_SEARCH, "duckduckgo_search": WEB_SEARCH,
    # subagents
    "task": SUBAGENT, "agent": SUBAGENT, "dispatch_agent": SUBAGENT, "subagent": SUBAGENT,
    "delegate": SUBAGENT, "delegate_task": SUBAGENT, "spawn_agent": SUBAGENT,
    # bookkeeping: todo lists and issue trackers
    "todowrite": BOOKKEEPING, "todoread": BOOKKEEPING, "todo_write": BOOKKEEPING,
    "todo_read": BOOKKEEPING, "update_plan": BOOKKEEPING, "task_tracker": BOOKKEEPING,
    "think": BOOKKEEPING, "exitplanmode": BOOKKEEPING, "enterplanmode": BOOKKEEPING,
    "askuserquestion": BOOKKEEPING, "killshell": BOOKKEEPING, "killbash": BOOKKEEPING,
    # memoryapp's own memory tools (lib/memory_tools.py): the memory itself, not findings
    "remember": BOOKKEEPING, "recall": BOOKKEEPING, "forget": BOOKKEEPING,
    # retrieval and data
    "mind:rag-query": RAG, "rag_query": RAG, "rag": RAG, "query_knowledge": RAG,
    "load_data": DATA, "load_file": DATA, "load_ifc": DATA, "load_dataset": DATA, "fs:load": DATA,
}  # fmt: skip

# MCP servers whose every tool is bookkeeping (issue trackers, todo lists).
BOOKKEEPING_SERVERS = {"beads", "linear", "jira", "todo", "todoist", "taskmaster", "asana"}
# Shell programs (and `gh issue`) that are issue trackers: recorded as bookkeeping.
BOOKKEEPING_COMMANDS = {"bd", "beads", "jira", "linear", "todo", "task-master"}
# Shell programs that search: their output is summarised like a search's.
SEARCH_COMMANDS = {
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "find",
    "fd",
    "fdfind",
    "ls",
    "tree",
}

EDITOR_TOOLS = {"str_replace_editor", "editor", "file_editor", "str_replace_based_edit_tool"}

_CAT_N_HEADER = re.compile(r"result of running `cat -n` on [^\s:]+:")
_FOUND_N = re.compile(r"Found \d+ match(?:es)? for", re.IGNORECASE)
_NO_MATCHES = re.compile(r"\bNo (?:matches|results|files) found\b", re.IGNORECASE)


def normalize_tool(tool: str) -> str:
    return tool.strip().casefold()


def arguments(query: str | dict | None) -> dict[str, Any] | None:
    """The call's arguments when `query` is (or holds) a JSON object, else None."""
    if isinstance(query, dict):
        return query
    if not isinstance(query, str):
        return None
    text = query.strip()
    if not text.startswith("{"):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _mcp_parts(name: str) -> tuple[str, str] | None:
    """`mcp__server__tool` → (server, tool)."""
    if name.startswith("mcp__"):
        parts = name.split("__")
        if len(parts) >= 3:
            return parts[1], "__".join(parts[2:])
    return None


_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n.*?\n\s*\1\b[^\n]*", re.DOTALL)


def compact_command(command: str) -> str:
    """The command as a person would cite it: a here-document's body left out."""
    return _HEREDOC.sub("<<EOF … EOF", command)


_REDIRECT = re.compile(r"\d*>&\d+|&>>?\s*\S+|\d*>>?\s*/dev/null")
_OPERATORS = {";", "&&", "||", "&", "|", ";;"}


def command_segments(command: str) -> list[list[str]]:
    """The simple commands of a command line, in order, each as its words up to a pipe
    (what a pipe feeds is left out): quotes respected, so a `;` inside a quoted argument
    does not split the command."""
    # A here-document's body is data, not commands (`git commit -m "$(cat <<'EOF' …)"`).
    text = _REDIRECT.sub(" ", _HEREDOC.sub("<<HEREDOC", command)).replace("\n", " ; ")
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = ""
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: split naively
        tokens = re.split(r"\s+|(?=[;|&])|(?<=[;|&])", text)
    segments: list[list[str]] = [[]]
    piped = False
    for token in tokens:
        if token in _OPERATORS:
            piped = token == "|"
            if not piped:
                segments.append([])
            continue
        if token and not piped:
            segments[-1].append(token)
    return [words for words in segments if words]


def equivalent_command(command: str) -> str:
    """What a command runs, to tell a retry of it: its simple commands without flags,
    redirections or what a pipe feeds, a `cd DIR &&` folded into the relative paths after
    it. `cd assets && node build.js` is `node assets/build.js`, `git add -f x` a retry of
    `git add x`, `cargo test 2>&1 | tail -20` is `cargo test`."""
    parts: list[str] = []
    prefix = ""
    for words in command_segments(command):
        if words[0] == "cd" and len(words) <= 2:
            where = words[1].rstrip("/") if len(words) == 2 else ""
            prefix = f"{prefix}{where}/" if where not in ("", ".", "~", "-") else ""
            continue
        kept = [
            prefix + word
            if prefix and index and ("/" in word or "." in word) and word[0] not in "/~$"
            else word
            for index, word in enumerate(words)
            if not word.startswith("-")
        ]
        parts.append(" ".join(kept))
    return " && ".join(parts)


def shell_words(command: str) -> list[str]:
    """The words of the command that does the work, the last of a chain: `cd x && rg foo`
    → ['rg', 'foo']; environment assignments and `sudo`/`time`/`timeout N` prefixes are
    skipped, and so is what a pipe feeds (`mix test | tail -5` is `mix test`)."""
    for words in reversed(command_segments(command)):
        while words and (
            re.match(r"^\w+=", words[0]) or words[0] in ("sudo", "time", "env", "nice", "command")
        ):
            words = words[1:]
        if words and words[0] == "timeout" and len(words) > 2:
            words = words[2:]
        if not words or words[0] in ("cd", "pushd", "source", ".", "export", "set"):
            continue
        return words
    return []


def command_of(args: dict[str, Any] | None, query: str) -> str:
    if args:
        for field in ("command", "cmd", "script", "code", "input"):
            value = args.get(field)
            if isinstance(value, str):
                return value
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return shlex.join(value)
    return query


def shell_program(command: str) -> str:
    words = shell_words(command)
    if not words:
        return ""
    program = words[0].rsplit("/", 1)[-1]
    if program == "git" and len(words) > 1 and words[1] == "grep":
        return "git grep"
    if program == "gh" and len(words) > 1 and words[1] == "issue":
        return "gh issue"
    return program


def kind_of(tool: str, query: str | dict | None = "", output: str = "") -> str:
    """The kind of one tool call: from its name, else its arguments, else its output."""
    name = normalize_tool(tool)
    args = arguments(query)
    if name in EDITOR_TOOLS:
        command = (args or {}).get("command")
        if command is None and isinstance(query, str) and query.strip():
            command = query.split()[0]
        return READ if command == "view" else EDIT
    if name in TOOL_KINDS:
        kind = TOOL_KINDS[name]
        if kind == SHELL:
            program = shell_program(command_of(args, query if isinstance(query, str) else ""))
            if program in BOOKKEEPING_COMMANDS or program == "gh issue":
                return BOOKKEEPING
        return kind
    if parts := _mcp_parts(name):
        server, own = parts
        if server in BOOKKEEPING_SERVERS:
            return BOOKKEEPING
        if own in TOOL_KINDS:
            return TOOL_KINDS[own]
    return _kind_from_output(output)


def _kind_from_output(output: str) -> str:
    head = output[:2000]
    if SWE_FILE_HEADER.search(head) or _CAT_N_HEADER.search(head):
        return READ
    if _FOUND_N.search(head) or _NO_MATCHES.search(head):
        return SEARCH
    stripped = output.strip()
    if stripped.startswith("{") and '"answer"' in stripped[:5000]:
        try:
            if isinstance(json.loads(stripped).get("answer"), str):
                return RAG
        except (ValueError, AttributeError):
            pass
    if "[The command completed with exit code" in output:
        return SHELL
    return OTHER


# The prompt's and the dashboard's groups, in the order they are shown; bookkeeping last,
# so todo lists never crowd real findings out of a bounded prompt.
GROUPS: dict[str, str] = {
    READ: "Files Already Read",
    SEARCH: "Previous Search Results",
    EDIT: "Files Changed",
    SHELL: "Commands Run",
    WEB_FETCH: "Web Pages and Searches",
    WEB_SEARCH: "Web Pages and Searches",
    SUBAGENT: "Subagent Results",
    RAG: "Other Findings",
    DATA: "Other Findings",
    OTHER: "Other Findings",
    BOOKKEEPING: "Bookkeeping",
}
GROUP_ORDER = tuple(dict.fromkeys(GROUPS.values()))


def group_of(kind: str) -> str:
    return GROUPS.get(kind, GROUPS[OTHER])
