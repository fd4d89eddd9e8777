"""Transcript importers (agents/importers) on real transcripts: the ones shipped in
demo/transcripts and the excerpts in tests/fixtures/transcripts (each folder says where its
files come from). Expected values are read from the raw files, not from the importer."""

from __future__ import annotations

import copy
import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.importers import (
    TranscriptError,
    UnknownFormat,
    detect_format,
    load_path,
    load_transcript,
    scan_path,
    turns_from_messages,
)
from agents.importers.claude_code import tool_details
from agents.importers.core import (
    MAX_TURN_BYTES,
    ImportedSession,
    finalize,
    session_key,
)
from agents.importers.swe_agent import issue_of

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo" / "transcripts"
CLAUDE = DEMO / "claude-code"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"
CLAUDE_LOGS = sorted(CLAUDE.glob("*.jsonl"))


def raw_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def only(sessions: list[ImportedSession]) -> ImportedSession:
    assert len(sessions) == 1, [s.key for s in sessions]
    return sessions[0]


def records(session: ImportedSession) -> list[dict]:
    return [r for t in session.turns for r in t.get("tool_calls", [])]


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- Claude Code -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", CLAUDE_LOGS, ids=lambda p: p.stem)
def test_claude_code_makes_one_turn_per_model_call(path):
    events = raw_events(path)
    calls = {e["message"]["id"] for e in events if e["type"] == "assistant"}
    tool_uses = [
        b["id"]
        for e in events
        if e["type"] == "assistant"
        for b in e["message"]["content"]
        if b["type"] == "tool_use"
    ]
    session = only(load_transcript(path))
    replies = [t for t in session.turns if t["messages"][-1]["role"] == "assistant"]
    assert len(replies) == len(calls)
    assert [r["call_id"] for r in records(session)] == tool_uses
    # Every tool message answers a call its assistant message made, in an earlier turn.
    offered: set[str] = set()
    for turn in session.turns:
        for message in turn["messages"]:
            if message["role"] == "tool":
                assert message["tool_call_id"] in offered
            offered.update(c["id"] for c in message.get("tool_calls", []))
    assert {m["role"] for t in session.turns for m in t["messages"]} <= {
        "user",
        "assistant",
        "tool",
    }


def test_claude_code_pairs_parallel_tool_calls_with_their_results_by_id():
    path = CLAUDE / "coverage-test-fix.jsonl"
    results = {
        b["tool_use_id"]: b["content"]
        for e in raw_events(path)
        if e["type"] == "user" and isinstance(e["message"]["content"], list)
        for b in e["message"]["content"]
        if b["type"] == "tool_result"
    }
    session = only(load_transcript(path))
    parallel = [t for t in session.turns if len(t.get("tool_calls", [])) == 2]
    assert [[r["tool"] for r in t["tool_calls"]] for t in parallel] == [
        ["Read", "Read"],
        ["Edit", "Edit"],
    ]
    for record in records(session):
        assert record["output"] == results[record["call_id"]]
    reads = parallel[0]
    after = session.turns[session.turns.index(reads) + 1]["messages"]
    assert [m.get("tool_call_id") for m in after[:2]] == [
        c["id"] for c in reads["messages"][-1]["tool_calls"]
    ]
    assert [c["id"] for c in reads["messages"][-1]["tool_calls"]] == [
        r["call_id"] for r in reads["tool_calls"]
    ]


def test_claude_code_merges_a_call_whose_lines_are_interleaved_with_results(tmp_path):
    # Newer Claude Code writes a tool's result before the next tool_use line of the same
    # model call: lines 7 and 8 of the real log swapped.
    lines = (CLAUDE / "coverage-test-fix.jsonl").read_text().splitlines()
    lines[6], lines[7] = lines[7], lines[6]
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text("\n".join(lines) + "\n")
    original = only(load_transcript(CLAUDE / "coverage-test-fix.jsonl"))
    session = only(load_transcript(swapped))
    assert len(session.turns) == len(original.turns)
    assert records(session) == records(original)
    assert session.problems == []


def test_claude_code_keeps_usage_model_and_timestamps():
    path = CLAUDE / "python-to-rust-port.jsonl"
    usage: dict[str, tuple[int, int]] = {}
    first_seen: dict[str, tuple[str, str]] = {}
    for event in raw_events(path):
        if event["type"] != "assistant":
            continue
        message = event["message"]
        u = message["usage"]
        sent = u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
        known = usage.get(message["id"], (0, 0))
        usage[message["id"]] = (max(known[0], sent), max(known[1], u["output_tokens"]))
        first_seen.setdefault(message["id"], (message["model"], event["timestamp"]))
    session = only(load_transcript(path))
    replies = [t for t in session.turns if t["messages"][-1]["role"] == "assistant"]
    assert len(replies) == len(usage)
    for turn, message_id in zip(replies, usage, strict=True):
        assert (turn["usage"]["input_tokens"], turn["usage"]["output_tokens"]) == usage[message_id]
        model, timestamp = first_seen[message_id]
        assert turn["model"] == model
        assert parse_time(turn["timestamp"]) == parse_time(timestamp)


