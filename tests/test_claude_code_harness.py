"""Claude Code's harness text is not the person's words or a tool's result: background-task
notifications never become a goal or a task, TaskOutput's envelope is unwrapped to the
command's own output, and an output Claude Code saved to a file is read where the
transcript points, or said to be a preview only. The envelopes follow what Claude Code
writes (seen in public transcripts): `<task-notification>` user lines, TaskOutput's
`<retrieval_status>…<output>` text, `<persisted-output>` previews."""

from __future__ import annotations

import json

from agents.importers import load_transcript
from memoryapp.lib.extraction import finding_from_tool
from memoryapp.lib.extraction.context import task_from_prompt

NOTIFICATION = (
    "<task-notification>\n<task-id>b27a792</task-id>\n<tool-use-id>toolu_012</tool-use-id>\n"
    "<output-file>/tmp/claude-1000/tasks/b27a792.output</output-file>\n"
    "<status>completed</status>\n"
    '<summary>Background command "Run transcript renderer tests" completed (exit code 0)'
    "</summary>\n</task-notification>\n"
    "Read the output file to retrieve the result: /tmp/claude-1000/tasks/b27a792.output"
)
TASK_OUTPUT = (
    "<retrieval_status>success</retrieval_status>\n\n<task_id>b27a792</task_id>\n\n"
    "<task_type>local_bash</task_type>\n\n<status>completed</status>\n\n"
    "<exit_code>1</exit_code>\n\n<output>\n"
    "============ test session starts ============\ncollected 16 items\n\n"
    "tests/test_render.py ..............FF\n"
    "=========== 2 failed, 14 passed in 0.52s ===========\n</output>"
)
RUNNING = (
    "<retrieval_status>timeout</retrieval_status>\n\n<task_id>b27a792</task_id>\n\n"
    "<task_type>local_bash</task_type>\n\n<status>running</status>\n\n<output>\n"
    "collected 16 items\n</output>"
)


def persisted(path: str, preview: str) -> str:
    return (
        f"<persisted-output>\nOutput too large (36.8KB). Full output saved to: {path}\n\n"
        f"Preview (first 2KB):\n{preview}\n</persisted-output>"
    )


def test_a_background_task_notification_is_never_a_task():
    assert task_from_prompt(NOTIFICATION) == ""
    assert task_from_prompt("Fix the failing renderer tests please") != ""


def test_task_output_is_the_background_command_s_own_result():
    details = {"task": {"description": "Run transcript renderer tests", "status": "completed"}}
    found = finding_from_tool("TaskOutput", '{"task_id": "b27a792"}', TASK_OUTPUT, details=details)
    assert found.kind == "shell" and found.success is False
    assert found.fact.startswith("background task Run transcript renderer tests exit 1")
    assert "2 failed, 14 passed" in found.fact and "retrieval_status" not in found.fact

    still = finding_from_tool("TaskOutput", '{"task_id": "b27a792"}', RUNNING)
    assert still.fact.startswith("background task b27a792 still running") and still.success


def test_a_persisted_output_not_at_hand_is_said_to_be_a_preview():
    output = persisted("/nowhere/tool-results/b1.txt", "vite v5 building\nsrc/a.js 1kB")
    found = finding_from_tool("Bash", "npm run build", output)
    assert "only a preview of 36.8KB was seen" in found.fact
    assert "persisted-output" not in found.fact


def _event(kind, content, n, **extra):
    return {
        "type": kind,
        "uuid": f"u{n}",
        "sessionId": "s-harness",
        "cwd": "/repo",
        "timestamp": f"2026-11-30T10:00:{n:02d}Z",
        "message": {
            "role": kind,
            "content": content,
            **({"model": "m"} if kind == "assistant" else {}),
        },
        **extra,
    }


def test_the_importer_reads_a_persisted_output_where_the_transcript_points(tmp_path):
    full = tmp_path / "tool-results" / "b1.txt"
    full.parent.mkdir()
    full.write_text("building...\n" * 3000 + 'error: Could not resolve "js/app.js"\n')
    preview = "building...\nbuilding..."
    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "node build.js"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": persisted(str(full), preview)}
    use2 = {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "node x.js"}}
    gone = persisted(str(tmp_path / "gone.txt"), "only this")
    result2 = {"type": "tool_result", "tool_use_id": "t2", "content": gone}
    events = [
        _event("user", NOTIFICATION, 1),
        _event("user", "Fix the asset build, it fails on app.js", 2),
        _event("assistant", [use], 3),
        _event("user", [result], 4),
        _event("assistant", [use2], 5),
        _event("user", [result2], 6),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (session,) = load_transcript(path)
    assert session.goal == "Fix the asset build, it fails on app.js"
    calls = [c for t in session.turns for c in t.get("tool_calls", [])]
    assert calls[0]["output"].rstrip().endswith('error: Could not resolve "js/app.js"')
    assert len(calls[0]["output"]) <= 64 * 1024 + 10
    assert calls[1]["output"] == gone  # not there: the preview, as the transcript has it
    tool_messages = [m for t in session.turns for m in t["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"] == persisted(str(full), preview)  # what the model saw
    fact = finding_from_tool("Bash", "node build.js", calls[0]["output"]).fact
    assert 'Could not resolve "js/app.js"' in fact
