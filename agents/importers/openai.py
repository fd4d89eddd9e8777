"""OpenAI-style message lists, and the ToolBench trajectories written in that style.

- A JSON list of `{role, content, tool_calls?, tool_call_id?, name?}` (OpenHands SDK
  fixtures), or `{"messages": [...], "response": {...}}` (an LLM call log: the request's
  messages, then the response's message with its usage and model).
- Legacy function calling: an assistant's `function_call` becomes a tool call, and a
  `role: "function"` message its result, linked by a call id made from the message's
  position (stable from one import to the next).
- ToolBench answer files, `{"answer_generation": {"train_messages": [[...], ...], "query":
  ..., "final_answer": ...}}` (the longest message list is the trajectory), where a
  function's output reads `{"error": "", "response": "..."}`: success is an empty error.
- ToolLLaMA conversations, `{"conversations": [{"from": system|user|assistant|function,
  "value": ...}]}`, whose assistant values read `Thought: ...\\nAction: <name>\\nAction
  Input: {json}`; a file may hold a list of them (one session each).

The user's query is the goal. A turn is one model call (see `core.TurnBuilder`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.client import Message, ToolCall
from agents.importers.core import (
    ROLES,
    ImportedSession,
    Problem,
    TurnBody,
    TurnBuilder,
    Usage,
    cut,
    function_call,
    iso_timestamp,
    json_lines,
    openai_usage,
    parse_list,
    parse_structured,
    text_of,
    tool_record,
    with_problems,
)

FORMAT = "openai"
SuccessRule = Callable[[str], bool | None]
_REACT = re.compile(
    r"^\s*(?:Thought:\s*(?P<thought>.*?))?\s*Action:\s*(?P<action>[^\n]*?)\s*\n"
    r"\s*Action Input:\s*(?P<input>.*?)\s*$",
    re.DOTALL,
)
SPEAKERS = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "function": "function",
    "tool": "function",
    "observation": "function",
}


# SWE-agent's own commands (its tool bundles: files, search, edit, CTF); any other action
# is a shell command line the agent ran.
SWE_AGENT_COMMANDS = {
    "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "append",
    "search_dir", "search_file", "find_file", "submit", "filemap", "str_replace_editor",
    "view", "decompile", "disassemble", "debug_start", "debug_add_breakpoint",
    "debug_continue", "debug_step", "debug_exec", "debug_stop", "connect_start",
    "connect_sendline", "connect_exec", "connect_stop", "exit_forfeit", "exit_cost",
}  # fmt: skip


_EXECUTION_RESULT = re.compile(r"^\s*(?:EXECUTION RESULT of \[|OBSERVATION:|Observation:)")


def action_call(action: str) -> tuple[str, str]:
    """(tool, query) of a SWE-agent action: its own commands keep their name and the rest
    of the line (`open path 10` is `open`, `path 10`); a shell command line is `bash` with
    the whole line as its command."""
    command = action.strip()
    tool, _, rest = command.partition(" ")
    if tool in SWE_AGENT_COMMANDS:
        return tool, rest.strip()
    return "bash", command


def _normalize_call(call: dict[str, Any], position: int, index: int) -> dict[str, Any] | None:
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    call_id = call.get("id")
    call_id = call_id if isinstance(call_id, str) and call_id else f"call_{position}_{index}"
    return function_call(call_id, name, function.get("arguments"))


def turns_from_messages(
    raw_messages: list[Any],
    model: str | None = None,
    *,
    success: SuccessRule | None = None,
    problems: list[Problem] | None = None,
) -> list[TurnBody]:
    """Group a flat message list into turns, one per assistant message. The tool calls an
    assistant made, with the outputs that answer them, are attached to its turn; the tool
    messages themselves open the next turn. `success` reads a tool output's success."""
    builder = TurnBuilder()
    # A SWE-agent action without function calling is answered by whatever comes next.
    awaiting: ToolCall | None = None
    for position, raw in enumerate(raw_messages):
        if not isinstance(raw, dict):
            if problems is not None:
                problems.append((0, f"message {position + 1} is not an object; skipped"))
            continue
        role = _role(raw)
        if role not in ROLES:
            continue
        content = text_of(raw.get("content"))
        if role == "assistant":
            awaiting = _add_assistant(builder, raw, content, position, model)
            continue
        message: Message = {"role": role, "content": content}
        if role == "tool":
            _answer_tool_call(builder, raw, content, success, message)
        name = _input_name(raw, role, content, awaiting)
        if name is not None:
            message["name"] = name
        builder.add_input(message)
        if awaiting is not None:
            builder.set_result(awaiting, content)
            awaiting = None
    return builder.finish()


