"""Transcript importers: turn real agent transcripts into turns for the memory API.

Supported formats:
- SWE-agent trajectories (`*.traj`): `history` entries with roles system/user/assistant/
  tool; an assistant entry's `action` is the command it ran, and the next entry is what
  the command printed (a `tool` message with function calling, a `user` observation
  without).
- OpenAI-style message lists (OpenHands SDK fixtures, `*.json`): a JSON list of
  `{role, content, tool_calls?, tool_call_id?, name?}`.

Tool calls may be stored as Python reprs (`"[{'id': ...}]"`) in these files; they are
parsed safely with `ast.literal_eval`. A turn is one model call: the inputs since the
previous assistant message, then the assistant message; the tool calls an assistant
message made (with what they printed) are attached to its turn.

Run `python -m agents.importers FILE --url URL --key KEY [--session NAME]` to import one.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

ROLES = {"system", "user", "assistant", "tool"}


def _parse_listish(value: Any) -> list:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                return []
        return parsed if isinstance(parsed, list) else []
    return []


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: keep their text
        parts = []
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return str(content)


def _message(raw: dict) -> dict | None:
    role = raw.get("role")
    if role not in ROLES:
        return None
    message: dict[str, Any] = {"role": role, "content": _text(raw.get("content"))}
    tool_calls = _parse_listish(raw.get("tool_calls"))
    if tool_calls:
        message["tool_calls"] = tool_calls
    call_id = raw.get("tool_call_id")
    if not call_id:
        ids = _parse_listish(raw.get("tool_call_ids"))
        call_id = ids[0] if ids else None
    if call_id and role == "tool":
        message["tool_call_id"] = str(call_id)
    if raw.get("name") and role in ("tool", "user"):
        message["name"] = str(raw["name"])[:200]
    return message


def _tool_call_records(assistant: dict, raw: dict, following: list[dict]) -> list[dict]:
    """What the assistant's tool calls were and what they printed, one record each."""
    records = []
    calls = assistant.get("tool_calls") or []
    outputs_by_id = {m.get("tool_call_id"): m["content"] for m in following if m["role"] == "tool"}
    for call in calls:
        function = call.get("function") or {}
        name = function.get("name") or call.get("name") or "unknown"
        arguments = function.get("arguments", "")
        try:
            query: Any = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            query = arguments
        records.append(
            {
                "tool": str(name)[:200],
                "query": query if isinstance(query, dict | str) else json.dumps(query),
                "output": outputs_by_id.get(call.get("id"), ""),
            }
        )
    action = raw.get("action")
    if not calls and isinstance(action, str) and action.strip():
        command = action.strip()
        tool, _, rest = command.partition(" ")
        observation = following[0]["content"] if following else ""
        records.append({"tool": tool[:200], "query": rest.strip(), "output": observation})
    return records


def turns_from_messages(raw_messages: list[dict], model: str | None = None) -> list[dict]:
    """Group a flat message list into turns (see the module docstring)."""
    pairs = [(m, raw) for raw in raw_messages if (m := _message(raw)) is not None]
    turns: list[dict] = []
    pending: list[dict] = []
    for index, (message, raw) in enumerate(pairs):
        pending.append(message)
        if message["role"] != "assistant":
            continue
        following = []
        for later, _ in pairs[index + 1 :]:
            if later["role"] == "assistant":
                break
            following.append(later)
        turn: dict[str, Any] = {"messages": pending}
        records = _tool_call_records(message, raw, following)
        if records:
            turn["tool_calls"] = records
        if model:
            turn["model"] = model
        turns.append(turn)
        pending = []
    if pending:
        turn = {"messages": pending}
        if model:
            turn["model"] = model
        turns.append(turn)
    return turns


def load_transcript(path: str | Path) -> list[dict]:
    """Turns from a SWE-agent trajectory or an OpenAI-style message list."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and isinstance(data.get("history"), list):
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        model = (info.get("model_stats") or {}).get("model") if info else None
        return turns_from_messages(data["history"], model=model)
    if isinstance(data, list):
        return turns_from_messages(data)
    raise ValueError(f"{path}: not a SWE-agent trajectory nor a list of messages")


def main(argv: list[str] | None = None) -> int:
    from agents.client import MemoryClient

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="the agent's API key")
    parser.add_argument("--session", help="session key (default: the file's name)")
    args = parser.parse_args(argv)
    session = args.session or Path(args.path).stem
    with MemoryClient(args.url, args.key) as client:
        for turn in load_transcript(args.path):
            client.append_turn(session, **turn)
        print(json.dumps(client.session(session)["totals"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