def test_claude_code_read_keeps_its_text_and_reports_line_totals():
    path = CLAUDE / "coverage-test-fix.jsonl"
    totals = {
        e["toolUseResult"]["file"]["filePath"]: e["toolUseResult"]["file"]["totalLines"]
        for e in raw_events(path)
        if isinstance(e.get("toolUseResult"), dict) and "file" in e["toolUseResult"]
    }
    reads = [r for r in records(only(load_transcript(path))) if r["tool"] == "Read"]
    assert len(reads) == len(totals) == 3
    for read in reads:
        assert read["output"].startswith("     1\u2192")
        assert read["query"] == {"file_path": read["file_path"]}
        assert read["details"]["totalLines"] == totals[read["file_path"]]
        assert "content" not in read["details"] and "file" not in read["details"]


def test_claude_code_failed_tool_is_not_a_success():
    path = CLAUDE / "coverage-test-fix.jsonl"
    errors = {
        b["tool_use_id"]
        for e in raw_events(path)
        if e["type"] == "user" and isinstance(e["message"]["content"], list)
        for b in e["message"]["content"]
        if b.get("is_error")
    }
    calls = records(only(load_transcript(path)))
    assert {r["call_id"] for r in calls if r["success"] is False} == errors != set()
    assert all(r["success"] is True for r in calls if r["call_id"] not in errors)
    failed = next(r for r in calls if r["call_id"] in errors)
    # Its toolUseResult is a plain string, kept (cut) as the details' message.
    assert failed["details"]["message"].startswith("Error: Exit code 1")
    assert failed["query"]["command"].startswith("git add .gitignore")


def test_claude_code_edit_and_write_details_count_the_patch():
    path = CLAUDE / "python-to-rust-port.jsonl"
    expected = {}
    for event in raw_events(path):
        result = event.get("toolUseResult")
        if isinstance(result, dict) and "structuredPatch" in result:
            lines = [ln for hunk in result["structuredPatch"] for ln in hunk["lines"]]
            call = event["message"]["content"][0]["tool_use_id"]
            expected[call] = (
                sum(ln.startswith("+") for ln in lines),
                sum(ln.startswith("-") for ln in lines),
                result.get("type"),
            )
    edits = [r for r in records(only(load_transcript(path))) if r["call_id"] in expected]
    assert len(edits) == len(expected) > 0
    for edit in edits:
        details = edit["details"]
        added, removed, kind = expected[edit["call_id"]]
        assert (details["lines_added"], details["lines_removed"]) == (added, removed)
        assert details.get("type") == kind
        assert details["filePath"] == edit["file_path"]
        assert not {"content", "originalFile", "oldString", "newString"} & set(details)


def test_claude_code_meta_and_command_lines_are_messages_but_never_the_goal(tmp_path):
    lines = (CLAUDE / "coverage-test-fix.jsonl").read_text().splitlines()
    meta = lines[15]  # a stop hook's feedback, isMeta
    assert json.loads(meta)["isMeta"] is True
    command = json.loads(lines[1])
    command["message"]["content"] = "<command-name>/clear</command-name>"
    command["uuid"] = "a-slash-command"
    reordered = tmp_path / "meta-first.jsonl"
    reordered.write_text("\n".join([lines[0], meta, json.dumps(command), *lines[1:]]) + "\n")
    session = only(load_transcript(reordered))
    assert session.goal == json.loads(lines[1])["message"]["content"]
    first = session.turns[0]["messages"]
    assert first[0]["content"].startswith("Stop hook feedback")
    assert first[1]["content"] == "<command-name>/clear</command-name>"


def test_claude_code_metadata_names_the_session():
    path = CLAUDE / "hello-world-script.jsonl"
    event = raw_events(path)[1]
    session = only(load_transcript(path))
    assert session.key == "hello-world-script"
    for name in ("sessionId", "cwd", "version"):
        assert session.metadata[name] == event[name]
    assert session.metadata["format"] == "claude-code"
    assert session.metadata["file"] == path.name


def _subagent_lines(session_id: str, agent_id: str) -> list[str]:
    """A real log's events (coverage-test-fix) relabelled as a subagent's sidechain: the
    fields Claude Code uses to link a subagent's log to its session."""
    lines = []
    for event in raw_events(CLAUDE / "coverage-test-fix.jsonl"):
        event.update(sessionId=session_id, isSidechain=True, agentId=agent_id)
        lines.append(json.dumps(event))
    return lines