def _role(raw: dict[str, Any]) -> str | None:
    """The message's role in the chat API's terms (`function` is `tool`, `developer` is
    `system`), None when it has none."""
    role = raw.get("role")
    if not isinstance(role, str):
        return None
    return {"function": "tool", "developer": "system"}.get(role, role)


def _add_assistant(
    builder: TurnBuilder, raw: dict[str, Any], content: str, position: int, model: str | None
) -> ToolCall | None:
    """An assistant message as a model call with its tool calls (the legacy
    `function_call` too); answers the call of a SWE-agent `action` the next message answers."""
    calls = parse_list(raw.get("tool_calls"))
    legacy = raw.get("function_call")
    if not calls and isinstance(legacy, dict):
        calls = [{"id": f"call_{position}", "function": legacy}]
    normalized = [
        n
        for index, c in enumerate(calls)
        if isinstance(c, dict) and (n := _normalize_call(c, position, index))
    ]
    message: Message = {"role": "assistant", "content": content}
    if normalized:
        message["tool_calls"] = normalized
    records = [
        tool_record(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in normalized
    ]
    awaiting = None
    action = raw.get("action")
    if not normalized and isinstance(action, str) and action.strip():
        awaiting = tool_record(*action_call(action))
        records.append(awaiting)
    builder.add_model_call(message, calls=records, model=model)
    return awaiting


def _answer_tool_call(
    builder: TurnBuilder,
    raw: dict[str, Any],
    content: str,
    success: SuccessRule | None,
    message: Message,
) -> None:
    """A tool message: its output set on the call it answers (by id, or for a legacy
    `function` message the oldest unanswered call), its `tool_call_id` on `message`."""
    call_id = raw.get("tool_call_id")
    if not call_id:
        ids = parse_list(raw.get("tool_call_ids"))
        call_id = ids[0] if ids else None
    record = builder.call(str(call_id)) if call_id else None
    if record is None and raw.get("role") == "function":
        record = builder.oldest_unanswered()
    if record is not None:
        builder.set_result(record, content, success(content) if success else None)
        call_id = call_id or record.get("call_id")
    if call_id:
        message["tool_call_id"] = str(call_id)


def _input_name(
    raw: dict[str, Any], role: str, content: str, awaiting: ToolCall | None
) -> str | None:
    """The `name` of a tool or user message: its own, or what a user message really is."""
    name = raw.get("name")
    if name and role in ("tool", "user"):
        return str(name)
    if role == "user" and (awaiting is not None or _EXECUTION_RESULT.match(content)):
        # What a command printed, sent as a user message: named so that nobody reads it
        # as the person's words (a task, an instruction).
        return "observation"
    if role == "user" and raw.get("is_demo"):
        return "demonstration"  # SWE-agent's worked example, not the task
    return None


def first_user_text(raw_messages: list[Any]) -> str | None:
    for raw in raw_messages:
        if isinstance(raw, dict) and raw.get("role") == "user" and not raw.get("is_demo"):
            text = text_of(raw.get("content"))
            if text.strip():
                return text
    return None


# --- ToolBench ------------------------------------------------------------------------------


def toolbench_success(output: str) -> bool | None:
    """ToolBench (RapidAPI) outputs read `{"error": "", "response": ...}`: success is an
    empty error; None when the output has no such field."""
    parsed = parse_structured(output)
    if isinstance(parsed, dict) and "error" in parsed:
        return not parsed["error"]
    return None


def _merge_thoughts(messages: list[Any]) -> list[Any]:
    """ToolBench writes a model call's thought and its function call as two assistant
    messages in a row; they are one model call."""
    merged: list[Any] = []
    for raw in messages:
        previous = merged[-1] if merged else None
        if (
            isinstance(raw, dict)
            and isinstance(previous, dict)
            and raw.get("role") == previous.get("role") == "assistant"
            and raw.get("function_call")
            and not previous.get("function_call")
            and not text_of(raw.get("content")).strip()
        ):
            merged[-1] = {**raw, "content": previous.get("content")}
            continue
        merged.append(raw)
    return merged


def _react_message(value: str) -> dict[str, Any]:
    match = _REACT.match(value)
    if not match or not match.group("action").strip():
        return {"role": "assistant", "content": value.strip()}
    thought = (match.group("thought") or "").strip()
    return {
        "role": "assistant",
        "content": thought,
        "function_call": {"name": match.group("action").strip(), "arguments": match["input"]},
    }


def conversation_messages(conversation: list[Any]) -> list[Any]:
    """ToolLLaMA / ShareGPT `{"from", "value"}` turns as OpenAI-style messages."""
    messages: list[Any] = []
    for item in conversation:
        if not isinstance(item, dict):
            messages.append(item)
            continue
        role = SPEAKERS.get(str(item.get("from") or item.get("role") or "").lower())
        value = item.get("value", item.get("content"))
        value = value if isinstance(value, str) else text_of(value)
        if role == "assistant":
            messages.append(_react_message(value))
        elif role:
            messages.append({"role": role, "content": value})
    return messages


def _answer(data: dict[str, Any]) -> dict[str, Any] | None:
    for name in ("answer_generation", "answer"):
        answer = data.get(name)
        if isinstance(answer, dict) and (
            isinstance(answer.get("train_messages"), list)
            or isinstance(answer.get("answer_details"), list)
        ):
            return answer
    return None


def details_messages(details: list[Any]) -> list[Any]:
    """ToolEval's converted answers keep the run as a chain of nodes, `{"role", "message",
    "next": [...]}`, a tool node's message being `{"name", "arguments", "response"}`: the
    first branch, as messages."""
    messages: list[Any] = []
    node = details[0] if details else None
    for position in range(10_000):
        if not isinstance(node, dict):
            break
        role, message = node.get("role"), node.get("message")
        if role == "tool" and isinstance(message, dict):
            call_id = f"call_{position}"
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        function_call(call_id, str(message.get("name")), message.get("arguments"))
                    ],
                }
            )
            if "response" in message:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": text_of(message["response"]),
                    }
                )
        elif role in ("system", "user", "assistant"):
            messages.append({"role": role, "content": text_of(message)})
        following = node.get("next")
        node = following[0] if isinstance(following, list) and following else None
    return messages


