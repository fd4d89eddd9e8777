"""Letta Agent Files (`.af`) in: each agent of the file becomes a session and its core
memory blocks become memories.

The current format (the `agents`, `blocks` and `tools` lists, tied by file-local ids) and
the older one (one agent at the top level with `core_memory`) are both read, and a file
encoded as a JSON string holding the JSON (as some of Letta's examples are) too. A
sleep-time helper agent of a group is left out (the report says so).

- The agent's messages (system, user, assistant, tool; text parts joined, a user message
  unwrapped from Letta's `{"type": "user_message", "message": …}`, OpenAI-style
  tool calls and the tool call id kept) are the session's conversation, cut into turns
  at each user message and extracted as appended turns are.
- Each core memory block (label, value, limit) is a memory of the agent: blocks are what
  a Letta agent keeps for good, and a memoryapp session expires. Its label, limit,
  description and whether it was read-only are the memory's origin; its id there is the
  session's key and the label (block ids are only unique within one file).
- The agent's description, model, block labels and tool definitions (name, description,
  type, JSON schema, source code up to MAX_SOURCE characters) are the session's metadata
  under `letta`.
- Archival memory (passages) is not in the format yet (its README says so); a file that
  carries `passages` has them imported as memories.

The session's key is `letta-<name>-<8 hex digits of the name and system prompt>`: the
same agent exported again imports as the same session (skipped while it lives), two
agents of one name from different files as two.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

from memoryapp.core.limits import MAX_FACT_CHARS
from memoryapp.core.models import Origin
from memoryapp.core.moving import (
    Line,
    MemoryIn,
    MessageIn,
    Plan,
    SessionIn,
    Source,
    SourceError,
    System,
    checked_time,
    load_json,
)

SYSTEM = Origin.System.LETTA
ROLES = {"system", "user", "assistant", "tool"}
MAX_SOURCE = 20_000
MAX_NAME = 200
MAX_LABEL = 100  # a block's label: with the session's key (at most 75), its memory's id


def _load(data: bytes) -> Any:
    document = load_json(data, "agent file")
    if isinstance(document, str):  # a file holding its JSON as one string
        document = load_json(document.encode(), "the agent file's string")
    if not isinstance(document, dict):
        raise SourceError("$", "an agent file is a JSON object")
    return document


def _str(value: Any, where: str, limit: int | None = None, empty: bool = True) -> str:
    if value is None and empty:
        return ""
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise SourceError(where, "expected a string" if empty else "expected a non-empty string")
    if limit is not None and len(value) > limit:
        raise SourceError(where, f"longer than {limit} characters")
    return value


def _list(value: Any, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SourceError(where, "expected a list")
    return value


def _text_of(content: Any, where: str) -> str:
    """A message's text: a string, or the text parts of a list (reasoning parts left out)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for i, part in enumerate(_list(content, where)):
        if not isinstance(part, dict):
            raise SourceError(f"{where}[{i}]", "a content part is an object")
        if part.get("type") == "text":
            parts.append(_str(part.get("text"), f"{where}[{i}].text"))
    return "\n".join(parts)


def _unwrapped(text: str) -> str:
    """What the person said, from Letta's wrapper of a user message (`{"type":
    "user_message", "message": …, "time": …}`); any other text as it is."""
    if not text.startswith("{") or '"user_message"' not in text:
        return text
    try:
        wrapped = json.loads(text)
    except json.JSONDecodeError:
        return text
    if not isinstance(wrapped, dict) or wrapped.get("type") != "user_message":
        return text
    said = wrapped.get("message")
    return said if isinstance(said, str) else text