@pytest.mark.parametrize("layout", ["subagents-folder", "beside", "inline"])
def test_claude_code_subagents_become_sessions_with_their_parent(tmp_path, layout):
    main = CLAUDE / "python-to-rust-port.jsonl"
    task = next(
        e
        for e in raw_events(main)
        if isinstance(e.get("toolUseResult"), dict) and "agentId" in e["toolUseResult"]
    )
    session_id, agent_id = task["sessionId"], task["toolUseResult"]["agentId"]
    task_call = task["message"]["content"][0]["tool_use_id"]
    log = tmp_path / f"{session_id}.jsonl"
    shutil.copy(main, log)
    sub_lines = _subagent_lines(session_id, agent_id)
    if layout == "subagents-folder":
        folder = tmp_path / session_id / "subagents"
        folder.mkdir(parents=True)
        (folder / f"agent-{agent_id}.jsonl").write_text("\n".join(sub_lines) + "\n")
    elif layout == "beside":
        (tmp_path / f"agent-{agent_id}.jsonl").write_text("\n".join(sub_lines) + "\n")
    else:
        with log.open("a") as handle:
            handle.write("\n".join(sub_lines) + "\n")

    main_session, subagent = load_transcript(log)
    assert main_session.key == session_id
    assert subagent.key == f"{session_id}:agent-{agent_id}"
    assert subagent.metadata["parent_session"] == session_id
    assert subagent.metadata["parent_tool_call"] == task_call
    expected = only(load_transcript(CLAUDE / "coverage-test-fix.jsonl"))
    assert [t["messages"] for t in subagent.turns] == [t["messages"] for t in expected.turns]
    assert subagent.goal == expected.goal
    task_record = next(r for r in records(main_session) if r["call_id"] == task_call)
    assert task_record["details"]["agentId"] == agent_id
    assert task_record["details"]["totalToolUseCount"] == task["toolUseResult"]["totalToolUseCount"]
    # A folder import reads the subagent with its session, not a second time on its own.
    assert sorted(s.key for s in load_path(tmp_path)) == sorted([main_session.key, subagent.key])


def test_a_subagent_log_read_alone_names_its_parent(tmp_path):
    log = tmp_path / "agent-a1b2c3.jsonl"
    log.write_text("\n".join(_subagent_lines("0f1e2d3c-parent", "a1b2c3")) + "\n")
    session = only(load_transcript(log))
    assert session.key == "0f1e2d3c-parent:agent-a1b2c3"
    assert session.metadata["parent_session"] == "0f1e2d3c-parent"


def test_claude_codes_compaction_call_is_no_session_of_its_own(tmp_path):
    """Claude Code logs its own compaction of a long conversation like a subagent's,
    `subagents/agent-acompact-<id>.jsonl`: it was imported as a session beside the real
    ones. It is counted on the main session instead; a real subagent still is one."""
    main = CLAUDE / "hello-world-script.jsonl"
    session_id = raw_events(main)[1]["sessionId"]
    log = tmp_path / f"{session_id}.jsonl"
    shutil.copy(main, log)
    folder = tmp_path / session_id / "subagents"
    folder.mkdir(parents=True)
    for agent_id in ("acompact-7f3e2a", "a1b2c3"):
        lines = _subagent_lines(session_id, agent_id)
        (folder / f"agent-{agent_id}.jsonl").write_text("\n".join(lines) + "\n")
    main_session, subagent = load_transcript(log)
    assert subagent.key == f"{session_id}:agent-a1b2c3"
    assert main_session.metadata["compactions"] == 1
    assert sorted(s.key for s in load_path(tmp_path)) == sorted([main_session.key, subagent.key])
    assert load_transcript(folder / "agent-acompact-7f3e2a.jsonl") == []  # read alone


def test_garbage_and_odd_lines_are_reported_by_number_and_skipped(tmp_path):
    clean = CLAUDE / "hello-world-script.jsonl"
    lines = clean.read_text().splitlines()
    odd = [
        "this is not json",
        "[1, 2, 3]",
        '{"type": "assistant"}',
        '{"type": "user", "message": {"content": 5}}',
        '{"type": "assistant", "message": {"content": [{"type": "tool_use"}], "usage": "x"}}',
        '{"type": "user", "message": {"content": [{"type": "tool_result", '
        '"tool_use_id": "nope"}]}}',
        '{"truncated": ',
        "[" * 100_000,
        "null",
    ]
    mixed = [lines[0], lines[1], *odd[:4], *lines[2:], *odd[4:]]
    path = tmp_path / "odd.jsonl"
    path.write_bytes("\n".join(mixed).encode() + b"\n\xff\xfe broken bytes\n")
    session = only(load_transcript(path))
    # Every odd line but one is reported by its number; the one readable odd event (a
    # tool_use with no id or name) is kept, under placeholder names.
    unreadable = [mixed.index(line) + 1 for line in odd if line != odd[4]]
    assert [number for number, _ in session.problems] == [*unreadable, len(mixed) + 1]
    assert "a tool_use this log does not have (nope)" in dict(session.problems)[unreadable[4]]
    placeholder = records(session)[-1]
    assert placeholder["tool"] == "unknown" and placeholder["call_id"].startswith("toolu_line")
    original = only(load_transcript(clean))
    ours = [t["messages"] for t in session.turns if t["messages"][-1]["role"] == "assistant"]
    assert ours[: len(original.turns)] == [t["messages"] for t in original.turns]


def test_a_line_cut_off_mid_write_is_a_problem_not_a_crash(tmp_path):
    text = (CLAUDE / "stop-hook-fast-path-clean.jsonl").read_text()
    path = tmp_path / "live.jsonl"
    path.write_text(text[: len(text) - 40])  # the last line is half written
    session = only(load_transcript(path))
    assert session.problems and session.problems[0][0] == len(text.splitlines())