def _toolbench_session(
    answer: dict[str, Any], outer: dict[str, Any], key: str, path: Path
) -> ImportedSession:
    chains = answer.get("train_messages")
    if not isinstance(chains, list):
        chains = [details_messages(answer.get("answer_details") or [])]
    if chains and all(isinstance(c, dict) for c in chains):
        chains = [chains]  # one flat trajectory
    chains = [c for c in chains if isinstance(c, list)]
    # Each list repeats the ones before it and goes further; the longest is the whole run.
    messages = max(reversed(chains), key=len) if chains else []
    problems: list[Problem] = []
    turns = turns_from_messages(
        _merge_thoughts(messages), success=toolbench_success, problems=problems
    )
    metadata: dict[str, Any] = {"format": "toolbench", "file": path.name}
    for name in ("finish_type", "valid_data", "query_id", "method"):
        value = answer.get(name)
        if isinstance(value, str | bool | int):
            metadata[name] = cut(value, 300) if isinstance(value, str) else value
    if isinstance(answer.get("final_answer"), str):
        metadata["final_answer"] = cut(answer["final_answer"], 300)
    query = answer.get("query", outer.get("query"))
    goal = query if isinstance(query, str) and query.strip() else first_user_text(messages)
    return ImportedSession(key=key, turns=turns, metadata=metadata, goal=goal, problems=problems)


