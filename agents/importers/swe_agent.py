"""SWE-agent trajectories (`*.traj`): a JSON object whose `history` lists messages with
roles system/user/assistant/tool.

An assistant entry's `action` is the command it ran. With function calling its
`tool_calls` (often stored as a Python repr, `"[{'id': ...}]"`) name the tool and carry
the JSON arguments, which become the tool call's `query`, and the `tool` message that
follows is the output. Without function calling the command's first word is the tool and
the rest of the command, unparsed, is the query (`open path 10` is tool `open`, query
`path 10`); the next entry, a `user` observation, is the output. Trajectories with no
`history` but a `trajectory` list (`action`, `observation`, `response`) are read from that.

The model is the run's configured model (`replay_config.agent.model.name`); the goal is
the first user message that is not part of a demonstration, without SWE-agent's framing
around the issue ("We're currently solving the following issue within our repository.
Here's the issue text: ISSUE: … INSTRUCTIONS: …"), which every run's first message shares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agents.importers.core import ImportedSession, Problem, cut, parse_structured
from agents.importers.openai import first_user_text, turns_from_messages

FORMAT = "swe-agent"

# SWE-agent's instance template: the issue between its ISSUE: and INSTRUCTIONS: headings.
_ISSUE = re.compile(r"^\s*ISSUE:\s*\n(?P<issue>.*?)\n\s*INSTRUCTIONS:", re.M | re.S)


def issue_of(text: str | None) -> str | None:
    """The issue a run's first message gives, without the framing SWE-agent puts around
    it; the message as it is when it holds no such framing."""
    match = _ISSUE.search(text or "")
    issue = match.group("issue").replace("\r\n", "\n").strip() if match else ""
    return issue or text


def is_document(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if isinstance(data.get("history"), list) and not any(
        isinstance(e, dict) and ("action" in e and "observation" in e) for e in data["history"]
    ):
        return any(isinstance(m, dict) and "role" in m for m in data["history"])
    return isinstance(data.get("trajectory"), list) and "info" in data


def _model(data: dict[str, Any]) -> str | None:
    config = parse_structured(data.get("replay_config"))
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            config = None
    agent = config.get("agent") if isinstance(config, dict) else None
    model = agent.get("model") if isinstance(agent, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    if isinstance(name, str) and name:
        return name
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    stats = parse_structured(info.get("model_stats"))
    name = stats.get("model") if isinstance(stats, dict) else None
    return name if isinstance(name, str) and name else None


def _history_from_trajectory(steps: list[Any]) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for step in steps:
        if not isinstance(step, dict):
            continue
        response = step.get("response") or step.get("thought") or ""
        history.append({"role": "assistant", "content": response, "action": step.get("action")})
        if step.get("observation") is not None:
            history.append({"role": "user", "content": step.get("observation")})
    return history


def load_document(data: dict[str, Any], key: str, path: Path) -> list[ImportedSession]:
    history = data.get("history")
    if not isinstance(history, list):
        history = _history_from_trajectory(data.get("trajectory") or [])
    problems: list[Problem] = []
    model = _model(data)
    turns = turns_from_messages(history, model=model, problems=problems)
    metadata: dict[str, Any] = {"format": FORMAT, "file": path.name}
    if model:
        metadata["model"] = model
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    if isinstance(info.get("exit_status"), str):
        metadata["exit_status"] = cut(info["exit_status"], 300)
    stats = parse_structured(info.get("model_stats"))
    if isinstance(stats, dict):
        for name in ("tokens_sent", "tokens_received", "api_calls"):
            if isinstance(stats.get(name), int):
                metadata[name] = stats[name]
    return [
        ImportedSession(
            key=key,
            turns=turns,
            metadata=metadata,
            goal=issue_of(first_user_text(history)),
            problems=problems,
        )
    ]