def test_tool_details_stay_small_on_large_and_unexpected_shapes():
    huge = {"mode": "files_with_matches", "numFiles": 10_000, "filenames": ["a.ex"] * 10_000}
    grep = tool_details("Grep", huge)
    assert grep["filenames_total"] == 10_000 and len(grep["filenames"]) == 50
    search = tool_details(
        "WebSearch",
        {
            "query": "phoenix liveview streams",
            "results": [
                {"tool_use_id": "srv", "content": [{"title": f"t{i}", "url": f"https://x/{i}"}]}
                for i in range(40)
            ]
            + ["A summary the model wrote."],
        },
    )
    assert search["results_total"] == 40 and search["results"][0] == {
        "title": "t0",
        "url": "https://x/0",
    }
    todos = tool_details(
        "TodoWrite",
        {"newTodos": [{"status": "completed"}, {"status": "pending"}, {"status": "pending"}]},
    )
    assert todos == {"todos": 3, "completed": 1, "pending": 2}
    bash = tool_details("Bash", {"stdout": "x" * 50_000, "stderr": "e" * 5000, "interrupted": 0})
    assert "stdout" not in bash and len(bash["stderr"]) == 300
    for odd in ("Error: boom", [{"type": "text"}], 7, None, {"file": "not a dict"}):
        details = tool_details("Read", odd)
        assert details is None or len(json.dumps(details)) < 8000
    unknown = tool_details("mcp__db__query", {f"k{i}": "v" * 1000 for i in range(100)})
    assert len(json.dumps(unknown, ensure_ascii=False)) <= 8000


# --- SWE-agent -----------------------------------------------------------------------------


def test_swe_agent_function_calling_trajectory():
    path = DEMO / "swe-agent" / "function_calling_simple.traj"
    turns = only(load_transcript(path)).turns
    raw = json.loads(path.read_text())
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
    session = only(load_transcript(DEMO / "swe-agent" / "swe-agent__test-repo-i1.traj"))
    turns = session.turns
    first_action = turns[0]["tool_calls"][0]
    assert first_action["tool"] == "find_file"
    assert first_action["query"] == '"missing_colon.py"'
    assert "missing_colon.py" in first_action["output"]
    assert all(t["messages"][-1]["role"] == "assistant" for t in turns)
    # The issue, without the framing every SWE-agent run's first message shares.
    assert session.goal.startswith("SyntaxError: invalid syntax\nI'm running `missing_colon.py`")
    assert "INSTRUCTIONS" not in session.goal and "\r" not in session.goal


def test_swe_agent_runs_are_told_apart_by_their_issue():
    goals = [
        only(load_transcript(DEMO / "swe-agent" / name)).goal.splitlines()[0]
        for name in ("swe-agent__test-repo-i1.traj", "pydicom__pydicom-1458.traj")
    ]
    assert goals == [
        "SyntaxError: invalid syntax",
        "Pixel Representation attribute should be optional for pixel data handler",
    ]
    # A first message without the framing is the goal as it is.
    assert issue_of("Fix the flaky upload test") == "Fix the flaky upload test"


def test_swe_agent_model_comes_from_the_run_config():
    path = DEMO / "swe-agent" / "function_calling_simple.traj"
    raw = json.loads(path.read_text())
    assert "replay_config" not in raw  # a demonstration: no model to name
    session = only(load_transcript(path))
    assert "model" not in session.metadata and all("model" not in t for t in session.turns)


def test_openhands_sdk_message_list():
    turns = only(load_transcript(DEMO / "openhands-sdk" / "fncall-llm-message.json")).turns
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


# --- ToolBench -----------------------------------------------------------------------------


def test_toolbench_answer_uses_the_longest_chain_and_reads_success_from_error():
    path = FIXTURES / "toolbench" / "lisbon_DFS_woFilter_w2.json"
    answer = json.loads(path.read_text())["answer_generation"]
    longest = max(answer["train_messages"], key=len)
    session = only(load_transcript(path))
    assert session.goal == answer["query"]
    assert session.metadata["finish_type"] == "give_answer"
    calls = [m for m in longest if m["role"] == "assistant" and m.get("function_call")]
    results = [m for m in longest if m["role"] == "function"]
    assert [r["tool"] for r in records(session)] == [m["function_call"]["name"] for m in calls]
    errors = [bool(json.loads(m["content"])["error"]) for m in results]
    answered = records(session)[: len(results)]
    assert [r["success"] is False for r in answered] == errors
    assert [r["output"] for r in answered] == [m["content"] for m in results]
    assert answered[0]["query"] == json.loads(calls[0]["function_call"]["arguments"])
    # The thought written as its own message belongs to the model call that follows it.
    first_reply = session.turns[0]["messages"][-1]
    assert first_reply["content"] == longest[2]["content"]
    assert first_reply["tool_calls"][0]["function"]["name"] == calls[0]["function_call"]["name"]
    # Each function result answers the call before it, by a call id made for it.
    for turn, following in zip(session.turns, session.turns[1:], strict=False):
        made = [c["id"] for c in turn["messages"][-1].get("tool_calls", [])]
        answers = [m["tool_call_id"] for m in following["messages"] if m["role"] == "tool"]
        assert answers == made[: len(answers)]


def test_toolllama_conversations_parse_thought_action_and_input():
    path = FIXTURES / "toolbench" / "toolllama_dfs_train.json"
    raw = json.loads(path.read_text())
    sessions = load_transcript(path)
    assert [s.key for s in sessions] == ["toolllama_dfs_train:1", "toolllama_dfs_train:2"]
    first = sessions[0]
    assert first.metadata["id"] == raw[0]["id"]
    assert first.goal == raw[0]["conversations"][1]["value"].strip()
    weather, exchange, finish = records(first)
    assert weather["tool"] == "current_weather_for_open_weather_map"
    assert weather["query"] == {"q": "Lisbon,PT", "units": "metric"}
    assert (weather["success"], exchange["success"]) == (True, False)
    assert finish["query"] == {"return_type": "give_up_and_restart"}
    assert first.turns[0]["messages"][-1]["content"] == (
        "I should look up the current weather in Lisbon first."
    )


