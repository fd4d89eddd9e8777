"""Transcript importers on the real transcripts shipped in demo/transcripts."""

import json
from pathlib import Path

from agents.importers import load_transcript, turns_from_messages

DEMO = Path(__file__).resolve().parent.parent / "demo" / "transcripts"


def test_swe_agent_function_calling_trajectory():
    turns = load_transcript(DEMO / "swe-agent" / "function_calling_simple.traj")
    raw = json.loads((DEMO / "swe-agent" / "function_calling_simple.traj").read_text())
    messages = [m for t in turns for m in t["messages"]]
    assert len(messages) == len(raw["history"])
    assert [m["role"] for m in messages] == [m["role"] for m in raw["history"]]
    # tool_calls were Python reprs in the file; they arrive as real lists.
    assistant = turns[0]["messages"][-1]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["function"]["name"] == "find_file"
    assert turns[0]["tool_calls"][0]["tool"] == "find_file"
    assert turns[0]["tool_calls"][0]["query"] == {"file_name": "missing_colon.py"}
    assert "Found 1 matches" in turns[0]["tool_calls"][0]["output"]
    tool_message = turns[1]["messages"][0]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == assistant["tool_calls"][0]["id"]


def test_swe_agent_action_trajectory_without_function_calling():
    turns = load_transcript(DEMO / "swe-agent" / "swe-agent__test-repo-i1.traj")
    first_action = turns[0]["tool_calls"][0]
    assert first_action["tool"] == "find_file"
    assert first_action["query"] == '"missing_colon.py"'
    assert "missing_colon.py" in first_action["output"]
    assert all(t["messages"][-1]["role"] == "assistant" for t in turns)


def test_openhands_message_list():
    turns = load_transcript(DEMO / "openhands-sdk" / "fncall-llm-message.json")
    assert turns[0]["messages"][0]["role"] == "system"
    terminal = turns[1]["tool_calls"][0]
    assert terminal["tool"] == "terminal"
    assert terminal["query"]["command"] == "pwd && ls -la"
    assert terminal["output"].startswith("/Users/")


def test_turn_grouping_and_unknown_roles():
    turns = turns_from_messages(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "block text"}]},
            {"role": "assistant", "content": "a"},
            {"role": "narrator", "content": "ignored"},
            {"role": "user", "content": "u2"},
        ]
    )
    assert [[m["role"] for m in t["messages"]] for t in turns] == [
        ["system", "user", "assistant"],
        ["user"],
    ]
    assert turns[0]["messages"][1]["content"] == "block text"
