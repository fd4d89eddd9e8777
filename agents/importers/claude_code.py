"""Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`): one JSON
event per line, with the subagents' logs beside it.

Only `user` and `assistant` events are conversation; `summary`, `system`,
`queue-operation`, `file-history-snapshot`, `progress` and any type added later are
skipped. One model call may be written over several `assistant` lines sharing
`message.id` (text, tool_use and thinking blocks each on its own line, and tool results
may arrive between them): they are merged into one assistant message and one turn, with
thinking dropped. Usage: input = input + cache creation + cache read tokens, output = the
largest output count reported for that message id. `user` lines carry text or
`tool_result` blocks; a result is paired with its `tool_use` by id and its line's
`toolUseResult` is reduced to small `details` (see `tool_details`).

Subagents: newer Claude Code writes `<session-dir>/<session-uuid>/subagents/agent-<id>.jsonl`
beside `<session-uuid>.jsonl` (and relays their messages into the main log as `progress`
events, read only when a subagent's own log is missing); older versions write
`agent-<id>.jsonl` in the same folder (lines marked `isSidechain` with the parent's
`sessionId`); the oldest put sidechain lines in the main file. Each subagent becomes its
own session, `<main key>:agent-<id>`, with `parent_session` in its metadata; Claude
Code's own compaction call (`agent-acompact-<id>`) is none (`is_compaction`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agents.client import Message, ToolCall
from agents.importers.core import (
    SCALAR_CHARS,
    ImportedSession,
    Problem,
    TurnBody,
    TurnBuilder,
    Usage,
    bounded_details,
    cut,
    function_call,
    image_placeholder,
    iso_timestamp,
    json_lines,
    non_negative_int,
    scalars,
    session_key,
    tail,
    text_of,
    tool_record,
)

FORMAT = "claude-code"
EVENT_TYPES = frozenset(
    {
        "user",
        "assistant",
        "summary",
        "system",
        "queue-operation",
        "file-history-snapshot",
        "progress",
        "attachment",
        "custom-title",
    }
)
# Tools whose `file_path` (or `notebook_path`) argument is the one file they act on.
FILE_TOOLS = frozenset({"Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "NotebookRead"})
# User text that Claude Code writes itself (slash commands, hooks, interruptions): never a goal.
NOT_A_PROMPT = (
    "<command-",
    "<task-notification>",
    "<local-command-",
    "<system-reminder>",
    "<user-prompt-submit-hook>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "Caveat: ",
    "[Request interrupted",
)
# An output too large for the transcript: Claude Code saved it to a file and shows a preview.
PERSISTED_PATH = re.compile(
    r"<persisted-output>\s*[^\n]*?(?:Full output saved to|Output has been saved to):?\s*([^\n]+)"
)
MAX_PERSISTED_CHARS = 64 * 1024
METADATA_FIELDS = ("sessionId", "cwd", "gitBranch", "version", "slug", "agentId")
MAX_FILENAMES = 50
MAX_SEARCH_RESULTS = 10

Lines = list[tuple[int, dict[str, Any]]]


def looks_like_event(event: Any) -> bool:
    """Whether one parsed line is a Claude Code event (used to recognise the format)."""
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return False
    if event["type"] not in EVENT_TYPES:
        return False
    return any(k in event for k in ("sessionId", "uuid", "leafUuid", "messageId", "message"))


def read_lines(path: Path) -> tuple[Lines, list[Problem]]:
    """Every line that is a JSON object, with its number; the others as problems."""
    lines: Lines = []
    problems: list[Problem] = []
    for number, event in json_lines(path, problems):
        if isinstance(event, dict):
            lines.append((number, event))
        else:
            problems.append((number, f"a JSON {type(event).__name__}, not an event; skipped"))
    return lines, problems


# --- toolUseResult -> details --------------------------------------------------------------


def _patch_counts(patch: Any) -> dict[str, int]:
    added = removed = 0
    for hunk in patch if isinstance(patch, list) else []:
        for line in hunk.get("lines", []) if isinstance(hunk, dict) else []:
            if isinstance(line, str) and line.startswith("+"):
                added += 1
            elif isinstance(line, str) and line.startswith("-"):
                removed += 1
    return {"lines_added": added, "lines_removed": removed}


def _pick(data: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return scalars({n: data[n] for n in names if n in data})


def _filenames(result: dict[str, Any]) -> dict[str, Any]:
    names = result.get("filenames")
    if not isinstance(names, list):
        return {}
    kept = [cut(n, SCALAR_CHARS) for n in names if isinstance(n, str)][:MAX_FILENAMES]
    return {"filenames": kept} | ({"filenames_total": len(names)} if len(names) > len(kept) else {})


def _read(result: dict[str, Any]) -> dict[str, Any]:
    file = result.get("file") if isinstance(result.get("file"), dict) else {}
    details = _pick(result, ("type",))
    details |= _pick(file, ("filePath", "numLines", "startLine", "totalLines", "originalSize"))
    if isinstance(file.get("cells"), list):
        details["cells"] = len(file["cells"])
    return details


def _search(result: dict[str, Any]) -> dict[str, Any]:
    names = ("mode", "numFiles", "numLines", "numMatches", "appliedLimit", "appliedOffset")
    return _pick(result, (*names, "truncated", "durationMs")) | _filenames(result)


def _shell(result: dict[str, Any]) -> dict[str, Any]:
    names = ("interrupted", "isImage", "returnCodeInterpretation", "backgroundTaskId")
    details = _pick(result, (*names, "exitCode", "status", "shellId"))
    stderr = result.get("stderr")
    if isinstance(stderr, str) and stderr.strip():
        details["stderr"] = tail(stderr.strip(), SCALAR_CHARS)
    return details


def _edit(result: dict[str, Any]) -> dict[str, Any]:
    details = _pick(result, ("filePath", "type", "replaceAll", "userModified"))
    if isinstance(result.get("edits"), list):
        details["edits"] = len(result["edits"])
    if "structuredPatch" in result:
        details |= _patch_counts(result["structuredPatch"])
    return details


def _task(result: dict[str, Any]) -> dict[str, Any]:
    names = ("status", "agentId", "totalToolUseCount", "totalTokens", "totalDurationMs")
    return _pick(result, (*names, "isAsync", "description"))


def _web_fetch(result: dict[str, Any]) -> dict[str, Any]:
    return _pick(result, ("url", "code", "codeText", "bytes", "durationMs"))


def _web_search(result: dict[str, Any]) -> dict[str, Any]:
    details = _pick(result, ("query", "durationSeconds"))
    links = []
    for item in result.get("results") if isinstance(result.get("results"), list) else []:
        found = item.get("content") if isinstance(item, dict) else None
        for link in found if isinstance(found, list) else [item]:
            if isinstance(link, dict) and isinstance(link.get("url"), str):
                links.append(
                    {"title": cut(str(link.get("title") or ""), 200), "url": cut(link["url"], 300)}
                )
    if links:
        details["results"] = links[:MAX_SEARCH_RESULTS]
        details["results_total"] = len(links)
    return details


def _todos(result: dict[str, Any]) -> dict[str, Any]:
    todos = [t for t in result.get("newTodos") or [] if isinstance(t, dict)]
    details: dict[str, Any] = {"todos": len(todos)}
    for todo in todos:
        status = str(todo.get("status") or "unknown")[:40]
        details[status] = details.get(status, 0) + 1
    return details


def _generic(result: dict[str, Any]) -> dict[str, Any]:
    # Bulky fields repeat the output or the file; the rest are small facts worth keeping.
    bulky = ("content", "stdout", "originalFile", "oldString", "newString", "prompt", "result")
    return scalars(result, skip=bulky)


def _task_output(result: dict[str, Any]) -> dict[str, Any]:
    # TaskOutput: the background task's description and status (its output is sent beside).
    task = result.get("task") if isinstance(result.get("task"), dict) else {}
    return {
        "retrieval_status": result.get("retrieval_status"),
        "task": scalars(task, skip=("output",)),
    }


REDUCERS = {
    "Read": _read,
    "NotebookRead": _read,
    "Grep": _search,
    "Glob": _search,
    "LS": _search,
    "Bash": _shell,
    "BashOutput": _shell,
    "Edit": _edit,
    "MultiEdit": _edit,
    "Write": _edit,
    "NotebookEdit": _edit,
    "Task": _task,
    "Agent": _task,
    "WebFetch": _web_fetch,
    "WebSearch": _web_search,
    "TodoWrite": _todos,
    "TaskOutput": _task_output,
}


def tool_details(tool: str, result: Any) -> dict[str, Any] | None:
    """A `toolUseResult` reduced to what matters, well under 8 KiB: never file contents or
    the full output (the output is sent beside it)."""
    if result is None:
        return None
    if isinstance(result, str):
        return {"message": cut(result, SCALAR_CHARS)} if result else None
    if isinstance(result, list):
        return {"items": len(result)}
    if not isinstance(result, dict):
        return {"message": cut(str(result), SCALAR_CHARS)}
    try:
        return bounded_details(REDUCERS.get(tool, _generic)(result))
    except (AttributeError, TypeError, ValueError):
        return bounded_details(_generic(result))


# --- one conversation ----------------------------------------------------------------------


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    fresh = non_negative_int(raw.get("input_tokens"))
    output = non_negative_int(raw.get("output_tokens"))
    if fresh is None or output is None:
        return None
    cached = sum(
        non_negative_int(raw.get(name)) or 0
        for name in ("cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return {"input_tokens": fresh + cached, "output_tokens": output}


def _file_path(tool: str, arguments: dict[str, Any]) -> str | None:
    if tool not in FILE_TOOLS:
        return None
    path = arguments.get("file_path") or arguments.get("notebook_path")
    return path if isinstance(path, str) else None


def _is_prompt(text: str) -> bool:
    stripped = text.lstrip()
    return bool(stripped) and not stripped.startswith(NOT_A_PROMPT)


class Conversation:
    """Reads one stream of events (a main session or one subagent) into turns."""

    def __init__(self, problems: list[Problem]) -> None:
        self.builder = TurnBuilder()
        self.problems = problems
        self.goal: str | None = None
        self.metadata: dict[str, Any] = {}
        self.task_calls: dict[str, str] = {}  # subagent id -> the Task call that started it
        self._by_message_id: dict[str, TurnBody] = {}
        self._seen: set[str] = set()
        self._first_timestamp: str | None = None
        self._last_timestamp: str | None = None

    def read(self, lines: Lines) -> list[TurnBody]:
        for number, event in lines:
            try:
                self._event(number, event)
            except (AttributeError, TypeError, ValueError, KeyError) as exc:
                # An unexpected shape in one event never stops the import.
                self.problems.append((number, f"could not read this event ({exc}); skipped"))
        if self._first_timestamp:
            self.metadata["started_at"] = self._first_timestamp
            self.metadata["ended_at"] = self._last_timestamp
        turns = self.builder.finish()
        if turns and "timestamp" not in turns[-1] and self._last_timestamp:
            turns[-1]["timestamp"] = self._last_timestamp  # inputs still awaiting a reply
        return turns

    def _event(self, number: int, event: dict[str, Any]) -> None:
        for name in METADATA_FIELDS:
            value = event.get(name)
            if name not in self.metadata and isinstance(value, str) and value:
                self.metadata[name] = cut(value, SCALAR_CHARS)
        uuid = event.get("uuid")
        if isinstance(uuid, str) and uuid:
            if uuid in self._seen:  # a line written twice (resumed or retried writes)
                return
            self._seen.add(uuid)
        kind = event.get("type")
        if kind == "summary" and isinstance(event.get("summary"), str):
            self.metadata.setdefault("summary", cut(event["summary"], SCALAR_CHARS))
        if kind not in ("user", "assistant"):
            return
        timestamp = iso_timestamp(event.get("timestamp"))
        if timestamp:
            self._first_timestamp = self._first_timestamp or timestamp
            self._last_timestamp = timestamp
        message = event.get("message")
        if not isinstance(message, dict):
            self.problems.append((number, f"a {kind} event without a message; skipped"))
            return
        if kind == "assistant":
            self._assistant(number, event, message, timestamp)
        else:
            self._user(number, event, message)

    def _assistant(
        self, number: int, event: dict[str, Any], message: dict[str, Any], timestamp: str | None
    ) -> None:
        content = message.get("content")
        if not isinstance(content, str | list):
            self.problems.append((number, "an assistant event without readable content; skipped"))
            return
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts, calls, records = self._assistant_blocks(number, blocks)
        model = message.get("model")
        model = model if isinstance(model, str) and model and model != "<synthetic>" else None
        usage = _usage(message.get("usage")) if model else None
        message_id = message.get("id") if isinstance(message.get("id"), str) else None
        turn = self._by_message_id.get(message_id) if message_id else None
        if turn is None:
            assistant: Message = {"role": "assistant", "content": "\n".join(texts)}
            if calls:
                assistant["tool_calls"] = calls
            turn = self.builder.add_model_call(
                assistant, calls=records, usage=usage, model=model, timestamp=timestamp
            )
            if message_id:
                self._by_message_id[message_id] = turn
            return
        self._merge(turn, texts, calls, records, usage, model)

    def _assistant_blocks(
        self, number: int, blocks: Any
    ) -> tuple[list[str], list[dict[str, Any]], list[ToolCall]]:
        """(the texts, the tool calls of the message, the tool calls' records) of one
        assistant line's blocks; results of server tools are set on their records."""
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        records: list[ToolCall] = []
        for index, block in enumerate(blocks if isinstance(blocks, list) else []):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind in ("tool_use", "server_tool_use"):
                self._tool_use(f"toolu_line{number}_{index}", block, calls, records)
            elif isinstance(kind, str) and kind.endswith("_tool_result"):
                record = self.builder.call(str(block.get("tool_use_id") or ""))
                if record is not None:
                    self.builder.set_result(record, text_of(block.get("content")), True)
            elif kind == "image":
                texts.append(image_placeholder(block))
        return texts, calls, records

    def _tool_use(
        self,
        fallback_id: str,
        block: dict[str, Any],
        calls: list[dict[str, Any]],
        records: list[ToolCall],
    ) -> None:
        """A `tool_use` or `server_tool_use` block, added to `calls` and `records` unless a
        later line of the same call repeats it."""
        call_id = str(block.get("id") or fallback_id)
        if self.builder.call(call_id) is not None:
            return  # a block repeated by a later line of the same call
        name = str(block.get("name") or "unknown")
        arguments = block.get("input")
        arguments = arguments if isinstance(arguments, dict) else {"input": arguments}
        if block.get("type") == "tool_use":  # server tools run inside the API call: no tool message
            calls.append(function_call(call_id, name, arguments))
        records.append(tool_record(name, arguments, call_id, _file_path(name, arguments)))

    def _merge(
        self,
        turn: TurnBody,
        texts: list[str],
        calls: list[dict[str, Any]],
        records: list[ToolCall],
        usage: Usage | None,
        model: str | None,
    ) -> None:
        """Another line of a model call already seen, merged into that call's turn."""
        assistant = turn["messages"][-1]
        if texts:
            assistant["content"] = "\n".join(t for t in (assistant["content"], *texts) if t)
        if calls:
            assistant.setdefault("tool_calls", []).extend(calls)
        self.builder.add_calls(turn, records)
        if usage:
            known = turn.get("usage")
            if known:
                usage = {
                    "input_tokens": max(known["input_tokens"], usage["input_tokens"]),
                    "output_tokens": max(known["output_tokens"], usage["output_tokens"]),
                }
            turn["usage"] = usage
        if model and "model" not in turn:
            turn["model"] = model

    def _user(self, number: int, event: dict[str, Any], message: dict[str, Any]) -> None:
        content = message.get("content")
        if not isinstance(content, str | list):
            self.problems.append((number, "a user event without readable content; skipped"))
            return
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        blocks = [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []
        results = [b for b in blocks if b.get("type") == "tool_result"]
        texts: list[str] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "image":
                texts.append(image_placeholder(block))
            elif kind not in ("tool_result", None):
                texts.append(f"[{kind}]")
        structured = event.get("toolUseResult")
        for block in results:
            call_id = str(block.get("tool_use_id") or "")
            output = text_of(block.get("content"))
            record = self.builder.call(call_id)
            if record is None:
                self.problems.append(
                    (number, f"tool_result for a tool_use this log does not have ({call_id})")
                )
                texts.insert(0, f"[result of tool call {call_id}]\n{output}")
                continue
            # A line's toolUseResult describes its result; with several, it is ambiguous.
            details = tool_details(record["tool"], structured) if len(results) == 1 else None
            # The conversation keeps what the model saw; extraction reads the whole output.
            full = persisted_in_full(output)
            self.builder.set_result(record, full, not block.get("is_error"), details)
            self.builder.add_input({"role": "tool", "tool_call_id": call_id, "content": output})
            agent_id = (details or {}).get("agentId")
            if isinstance(agent_id, str):
                self.task_calls[agent_id] = call_id
        if not texts:
            return
        text = "\n".join(texts)
        self.builder.add_input({"role": "user", "content": text})
        meta = event.get("isMeta") or event.get("isCompactSummary")
        if self.goal is None and not meta and not results and _is_prompt(text):
            self.goal = text


def persisted_in_full(output: str) -> str:
    """An output Claude Code saved to a file, read where the transcript points (its start
    and end when long); the transcript's preview as it is when the file is not there (the
    server's extraction then says that only a preview was seen)."""
    match = PERSISTED_PATH.search(output)
    if match is None:
        return output
    half = MAX_PERSISTED_CHARS // 2
    try:
        with Path(match.group(1).strip()).open("rb") as file:
            size = file.seek(0, 2)
            file.seek(0)
            if size <= MAX_PERSISTED_CHARS:
                return file.read().decode("utf-8", "replace")
            head = file.read(half)
            file.seek(size - half)
            tail = file.read()
    except (OSError, ValueError):
        return output
    return f"{head.decode('utf-8', 'replace')}\n[…]\n{tail.decode('utf-8', 'replace')}"


# --- files and sessions --------------------------------------------------------------------


class SubagentIndex:
    """Older Claude Code writes subagent logs as `agent-<id>.jsonl` beside the sessions:
    which of them belong to which session, read once per folder."""

    def __init__(self) -> None:
        self._folders: dict[Path, dict[str, list[Path]]] = {}

    def beside(self, folder: Path, session_id: str | None) -> list[Path]:
        if not session_id:
            return []
        if folder not in self._folders:
            index: dict[str, list[Path]] = {}
            for path in sorted(folder.glob("agent-*.jsonl")):
                owner = first_event(path).get("sessionId")
                if isinstance(owner, str):
                    index.setdefault(owner, []).append(path)
            self._folders[folder] = index
        return self._folders[folder].get(session_id, [])


def first_event(path: Path, limit: int = 20) -> dict[str, Any]:
    """The first line of a log that is a JSON object carrying a `sessionId`."""
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle):
                if number >= limit:
                    break
                try:
                    event = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                if isinstance(event, dict) and "sessionId" in event:
                    return event
    except OSError:
        pass
    return {}


def is_compaction(agent_id: str) -> bool:
    """Claude Code compacts a long conversation with a call of its own, logged like a
    subagent's (`agent-acompact-<id>.jsonl`): its prompt is the whole conversation and its
    answer the summary that replaces it, so it is no session of its own (the main
    session's metadata counts its `compactions`)."""
    return agent_id.startswith("acompact")


def is_subagent_file(path: Path) -> bool:
    if not path.stem.startswith("agent-"):
        return False
    return path.parent.name == "subagents" or bool(first_event(path).get("isSidechain"))


def _relayed(event: dict[str, Any]) -> dict[str, Any] | None:
    """Newer Claude Code relays each subagent message into the main log as a `progress`
    event (`data.type: agent_progress`). They are read only for a subagent whose own log
    is missing, as that subagent's events."""
    data = event.get("data")
    if event.get("type") != "progress" or not isinstance(data, dict):
        return None
    agent_id, relayed = data.get("agentId"), data.get("message")
    if data.get("type") != "agent_progress" or not isinstance(agent_id, str) or not agent_id:
        return None
    if not isinstance(relayed, dict) or relayed.get("type") not in ("user", "assistant"):
        return None
    if not isinstance(relayed.get("message"), dict):
        return None
    return {
        "timestamp": event.get("timestamp"),
        **relayed,
        "isSidechain": True,
        "agentId": agent_id,
        "sessionId": event.get("sessionId"),
    }


def _agent_id(path: Path, metadata: dict[str, Any]) -> str:
    stem = path.stem.removeprefix("agent-")
    return stem or str(metadata.get("agentId") or "unknown")


def _session(
    key: str, lines: Lines, problems: list[Problem], metadata: dict[str, Any]
) -> tuple[ImportedSession, Conversation]:
    conversation = Conversation(problems)
    turns = conversation.read(lines)
    return (
        ImportedSession(
            key=key,
            turns=turns,
            metadata={"format": FORMAT, **metadata, **conversation.metadata},
            goal=conversation.goal,
            problems=problems,
        ),
        conversation,
    )


def load(
    path: Path, key: str | None = None, index: SubagentIndex | None = None
) -> tuple[list[ImportedSession], list[Path]]:
    """The sessions of one log (the main session first, then its subagents) and the
    subagent files it read, so a folder import does not read them again."""
    index = index or SubagentIndex()
    lines, problems = read_lines(path)
    if is_subagent_file(path):
        if is_compaction(_agent_id(path, {})):
            return [], [path]
        return [_subagent_file_session(path, key, lines, problems)], [path]

    main_key = key or session_key(path.stem)
    main_lines, sidechains, progress = _split_sidechains(lines)
    main, conversation = _session(main_key, main_lines, problems, {"file": path.name})
    sessions = [main]
    session_id = conversation.metadata.get("sessionId")

    def subagent(agent_id: str, sub_lines: Lines, sub_problems: list[Problem], name: str) -> None:
        if is_compaction(agent_id):  # Claude Code summarising this conversation: not a task
            main.metadata["compactions"] = main.metadata.get("compactions", 0) + 1
            return
        sub_key = agent_id if agent_id.startswith("sidechain-") else f"agent-{agent_id}"
        sub, _ = _session(f"{main_key}:{sub_key}", sub_lines, sub_problems, {"file": name})
        sub.metadata["parent_session"] = main_key
        if agent_id in conversation.task_calls:
            sub.metadata["parent_tool_call"] = conversation.task_calls[agent_id]
        sessions.append(sub)

    files = _subagent_files(path, session_id, index)
    with_files = {_agent_id(file, {}) for file in files}
    for group, group_lines in sidechains.items():
        if group not in with_files:  # a subagent's own log, when there is one, is whole
            subagent(group, group_lines, [], path.name)
    for group, group_lines in progress.items():
        if group not in with_files and group not in sidechains:
            subagent(group, group_lines, [], path.name)
    read: list[Path] = []
    for file in files:
        if file in read or file == path:
            continue
        sub_lines, sub_problems = read_lines(file)
        subagent(_agent_id(file, {}), sub_lines, sub_problems, file.name)
        read.append(file)
    return sessions, read


def _subagent_file_session(
    path: Path, key: str | None, lines: Lines, problems: list[Problem]
) -> ImportedSession:
    """A subagent's own log, read alone: keyed under its parent session."""
    session, conversation = _session(key or "", lines, problems, {"file": path.name})
    parent = conversation.metadata.get("sessionId")
    agent_id = _agent_id(path, conversation.metadata)
    session.key = key or f"{session_key(parent or 'unknown')}:agent-{agent_id}"
    if parent:
        session.metadata["parent_session"] = session_key(parent)
    return session


def _split_sidechains(lines: Lines) -> tuple[Lines, dict[str, Lines], dict[str, Lines]]:
    """(the main conversation's lines, the inline subagents' lines by group, the relayed
    subagent messages by agent id)."""
    main_lines: Lines = []
    sidechains: dict[str, Lines] = {}
    progress: dict[str, Lines] = {}
    roots, spoken = 1, False
    for number, event in lines:
        relayed = _relayed(event)
        if relayed is not None:
            progress.setdefault(relayed["agentId"], []).append((number, relayed))
            continue
        if not event.get("isSidechain"):
            main_lines.append((number, event))
            continue
        # The oldest logs keep subagents inline: one conversation per agent id, or, when
        # there are no ids, one per root message (a message without a parent).
        group = event.get("agentId")
        if not isinstance(group, str) or not group:
            if event.get("type") in ("user", "assistant"):
                if spoken and event.get("parentUuid") is None:
                    roots += 1
                spoken = True
            group = f"sidechain-{roots}"
        sidechains.setdefault(group, []).append((number, event))
    return main_lines, sidechains, progress


def _subagent_files(path: Path, session_id: Any, index: SubagentIndex) -> list[Path]:
    """The subagent logs of a session: in its `subagents/` folders, then beside it."""
    folders = {path.parent / path.stem / "subagents"}
    if isinstance(session_id, str) and session_id:
        folders.add(path.parent / session_id / "subagents")
    files: list[Path] = []
    for folder in sorted(folders):
        if folder.is_dir():
            files.extend(sorted(folder.glob("agent-*.jsonl")))
    files.extend(index.beside(path.parent, session_id))
    return files