def test_tooleval_converted_answer_follows_its_chain():
    path = FIXTURES / "toolbench" / "converted_answer_CoT.json"
    raw = json.loads(path.read_text())
    session = only(load_transcript(path))
    assert session.goal == raw["query"]
    weather, finish = records(session)
    assert weather["query"] == {"q": "Lisbon,PT"} and weather["success"] is True
    assert finish["tool"] == "Finish"


# --- OpenHands -----------------------------------------------------------------------------


def test_openhands_trajectory_pairs_actions_and_observations():
    path = FIXTURES / "openhands" / "basic_gui_mode.json"
    events = json.loads(path.read_text())
    actions = [e for e in events if e.get("tool_call_metadata") and "action" in e]
    observations = {
        e["tool_call_metadata"]["tool_call_id"]: e
        for e in events
        if e.get("tool_call_metadata") and "observation" in e
    }
    session = only(load_transcript(path))
    assert session.goal == next(e for e in events if e.get("source") == "user")["args"]["content"]
    calls = records(session)
    assert [c["call_id"] for c in calls] == [
        a["tool_call_metadata"]["tool_call_id"] for a in actions
    ]
    assert [c["tool"] for c in calls] == [a["tool_call_metadata"]["function_name"] for a in actions]
    for call in calls:
        observation = observations[call["call_id"]]
        # An empty output (mkdir printed nothing) keeps OpenHands' summary of the run.
        assert call["output"] == (observation["content"] or observation["message"])
        code = observation["extras"].get("metadata", {}).get("exit_code")
        # -1: still running when the agent moved on (a server it started), so unknown.
        assert call["success"] is (None if code is None or code < 0 else code == 0)
    bash = calls[0]
    assert bash["query"] == {"command": "mkdir -p /workspace/todo-app"}
    response = actions[0]["tool_call_metadata"]["model_response"]
    assert session.turns[0]["usage"] == {
        "input_tokens": response["usage"]["prompt_tokens"],
        "output_tokens": response["usage"]["completion_tokens"],
    }
    assert session.turns[0]["model"] == response["model"]


def test_openhands_resolver_output_pairs_by_order():
    path = FIXTURES / "openhands" / "output.jsonl"
    run = json.loads(path.read_text().splitlines()[0])
    session = only(load_transcript(path))
    assert session.key == f"output:{run['issue']['owner']}_{run['issue']['repo']}:issue-5"
    assert session.goal == run["instruction"]
    actions = [e for e in run["history"] if e.get("action") in ("run", "run_ipython")]
    outputs = [e for e in run["history"] if e.get("observation") in ("run", "run_ipython")]
    calls = records(session)
    assert [c["tool"] for c in calls[: len(actions)]] == [
        {"run": "execute_bash", "run_ipython": "execute_ipython_cell"}[a["action"]] for a in actions
    ]
    assert calls[0]["query"] == {"command": actions[0]["command"]}
    assert [c["output"] for c in calls[: len(outputs)]] == [o["content"] for o in outputs]
    assert session.turns[0]["messages"][0] == {"role": "user", "content": run["instruction"]}


def test_openhands_sdk_events_report_an_observation_without_its_action():
    path = FIXTURES / "openhands-sdk" / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    session = only(load_transcript(path))
    actions = [e for e in events if e["kind"] == "ActionEvent"]
    assert [c["call_id"] for c in records(session)] == [a["tool_call_id"] for a in actions]
    assert {c["tool"] for c in records(session)} == {"terminal"}
    assert records(session)[0]["success"] is False  # is_error
    orphans = [
        i + 1
        for i, e in enumerate(events)
        if e["kind"] == "ObservationEvent"
        and e["tool_call_id"] not in {a["tool_call_id"] for a in actions}
    ]
    assert [n for n, _ in session.problems] == orphans
    assert session.metadata["model"] == "litellm_proxy/minimax-m2.7"