def _conversation_session(data: dict[str, Any], key: str, path: Path) -> ImportedSession:
    messages = conversation_messages(data["conversations"])
    problems: list[Problem] = []
    turns = turns_from_messages(messages, success=toolbench_success, problems=problems)
    metadata: dict[str, Any] = {"format": "toolllama", "file": path.name}
    if isinstance(data.get("id"), str | int):
        metadata["id"] = cut(str(data["id"]), 300)
    return ImportedSession(
        key=key, turns=turns, metadata=metadata, goal=first_user_text(messages), problems=problems
    )


def _response_message(response: Any) -> tuple[dict[str, Any] | None, Usage | None, str | None]:
    if not isinstance(response, dict):
        return None, None, None
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    model = response.get("model") if isinstance(response.get("model"), str) else None
    usage = openai_usage(response.get("usage"))
    return (message if isinstance(message, dict) else None), usage, model


def _messages_session(data: dict[str, Any], key: str, path: Path) -> ImportedSession:
    messages = list(data["messages"])
    reply, usage, model = _response_message(data.get("response"))
    if reply is not None:
        messages.append({**reply, "role": "assistant"})
    problems: list[Problem] = []
    turns = turns_from_messages(messages, model=model, problems=problems)
    if reply is not None and turns and usage:
        turns[-1]["usage"] = usage
    timestamp = iso_timestamp(data.get("timestamp"))
    if timestamp and turns:
        turns[-1]["timestamp"] = timestamp
    return ImportedSession(
        key=key,
        turns=turns,
        metadata={"format": FORMAT, "file": path.name},
        goal=first_user_text(messages),
        problems=problems,
    )


def is_message_list(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(m, dict) for m in data)
        and any(isinstance(m.get("role"), str) for m in data)
    )


def _keyed(data: Any) -> bool:
    """ToolEval keeps converted answers as one object keyed by query id."""
    return (
        isinstance(data, dict)
        and bool(data)
        and all(isinstance(v, dict) and _answer(v) is not None for v in data.values())
    )


def is_document(data: Any) -> bool:
    """Whether parsed JSON is one of this module's shapes."""
    if is_message_list(data) or _keyed(data):
        return True
    items = data if isinstance(data, list) else [data]
    return bool(items) and all(
        isinstance(item, dict)
        and (
            _answer(item) is not None
            or isinstance(item.get("conversations"), list)
            or is_message_list(item.get("messages"))
        )
        for item in items
    )


def load_document(data: Any, key: str, path: Path) -> list[ImportedSession]:
    """The sessions of one parsed JSON document (see the module docstring)."""
    if is_message_list(data):
        problems: list[Problem] = []
        return [
            ImportedSession(
                key=key,
                turns=turns_from_messages(data, success=toolbench_success, problems=problems),
                metadata={"format": FORMAT, "file": path.name},
                goal=first_user_text(data),
                problems=problems,
            )
        ]
    if _keyed(data) and _answer(data) is None:
        names, items = [str(k) for k in data], list(data.values())
    else:
        items = data if isinstance(data, list) else [data]
        names = [str(position + 1) for position in range(len(items))]
    sessions = []
    for name, item in zip(names, items, strict=True):
        item_key = key if len(items) == 1 else f"{key}:{name}"
        if not isinstance(item, dict):
            continue
        if (answer := _answer(item)) is not None:
            sessions.append(_toolbench_session(answer, item, item_key, path))
        elif isinstance(item.get("conversations"), list):
            sessions.append(_conversation_session(item, item_key, path))
        elif is_message_list(item.get("messages")):
            sessions.append(_messages_session(item, item_key, path))
    return sessions


def load_lines(path: Path, key: str) -> list[ImportedSession]:
    """JSON lines: one message a line (one session), or one document a line (a session
    each, `<key>:<line>`)."""
    messages: list[Any] = []
    sessions: list[ImportedSession] = []
    problems: list[Problem] = []
    for number, item in json_lines(path, problems):
        if isinstance(item, dict) and isinstance(item.get("role"), str):
            messages.append(item)
        elif is_document(item):
            sessions.extend(load_document(item, f"{key}:{number}", path))
        else:
            problems.append((number, "neither a message nor a conversation; skipped"))
    if messages:
        sessions = load_document(messages, key, path) + sessions
    return with_problems(sessions, key, problems)
