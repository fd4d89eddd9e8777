"""`manage.py import_transcript` end to end on the test database: real transcripts go
through the agent API in-process; importing again stores nothing new, a grown log appends
only its new turns, and a file in no known format is a clear error."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memoryapp.core.models import Agent, ApiKey, Message, Session, ToolCall, Turn

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("keep_connection_open")]

CLAUDE = Path(__file__).resolve().parent.parent / "demo" / "transcripts" / "claude-code"


def run(*args: object) -> str:
    out = StringIO()
    call_command("import_transcript", *(str(a) for a in args), stdout=out)
    return out.getvalue()


def stored(agent_name: str) -> tuple[int, int, int, int]:
    agent = Agent.objects.get(name=agent_name)
    return (
        Session.objects.filter(agent=agent).count(),
        Turn.objects.filter(session__agent=agent).count(),
        Message.objects.filter(session__agent=agent).count(),
        ToolCall.objects.filter(session__agent=agent).count(),
    )


def conversation(agent_name: str, key: str) -> list[tuple[str, str, str]]:
    messages = Message.objects.filter(session__agent__name=agent_name, session__key=key)
    return list(messages.order_by("seq").values_list("role", "content", "tool_call_id"))


def test_importing_a_claude_code_log_twice_stores_nothing_new():
    log = CLAUDE / "coverage-test-fix.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [e for e in events if e["type"] == "assistant"]
    model_calls = {e["message"]["id"] for e in calls}

    out = run(log, "--agent", "claude")
    assert f"coverage-test-fix: {len(model_calls)} turns sent, 0 skipped" in out
    session = Session.objects.get(agent__name="claude", key="coverage-test-fix")
    assert session.goal == events[1]["message"]["content"]
    assert session.metadata["sessionId"] == events[1]["sessionId"]
    turns = list(session.turns.order_by("iteration"))
    assert len(turns) == len(model_calls)
    first = calls[0]
    usage = first["message"]["usage"]
    assert turns[0].model == first["message"]["model"]
    assert turns[0].usage_source == Turn.UsageSource.REPORTED
    assert turns[0].input_tokens == (
        usage["input_tokens"]
        + usage["cache_creation_input_tokens"]
        + usage["cache_read_input_tokens"]
    )
    assert turns[0].timestamp == datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00"))
    read = ToolCall.objects.filter(session=session, tool="Read").order_by("id").first()
    assert read.details["totalLines"] == 7 and read.file_path.endswith("src/math_utils.py")
    assert read.call_id.startswith("toolu_")
    assert ToolCall.objects.filter(session=session, success=False).count() == 1

    before = stored("claude")
    again = run(log, "--agent", "claude")
    assert stored("claude") == before
    assert f"coverage-test-fix: 0 turns sent, {len(model_calls)} skipped" in again
    # The key issued for the run is gone afterwards.
    assert not ApiKey.objects.filter(agent__name="claude").exists()


def _cut_points(lines: list[str]) -> dict[str, int]:
    events = [json.loads(line) for line in lines]
    points = {}
    for index in range(len(events) // 3, len(events) - 1):
        event, after = events[index], events[index + 1]
        same_call = (
            after["type"] == "assistant"
            and event["type"] == "assistant"
            and after["message"]["id"] == event["message"]["id"]
        )
        is_result = event["type"] == "user" and isinstance(event["message"]["content"], list)
        if is_result and after["type"] == "assistant":
            points.setdefault("after a tool result", index + 1)
        uses_tool = event["type"] == "assistant" and any(
            b["type"] == "tool_use" for b in event["message"]["content"]
        )
        if uses_tool and not same_call:
            points.setdefault("before the tool's output", index + 1)
    return points


LINES = (CLAUDE / "python-to-rust-port.jsonl").read_text().splitlines(keepends=True)


@pytest.mark.parametrize("where", sorted(_cut_points(LINES)))
def test_a_grown_log_appends_only_its_new_turns(tmp_path, where):
    cut = _cut_points(LINES)[where]
    fresh_copy = tmp_path / "fresh" / "live.jsonl"
    fresh_copy.parent.mkdir()
    shutil.copy(CLAUDE / "python-to-rust-port.jsonl", fresh_copy)
    run(fresh_copy, "--agent", "fresh")

    live = tmp_path / "live.jsonl"
    live.write_text("".join(LINES[:cut]))
    run(live, "--agent", "grown")
    first = stored("grown")
    live.write_text("".join(LINES))
    out = run(live, "--agent", "grown")
    grown = stored("grown")

    # The same conversation as importing the whole log at once, nothing repeated.
    assert conversation("grown", "live") == conversation("fresh", "live")
    assert grown[3] == stored("fresh")[3]
    sent = int(out.split("live: ")[1].split(" turns sent")[0])
    assert grown[1] - first[1] == sent
    if where == "after a tool result":
        # The reply to inputs already stored comes as a turn of its own.
        assert grown[1] == stored("fresh")[1] + 1
    else:
        assert grown[1] == stored("fresh")[1]
        assert "got tool outputs or usage after it was imported" in out
    assert run(live, "--agent", "grown").count("0 turns sent") == 1
    assert stored("grown") == grown


def test_a_folder_imports_each_log_and_creates_the_agent():
    out = run(CLAUDE, "--agent", "folder-agent")
    assert stored("folder-agent")[0] == len(list(CLAUDE.glob("*.jsonl"))) == 7
    for log in CLAUDE.glob("*.jsonl"):
        assert f"{log.stem}: " in out
    # SOURCE.txt and LICENSE are not even looked at (only transcript extensions are).
    assert not any(line.startswith(("skipped ", "error: ")) for line in out.splitlines())


def test_unreadable_lines_are_reported_and_the_rest_imported(tmp_path):
    lines = (CLAUDE / "hello-world-script.jsonl").read_text().splitlines()
    odd = tmp_path / "odd.jsonl"
    odd.write_text("\n".join([lines[0], "{not json", *lines[1:], "[]"]) + "\n")
    out = run(odd, "--agent", "odd")
    assert "odd: 4 turns sent, 0 skipped, 2 problems" in out
    assert "  line 2: not JSON" in out
    assert f"  line {len(lines) + 2}: a JSON list, not an event; skipped" in out
    assert stored("odd")[1] == 4


def test_session_names_the_session_and_needs_one_file(tmp_path):
    run(CLAUDE / "hello-world-script.jsonl", "--agent", "named", "--session", "my run")
    assert Session.objects.filter(agent__name="named", key="my run").exists()
    with pytest.raises(CommandError, match="--session names one session"):
        run(CLAUDE, "--agent", "named", "--session", "my run")


def test_an_unknown_format_is_a_clear_error_and_stores_nothing(tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"title": "not a transcript"}')
    with pytest.raises(CommandError) as failure:
        run(notes, "--agent", "unknown")
    assert "could not be imported" in str(failure.value)
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("import_transcript", str(notes), "--agent", "unknown", stdout=out)
    assert f"error: {notes}: not a transcript format the importers know" in out.getvalue()
    assert stored("unknown") == (0, 0, 0, 0)
    assert not ApiKey.objects.filter(agent__name="unknown").exists()
    with pytest.raises(CommandError, match="must be a slug"):
        run(notes, "--agent", "Not A Slug")


def test_the_commands_reach_the_api_under_production_settings(settings):
    """In process, the request must pass the server's own checks: with DEBUG off,
    "localhost" is not an allowed host, and http is redirected to https."""
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["memory.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    out = run(CLAUDE / "coverage-test-fix.jsonl", "--agent", "claude")
    assert "turns sent" in out
    assert stored("claude")[1] > 0