def test_openhands_sdk_event_kinds_and_their_outcomes(tmp_path):
    # Written here in the SDK's event shapes: no shipped log has all of these kinds.
    def call(call_id, name, arguments, response):
        return {
            "kind": "ActionEvent",
            "tool_call_id": call_id,
            "tool_name": name,
            "llm_response_id": response,
            "tool_call": {"id": call_id, "name": name, "arguments": json.dumps(arguments)},
        }

    user = {"role": "user", "content": [{"type": "text", "text": "List the files"}]}
    done = {"role": "assistant", "content": [{"type": "text", "text": "Done"}]}
    events = [
        {
            "kind": "SystemPromptEvent",
            "system_prompt": {"type": "text", "text": "You are an agent."},
        },
        {"kind": "MessageEvent", "source": "user", "llm_message": user},
        {**call("c1", "terminal", {"command": "ls"}, "r1"), "thought": "I will list them"},
        call("c2", "terminal", {"command": "false"}, "r1"),
        call("c3", "file_editor", {"path": "/a.py"}, "r2"),
        {
            "kind": "ObservationEvent",
            "tool_call_id": "c1",
            "observation": {"kind": "TerminalObservation", "content": "a.py", "exit_code": 0},
        },
        {"kind": "AgentErrorEvent", "tool_call_id": "c2", "error": "bad arguments"},
        {"kind": "UserRejectObservation", "tool_call_id": "c3"},
        {"kind": "MessageEvent", "source": "agent", "llm_message": done},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events))
    session = only(load_transcript(path))
    assert session.goal == "List the files" and not session.problems
    first = session.turns[0]
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant"]
    assert first["messages"][-1]["content"] == "I will list them"
    assert [len(t["tool_calls"]) for t in session.turns[:2]] == [2, 1]  # by llm_response_id
    assert [(c["call_id"], c["success"], c["output"], c["details"]) for c in records(session)] == [
        ("c1", True, "a.py", {"observation": "TerminalObservation", "exit_code": 0}),
        ("c2", False, "bad arguments", {"observation": "AgentErrorEvent"}),
        ("c3", False, "rejected", {"observation": "UserRejectObservation"}),
    ]
    assert records(session)[2]["file_path"] == "/a.py"
    assert session.turns[-1]["messages"][-1] == {"role": "assistant", "content": "Done"}


# --- aider ---------------------------------------------------------------------------------


def test_aider_history_makes_one_session_per_run():
    path = FIXTURES / "aider" / "chat-history.md"
    text = path.read_text()
    starts = [
        ln.removeprefix("# aider chat started at ")
        for ln in text.splitlines()
        if ln.startswith("# aider chat started at ")
    ]
    sessions = {s.key: s for s in load_transcript(path)}
    # Runs that only printed their banner make no session.
    assert set(sessions) <= {"chat-history:preamble"} | {
        f"chat-history:{s.replace(' ', 'T')}" for s in starts
    }
    run = sessions["chat-history:2024-08-05T19:33:32"]
    assert run.goal == "Use the Spinner instead of the inlined custom spinner"
    assert run.metadata["version"] == "0.47.2-dev"
    assert run.metadata["files"] == ["aider/utils.py"]
    reply = run.turns[0]
    assert reply["messages"][0] == {"role": "user", "content": run.goal}
    assert reply["messages"][-1]["content"].startswith("Certainly! I'll modify the `run_install`")
    assert reply["usage"] == {"input_tokens": 5244, "output_tokens": 604}
    assert reply["model"] == "claude-3-5-sonnet-20240620"
    assert parse_time(reply["timestamp"]).strftime("%Y-%m-%d %H:%M:%S") == "2024-08-05 19:33:32"
    edit, commit = reply["tool_calls"]
    assert (edit["tool"], edit["file_path"], edit["success"]) == ("edit", "aider/utils.py", True)
    assert commit["details"] == {"commit": "fd43cd4"}
    # What aider printed is the next turn's input; its banner is not a message at all.
    printed = run.turns[1]["messages"][0]
    assert printed["name"] == "aider" and printed["content"].startswith("Tokens: 5,244 sent")
    assert not any("Aider v0.47" in m["content"] for t in run.turns for m in t["messages"])


def test_aider_failed_edits_and_abbreviated_token_counts():
    sessions = load_transcript(FIXTURES / "aider" / "chat-history.md")
    failed = [r for s in sessions for r in records(s) if r["success"] is False]
    assert failed and all(r["tool"] == "edit" for r in failed)
    assert "tests/basic/test_main.py" in {r["file_path"] for r in failed}
    newer = next(s for s in sessions if s.key == "chat-history:2024-08-20T09:36:29")
    assert newer.turns[0]["usage"] == {"input_tokens": 1600, "output_tokens": 51}