def _moment(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(_str(value, where))
    except ValueError:
        raise SourceError(where, "not an ISO 8601 time") from None
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return checked_time(moment, where)


def _message(message: Any, where: str) -> MessageIn:
    if not isinstance(message, dict):
        raise SourceError(where, "a message is an object")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise SourceError(f"{where}.role", f"one of {', '.join(sorted(ROLES))}")
    calls = _list(message.get("tool_calls"), f"{where}.tool_calls")
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise SourceError(f"{where}.tool_calls[{i}]", "a tool call has a function")
    return MessageIn(
        role=role,
        content=_unwrapped(_text_of(message.get("content"), f"{where}.content")),
        created_at=_moment(message.get("created_at"), f"{where}.created_at"),
        name=_str(message.get("name"), f"{where}.name", MAX_NAME) or None,
        tool_call_id=_str(message.get("tool_call_id"), f"{where}.tool_call_id", MAX_NAME) or None,
        tool_calls=calls or None,
        client_id=_str(message.get("id"), f"{where}.id", MAX_NAME),
    )


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise SourceError(where, "a tool is an object")
    code = _str(tool.get("source_code"), f"{where}.source_code")
    return {
        "name": _str(tool.get("name"), f"{where}.name", MAX_NAME, empty=False),
        "description": _str(tool.get("description"), f"{where}.description"),
        "tool_type": _str(tool.get("tool_type"), f"{where}.tool_type", MAX_NAME),
        "json_schema": tool.get("json_schema")
        if isinstance(tool.get("json_schema"), dict)
        else None,
        "source_code": code[:MAX_SOURCE],
        "source_code_cut": len(code) > MAX_SOURCE,
    }


def _key(name: str, system: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "agent"
    digest = hashlib.sha256(f"{name}\n{system}".encode()).hexdigest()[:8]
    return f"letta-{slug}-{digest}"


def _block_memory(key: str, block: Any, where: str) -> MemoryIn:
    if not isinstance(block, dict):
        raise SourceError(where, "a block is an object")
    label = _str(block.get("label"), f"{where}.label", MAX_LABEL, empty=False)
    value = _str(block.get("value"), f"{where}.value", MAX_FACT_CHARS)
    detail = {
        "block": label,
        "limit": block.get("limit"),
        "description": _str(block.get("description"), f"{where}.description"),
        "read_only": bool(block.get("read_only")),
        "session": key,
    }
    return MemoryIn(f"{key}/{label}", value, confidence=1.0, detail=detail)


def _session(agent: dict, where: str, blocks: list, tools: list) -> tuple[SessionIn, list]:
    name = _str(agent.get("name"), f"{where}.name", MAX_NAME, empty=False)
    system = _str(agent.get("system"), f"{where}.system")
    key = _key(name, system)
    messages = [
        _message(m, f"{where}.messages[{i}]")
        for i, m in enumerate(_list(agent.get("messages"), f"{where}.messages"))
    ]
    memories = [_block_memory(key, b, at) for b, at in blocks]
    llm = agent.get("llm_config") if isinstance(agent.get("llm_config"), dict) else {}
    metadata = {
        "letta": {
            "agent": name,
            "description": _str(agent.get("description"), f"{where}.description"),
            "agent_type": _str(agent.get("agent_type"), f"{where}.agent_type", MAX_NAME),
            "model": str(llm.get("model") or ""),
            "blocks": [m.detail["block"] for m in memories],
            "tools": [_tool(t, at) for t, at in tools],
        }
    }
    return SessionIn(key, messages, metadata=metadata), memories


def _by_id(document: dict, name: str) -> dict[str, tuple[Any, str]]:
    found = {}
    for i, item in enumerate(_list(document.get(name), name)):
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            found[item["id"]] = (item, f"{name}[{i}]")
    return found


def _refs(agent: dict, field: str, table: dict, where: str) -> list[tuple[Any, str]]:
    refs = []
    for i, ref in enumerate(_list(agent.get(field), f"{where}.{field}")):
        if not isinstance(ref, str) or ref not in table:
            raise SourceError(f"{where}.{field}[{i}]", f"names {str(ref)[:40]!r}, not in the file")
        refs.append(table[ref])
    return refs


def _keep(plan: Plan, memories: list[MemoryIn]) -> None:
    """The memories with something to say; an empty block is a line of the report."""
    for memory in memories:
        if memory.content.strip():
            plan.memories.append(memory)
        else:
            why = "an empty block: its label is in the session's metadata"
            plan.notes.append(Line("memory", memory.source_id, "skip", why, ""))


def _located(document: dict, name: str) -> list[tuple[Any, str]]:
    return [(item, f"{name}[{i}]") for i, item in enumerate(_list(document.get(name), name))]


def read(data: bytes, source: str) -> Plan:
    """A Plan of the agents in the agent file `data` (its name `source`)."""
    document = _load(data)
    plan = Plan(SYSTEM, source)
    if "agents" not in document:
        if "core_memory" not in document and "messages" not in document:
            raise SourceError("$", "not a Letta agent file: no agents, core_memory or messages")
        blocks = _located(document, "core_memory")
        tools = _located(document, "tools")
        session, memories = _session(document, "$", blocks, tools)
        plan.sessions.append(session)
        _keep(plan, memories)
        return plan
    block_table, tool_table = _by_id(document, "blocks"), _by_id(document, "tools")
    for i, agent in enumerate(_list(document["agents"], "agents")):
        where = f"agents[{i}]"
        if not isinstance(agent, dict):
            raise SourceError(where, "an agent is an object")
        if agent.get("agent_type") == "sleeptime_agent":
            why = "a sleep-time helper agent: its blocks are the main agent's"
            plan.notes.append(Line("session", str(agent.get("name"))[:MAX_NAME], "skip", why, ""))
            continue
        blocks = _refs(agent, "block_ids", block_table, where)
        tools = _refs(agent, "tool_ids", tool_table, where)
        session, memories = _session(agent, where, blocks, tools)
        for j, passage in enumerate(_list(agent.get("passages"), f"{where}.passages")):
            at = f"{where}.passages[{j}]"
            text = _str(passage.get("text") if isinstance(passage, dict) else None, f"{at}.text",
                        MAX_FACT_CHARS, empty=False)  # fmt: skip
            own = passage.get("id") if isinstance(passage.get("id"), str) else ""
            ref = own[:60] or hashlib.sha256(text.encode()).hexdigest()[:16]
            memories.append(MemoryIn(f"{session.key}/passage/{ref}", text, detail={"passage": j}))
        plan.sessions.append(session)
        _keep(plan, memories)
    if not plan.sessions:
        raise SourceError("agents", "no agent to import")
    return plan


def read_source(source: Source) -> Plan:
    """Every agent of every agent file in `source.files`."""
    if not source.files:
        raise SourceError("files", "no agent file")
    plans = [read(data, name) for data, name in source.files]
    plan = Plan(SYSTEM, ", ".join(p.source for p in plans))
    for each in plans:
        plan.sessions += each.sessions
        plan.memories += each.memories
        plan.notes += each.notes
    return plan


SYSTEM_ENTRY = System(SYSTEM, "Letta", "agent files (.af)", read_source)