# --- formats, folders and bounds -----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (CLAUDE / "hello-world-script.jsonl", "claude-code"),
        (DEMO / "swe-agent" / "pydicom__pydicom-1458.traj", "swe-agent"),
        (DEMO / "openhands-sdk" / "nonfncall-llm-message.json", "openai"),
        (FIXTURES / "toolbench" / "lisbon_DFS_woFilter_w2.json", "openai"),
        (FIXTURES / "openhands" / "wrong_initial_state.json", "openhands"),
        (FIXTURES / "openhands" / "output.jsonl", "openhands"),
        (FIXTURES / "openhands-sdk" / "events.jsonl", "openhands"),
        (FIXTURES / "aider" / "chat-history.md", "aider"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_format_detection(path, expected):
    assert detect_format(path) == expected


def test_an_unknown_format_is_an_error_naming_the_file(tmp_path):
    other = tmp_path / "package.json"
    other.write_text('{"name": "left-pad", "version": "1.3.0"}')
    with pytest.raises(UnknownFormat, match="package.json"):
        load_transcript(other)
    broken = tmp_path / "broken.json"
    broken.write_text('{"history": [')
    with pytest.raises(TranscriptError, match="broken.json: not valid JSON"):
        load_transcript(broken)
    with pytest.raises(TranscriptError, match="unknown format 'word'"):
        load_transcript(CLAUDE / "hello-world-script.jsonl", format="word")
    with pytest.raises(TranscriptError, match="not a SWE-agent trajectory"):
        load_transcript(other, format="swe-agent")


def test_a_folder_imports_every_transcript_and_skips_the_rest(tmp_path):
    result = scan_path(DEMO)
    files = [p for p in DEMO.rglob("*") if p.suffix in (".jsonl", ".json", ".traj")]
    assert not result.failed and not result.skipped
    assert sorted(s.metadata["file"] for s in result.sessions) == sorted(p.name for p in files)
    assert {s.key for s in result.sessions} >= {p.stem for p in CLAUDE_LOGS}
    # Same names in two folders keep apart by their paths; notes are skipped, not errors.
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(
            DEMO / "swe-agent" / "function_calling_simple.traj", tmp_path / folder / "x.traj"
        )
    (tmp_path / "notes.md").write_text("# Notes\n")
    (tmp_path / "broken.json").write_text("{")
    result = scan_path(tmp_path)
    assert sorted(s.key for s in result.sessions) == ["a:x", "b:x"]
    assert [p.name for p, _ in result.skipped] == ["notes.md"]
    assert [p.name for p, _ in result.failed] == ["broken.json"]


def test_finalize_brings_a_turn_within_the_api_bounds():
    session = ImportedSession(
        key="runs/2024\n07",
        turns=[
            {
                "messages": [
                    {"role": "user", "content": "a\x00b"},
                    {"role": "narrator", "content": "dropped"},
                    {"role": "assistant", "content": "x" * (MAX_TURN_BYTES * 2)},
                ],
                "timestamp": "2999-01-01T00:00:00Z",
                "usage": {"input_tokens": -1, "output_tokens": 3},
                "tool_calls": [
                    {"tool": "", "query": {"k": "\ud800"}, "details": {"x": "y" * 9000}}
                ],
            },
            {"messages": [{"role": "user", "content": str(i)} for i in range(1500)]},
        ],
    )
    turns = finalize(session).turns
    assert session.key == "runs_2024_07"
    first = turns[0]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert first["messages"][0]["content"] == "ab"
    assert len(json.dumps(first, ensure_ascii=False).encode()) <= MAX_TURN_BYTES
    assert "cut by the importer" in first["messages"][1]["content"]
    assert "timestamp" not in first and "usage" not in first
    assert first["tool_calls"][0]["tool"] == "unknown"
    assert "details" not in first["tool_calls"][0]
    json.dumps(first["tool_calls"][0]["query"]).encode("utf-8")  # no lone surrogate left
    assert [len(t["messages"]) for t in turns[1:]] == [1000, 500]
    assert any("cut to fit" in reason for _, reason in session.problems)


def test_session_keys_are_valid_and_distinct():
    assert session_key("a/b") == "a_b"
    assert session_key("..") != ".."
    long_one, long_two = session_key("k" * 300 + "1"), session_key("k" * 300 + "2")
    assert len(long_one) == 200 and long_one != long_two


def test_inline_sidechains_without_ids_make_one_session_per_root(tmp_path):
    # The oldest logs wrote subagents into the main file, with no agent id: each chain
    # starting at a line with no parent is one subagent.
    log = tmp_path / "old.jsonl"
    shutil.copy(CLAUDE / "hello-world-script.jsonl", log)
    with log.open("a") as handle:
        for source in ("coverage-test-fix", "stop-hook-fast-path-clean"):
            for event in raw_events(CLAUDE / f"{source}.jsonl"):
                event["isSidechain"] = True
                handle.write(json.dumps(event) + "\n")
    main, first, second = load_transcript(log)
    assert [first.key, second.key] == ["old:sidechain-1", "old:sidechain-2"]
    assert first.metadata["parent_session"] == second.metadata["parent_session"] == "old"
    for sub, source in ((first, "coverage-test-fix"), (second, "stop-hook-fast-path-clean")):
        expected = only(load_transcript(CLAUDE / f"{source}.jsonl"))
        assert [t["messages"] for t in sub.turns] == [t["messages"] for t in expected.turns]
    assert [t["messages"] for t in main.turns] == [
        t["messages"] for t in only(load_transcript(CLAUDE / "hello-world-script.jsonl")).turns
    ]


def test_tooleval_answers_keyed_by_query_id_make_a_session_each(tmp_path):
    converted = json.loads((FIXTURES / "toolbench" / "converted_answer_CoT.json").read_text())
    keyed = tmp_path / "G1_instruction.json"
    keyed.write_text(json.dumps({"10001": converted, "10002": converted}))
    sessions = load_transcript(keyed)
    assert [s.key for s in sessions] == ["G1_instruction:10001", "G1_instruction:10002"]
    assert all(s.goal == converted["query"] for s in sessions)


def test_a_byte_order_mark_does_not_hide_the_format(tmp_path):
    for source in (
        CLAUDE / "hello-world-script.jsonl",
        DEMO / "swe-agent" / "function_calling_simple.traj",
    ):
        marked = tmp_path / source.name
        marked.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
        assert only(load_transcript(marked)).turns == only(load_transcript(source)).turns
        assert only(load_transcript(marked)).problems == []


def test_a_file_with_no_conversation_says_so(tmp_path):
    queue_operation = (CLAUDE / "hello-world-script.jsonl").read_text().splitlines()[0]
    assert json.loads(queue_operation)["type"] == "queue-operation"
    empty = tmp_path / "empty.jsonl"
    empty.write_text(queue_operation + "\n")
    session = only(load_transcript(empty))
    assert session.turns == []
    assert session.problems == [(0, "no conversation found: nothing to import")]


def test_a_line_written_twice_is_read_once(tmp_path):
    lines = (CLAUDE / "coverage-test-fix.jsonl").read_text().splitlines()
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text("\n".join(line for line in lines for _ in range(2)) + "\n")
    original = only(load_transcript(CLAUDE / "coverage-test-fix.jsonl"))
    assert only(load_transcript(doubled)).turns == original.turns


ODD_VALUES = st.sampled_from(
    [None, True, 0, -5, 1.5, "", "\x00", "\ud800", [], {}, [1], {"a": 1}, [{"type": "image"}]]
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _paths(item, (*prefix, name))
    elif isinstance(value, list):
        for index, item in enumerate(value[:4]):
            yield from _paths(item, (*prefix, index))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_odd_value_anywhere_in_a_real_log_still_gives_turns_the_api_accepts(tmp_path, data):
    from memoryapp.api.schemas import SessionIn, TurnIn

    events = raw_events(CLAUDE / "coverage-test-fix.jsonl")
    for _ in range(data.draw(st.integers(1, 6))):
        event = data.draw(st.sampled_from(events))
        path = data.draw(st.sampled_from(list(_paths(event))[1:]))
        holder = event
        for step in path[:-1]:
            holder = holder[step]
        holder[path[-1]] = copy.deepcopy(data.draw(ODD_VALUES))  # never share (and mutate) one
    log = tmp_path / "mutated.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in events))
    for session in load_transcript(log, format="claude-code"):
        SessionIn.model_validate({"goal": session.goal, "metadata": session.metadata})
        for turn in session.turns:
            TurnIn.model_validate(json.loads(json.dumps(turn, ensure_ascii=False)))


def test_subagent_messages_relayed_as_progress_stand_in_for_a_missing_log(tmp_path):
    # Newer Claude Code also relays each subagent message into the main log as a progress
    # event; real subagent events (coverage-test-fix's) wrapped that way.
    main = CLAUDE / "python-to-rust-port.jsonl"
    log = tmp_path / "main.jsonl"
    shutil.copy(main, log)
    with log.open("a") as handle:
        for event in raw_events(CLAUDE / "coverage-test-fix.jsonl"):
            if event["type"] in ("user", "assistant"):
                wrapped = {
                    "type": "progress",
                    "data": {"type": "agent_progress", "agentId": "ab81802", "message": event},
                    "parentToolUseID": "toolu_01PKfvC84zTHnFnxjuoazGo5",
                    "timestamp": event["timestamp"],
                    "sessionId": "c7d3d95c",
                }
                handle.write(json.dumps(wrapped) + "\n")
    main_session, subagent = load_transcript(log)
    assert [t["messages"] for t in main_session.turns] == [
        t["messages"] for t in only(load_transcript(main)).turns
    ]
    assert subagent.key == "main:agent-ab81802"
    assert subagent.metadata["parent_tool_call"] == "toolu_01PKfvC84zTHnFnxjuoazGo5"
    expected = only(load_transcript(CLAUDE / "coverage-test-fix.jsonl"))
    assert [t["messages"] for t in subagent.turns] == [t["messages"] for t in expected.turns]
    # With the subagent's own log present, the relayed copy is not read.
    folder = tmp_path / "main" / "subagents"
    folder.mkdir(parents=True)
    (folder / "agent-ab81802.jsonl").write_text(
        "\n".join(_subagent_lines("c7d3d95c", "ab81802")[:3]) + "\n"
    )
    assert len(load_transcript(log)[1].turns) < len(expected.turns)


@pytest.mark.parametrize(
    "action,call",
    [
        ("open tests/missing_colon.py 10", ("open", "tests/missing_colon.py 10")),
        ('find_file "numpy_handler.py"', ("find_file", '"numpy_handler.py"')),
        ("python reproduce_bug.py", ("bash", "python reproduce_bug.py")),
        ("rm reproduce_bug.py", ("bash", "rm reproduce_bug.py")),
        ("pip install -e .", ("bash", "pip install -e .")),
    ],
)
def test_swe_agent_actions_are_its_own_commands_or_shell_lines(action, call):
    from agents.importers.openai import action_call

    assert action_call(action) == call


def test_output_sent_as_a_user_message_is_named_so_nobody_takes_it_for_the_person():
    from agents.importers.openai import turns_from_messages

    turns = turns_from_messages(
        [
            {"role": "user", "content": "Here is a demonstration of it.", "is_demo": True},
            {"role": "user", "content": "Fix the bug in parser.py"},
            {"role": "assistant", "content": "Let me look.", "action": "open parser.py"},
            {"role": "user", "content": "[File: /repo/parser.py (3 lines total)]\n1:x = 1"},
            {"role": "assistant", "content": "Now the tests.", "action": "pytest -q"},
            {"role": "user", "content": "EXECUTION RESULT of [terminal]: 1 passed"},
        ]
    )
    users = [m for t in turns for m in t["messages"] if m["role"] == "user"]
    assert [m.get("name") for m in users] == ["demonstration", None, "observation", "observation"]
