"""Live capture of Claude Code sessions (agents/capture.py, agents/watch.py).

The hook runs as Claude Code runs it, a subprocess with the hook's JSON on stdin, against
a live server, on real Claude Code logs (demo/transcripts/claude-code) that grow between
calls. What is stored after each call is checked against the raw lines (a model call is
stored once the model was called again) and, at the end, against importing the whole log
at once: the same conversation, tool calls, outputs and usage, nothing twice.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

from agents.capture import REPLY_WAIT_SECONDS, Level, Target, capture_file, sendable
from agents.client import MemoryClient
from agents.importers import load_transcript
from memoryapp.core.models import Agent, ApiKey, Message, Session, ToolCall, Turn

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = ROOT / "demo" / "transcripts" / "claude-code"
COVERAGE = CLAUDE / "coverage-test-fix.jsonl"  # parallel tool calls, calls over several lines
PORT = CLAUDE / "python-to-rust-port.jsonl"  # a Task subagent; ends with a tool's output
# Starting Python on a busy shared machine: what a bound may take beyond the hook's own.
STARTUP_SLACK = 2.5
# The hook's budget in tests that count what one call stored (a call out of time leaves
# the rest to the next one, tested on its own); the tests of the bound set their own.
ROOMY_TIMEOUT = 30.0
# How long a test waits for a process to get somewhere before it fails: only a bound on a
# failure (a passing test waits for what it waits for, however slow the machine).
FAILURE_DEADLINE = 60.0


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def model_calls(lines: list[str]) -> list[str]:
    """The model calls in these lines, in order (one per `message.id`)."""
    calls: list[str] = []
    for line in lines:
        event = json.loads(line)
        if event["type"] == "assistant" and event["message"]["id"] not in calls:
            calls.append(event["message"]["id"])
    return calls


def last_reply(lines: list[str]) -> str:
    """The text of the latest model call, as Claude Code gives it to a Stop hook."""
    latest = model_calls(lines)[-1]
    texts = []
    for line in lines:
        event = json.loads(line)
        if event["type"] == "assistant" and event["message"]["id"] == latest:
            texts += [b["text"] for b in event["message"]["content"] if b["type"] == "text"]
    return "\n".join(texts)


def finished_calls(lines: list[str]) -> int:
    """Model calls the model was called again after: their turns can no longer change."""
    return max(len(model_calls(lines)) - 1, 0)


@dataclass
class Server:
    url: str
    key: str
    agent: str = "claude"

    def target(self) -> Target:
        return Target(self.url, self.key)


@pytest.fixture
def server(live_server, transactional_db) -> Server:
    agent = Agent.objects.create(name="claude")
    return Server(live_server.url, ApiKey.issue(agent, name="hook")[1])


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    """What a test starts in the background (`hook`, `watch` with `background=`): at its
    end, passed or failed, each process still running is killed, and each is reaped."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        with process:  # closes its pipes and waits for it
            if process.poll() is None:
                process.kill()


def hook(
    path: Path,
    event: str = "PostToolUse",
    *,
    url: str,
    key: str | None,
    state: Path,
    timeout: float | None = None,
    stdin: str | None = None,
    args: tuple[str, ...] = (),
    background: list[subprocess.Popen] | None = None,
    **fields: str,
):
    """Run the hook as Claude Code does: a command, the event's JSON on stdin (`fields`
    added to it, such as `last_assistant_message`). With `background` (the `processes`
    fixture), started and added to it, not waited for."""
    payload = {
        "session_id": path.stem,
        "transcript_path": str(path),
        "cwd": str(path.parent),
        "permission_mode": "default",
        "hook_event_name": event,
    }
    if event.startswith("PostToolUse"):
        payload |= {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t"}
    payload |= fields
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYAPP_")}
    env |= {"MEMORYAPP_URL": url, "MEMORYAPP_CAPTURE_STATE": str(state)}
    if key is not None:
        env["MEMORYAPP_KEY"] = key
    env["MEMORYAPP_CAPTURE_TIMEOUT"] = str(timeout or ROOMY_TIMEOUT)
    command = [sys.executable, "-m", "agents.capture", *args]
    text = json.dumps(payload) if stdin is None else stdin
    if background is not None:
        with (state.parent / f"payload-{time.monotonic_ns()}.json").open("w+") as payload_file:
            payload_file.write(text)
            payload_file.seek(0)
            process = subprocess.Popen(
                command,
                stdin=payload_file,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=path.parent,
            )
        background.append(process)
        return process
    started = time.monotonic()
    run = subprocess.run(
        command, input=text, capture_output=True, text=True, env=env, cwd=path.parent, timeout=60
    )
    run.elapsed = time.monotonic() - started
    return run


def snapshot(agent: str, key: str) -> dict[str, list]:
    """Everything stored for a session that an import decides."""
    rows = {"session__agent__name": agent, "session__key": key}
    return {
        "messages": list(
            Message.objects.filter(**rows)
            .order_by("seq")
            .values_list("role", "content", "tool_call_id", "tool_calls")
        ),
        "turns": list(
            Turn.objects.filter(**rows)
            .order_by("iteration")
            .values_list("message_count", "input_tokens", "output_tokens", "model", "timestamp")
        ),
        "tool_calls": list(
            ToolCall.objects.filter(**rows)
            .order_by("id")
            .values_list("tool", "call_id", "query", "output_excerpt", "success", "details")
        ),
    }


def turns_stored(key: str, agent: str = "claude") -> int:
    return Turn.objects.filter(session__agent__name=agent, session__key=key).count()


def imported(path: Path, agent: str = "fresh") -> str:
    """Import the whole log at once with `manage.py import_transcript`: the reference."""
    out = io.StringIO()
    call_command("import_transcript", str(path), "--agent", agent, stdout=out)
    return out.getvalue()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- what may be sent from a growing log (no server) ----------------------------------------


@pytest.mark.parametrize("path", sorted(CLAUDE.glob("*.jsonl")), ids=lambda p: p.stem)
def test_at_every_length_of_a_log_the_finished_turns_are_those_of_the_whole_log(tmp_path, path):
    lines = lines_of(path)
    whole = load_transcript(path)[0].turns
    log = tmp_path / path.name
    for n in range(len(lines) + 1):
        # Each whole line, and each line half written (Claude Code still writing it).
        for tail in ("", lines[n][: len(lines[n]) // 2] if n < len(lines) else ""):
            log.write_text("".join(lines[:n]) + tail)
            session = load_transcript(log, "claude-code")[0]
            settled = sendable(session, Level.SETTLED).turns
            assert len(settled) == finished_calls(lines[:n])
            assert settled == whole[: len(settled)]
    # The whole log: at Stop the last reply goes too, inputs still waiting only at the end.
    session = load_transcript(path)[0]
    replied = sendable(session, Level.REPLIED).turns
    assert len(replied) == len(model_calls(lines))
    assert replied == whole[: len(replied)]
    assert sendable(session, Level.ALL).turns == whole


def test_a_model_call_whose_tool_has_not_answered_is_not_sent_even_at_stop(tmp_path):
    lines = lines_of(COVERAGE)
    # Up to a line that calls a tool, before the line with its result.
    cut = next(
        n + 1
        for n, line in enumerate(lines)
        if '"tool_use"' in line and json.loads(lines[n + 1])["type"] == "user"
    )
    log = tmp_path / "live.jsonl"
    log.write_text("".join(lines[:cut]))
    session = load_transcript(log)[0]
    assert len(sendable(session, Level.REPLIED).turns) == len(model_calls(lines[:cut])) - 1
    log.write_text("".join(lines[: cut + 1]))  # the result arrives
    session = load_transcript(log)[0]
    assert len(sendable(session, Level.REPLIED).turns) == len(model_calls(lines[:cut]))


def test_at_stop_the_reply_goes_only_once_the_log_holds_it(tmp_path):
    lines = lines_of(COVERAGE)
    session = load_transcript(COVERAGE)[0]
    calls = len(model_calls(lines))
    assert len(sendable(session, Level.REPLIED, last_reply(lines)).turns) == calls
    assert len(sendable(session, Level.REPLIED, "All tests pass now.").turns) == calls - 1
    # Claude Code ran the hook before writing its reply: the log ends one call earlier, and
    # that call's turn waits too (nothing says yet that the model has finished with it).
    log = tmp_path / "live.jsonl"
    log.write_text("".join(lines[:-1]))
    early = load_transcript(log)[0]
    assert len(sendable(early, Level.REPLIED, last_reply(lines)).turns) == calls - 2
    assert len(sendable(early, Level.REPLIED).turns) == calls - 1  # older Claude Code


# --- the hook against a live server -------------------------------------------------------


def test_at_every_line_of_a_growing_log_only_finished_turns_are_stored(server, tmp_path):
    lines = lines_of(COVERAGE)
    log = tmp_path / "coverage-test-fix.jsonl"
    state = tmp_path / "state"
    with MemoryClient(server.url, server.key) as client:
        for n in range(1, len(lines) + 1):
            log.write_text("".join(lines[:n]))
            outcome = capture_file(client, server.target(), log, state_dir=state)
            assert outcome.error is None
            assert turns_stored(log.stem) == finished_calls(lines[:n]), n
        capture_file(client, server.target(), log, level=Level.REPLIED, state_dir=state)
    imported(COVERAGE)
    assert snapshot("claude", log.stem) == snapshot("fresh", log.stem)
    assert turns_stored(log.stem) == len(model_calls(lines))


def _task(lines: list[str]) -> tuple[str, str, int]:
    """The session id, the Task call's subagent id and the line with its result."""
    for number, line in enumerate(lines):
        event = json.loads(line)
        result = event.get("toolUseResult")
        if isinstance(result, dict) and "agentId" in result:
            return event["sessionId"], result["agentId"], number
    raise AssertionError("no Task call")


def _subagent_lines(session_id: str, agent_id: str) -> list[str]:
    """A real log (coverage-test-fix) relabelled as that Task's subagent's log."""
    lines = []
    for line in lines_of(COVERAGE):
        event = json.loads(line)
        event.update(sessionId=session_id, isSidechain=True, agentId=agent_id)
        lines.append(json.dumps(event) + "\n")
    return lines


def test_the_hook_command_sends_a_growing_session_and_its_subagent_once(server, tmp_path):
    lines = lines_of(PORT)
    session_id, agent_id, task_line = _task(lines)
    project = tmp_path / "projects" / "-work-port"
    project.mkdir(parents=True)
    log = project / f"{session_id}.jsonl"  # as Claude Code names it
    subagent_log = project / session_id / "subagents" / f"agent-{agent_id}.jsonl"
    subagent_log.parent.mkdir(parents=True)
    sub_lines = _subagent_lines(session_id, agent_id)
    sub_key = f"{session_id}:agent-{agent_id}"
    state = tmp_path / "state"

    def call(event: str = "PostToolUse", **fields: str):
        run = hook(log, event, url=server.url, key=server.key, state=state, **fields)
        assert (run.returncode, run.stdout) == (0, "")
        assert run.stderr == ""
        return run

    # The subagent runs inside the Task call: its log grows while the session's waits.
    log.write_text("".join(lines[:task_line]))
    for n in (5, 17, len(sub_lines)):
        subagent_log.write_text("".join(sub_lines[:n]))
        call()
        assert turns_stored(sub_key) == finished_calls(sub_lines[:n])
        assert turns_stored(session_id) == finished_calls(lines[:task_line])
    call("SubagentStop")  # older Claude Code: no agent_id, so no telling which one stopped
    assert turns_stored(sub_key) == finished_calls(sub_lines)
    call("SubagentStop", agent_id=agent_id, last_assistant_message=last_reply(sub_lines))
    assert turns_stored(sub_key) == len(model_calls(sub_lines))

    # The session goes on: in the middle of a model call, before a tool's output, after it.
    for n in (task_line + 1, task_line + 12, task_line + 13, task_line + 30, len(lines)):
        log.write_text("".join(lines[:n]))
        call()
        assert turns_stored(session_id) == finished_calls(lines[:n])
    call("Stop", last_assistant_message=last_reply(lines))
    assert turns_stored(session_id) == len(model_calls(lines))
    # The log ends with a tool's output the model never answered: only the end sends it.
    call("SessionEnd")

    reference = tmp_path / "reference"
    shutil.copytree(project, reference)
    imported(reference / log.name)
    for key in (session_id, sub_key):
        assert snapshot("claude", key) == snapshot("fresh", key)
    # The hook's keys are the importer's: importing the same log afterwards adds nothing.
    out = imported(log, agent="claude")
    assert f"{session_id}: 0 turns sent" in out and f"{sub_key}: 0 turns sent" in out
    assert snapshot("claude", session_id) == snapshot("fresh", session_id)


def test_a_stop_hook_run_before_the_reply_is_written_waits_for_it_or_leaves_it(server, tmp_path):
    lines = lines_of(COVERAGE)
    reply = last_reply(lines)
    log = tmp_path / "coverage-test-fix.jsonl"
    state = tmp_path / "state"

    def stop():
        run = hook(
            log, "Stop", url=server.url, key=server.key, state=state, last_assistant_message=reply
        )
        assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
        return run

    # The reply is not written while the hook waits: it is left, within the hook's bound.
    log.write_text("".join(lines[:-1]))
    assert stop().elapsed < 1 + REPLY_WAIT_SECONDS + STARTUP_SLACK
    assert turns_stored(log.stem) == finished_calls(lines[:-1])
    # Written 0.4 s after the hook starts, as when Claude Code runs the hook first.
    late = threading.Timer(0.4, lambda: log.write_text("".join(lines)))
    late.start()
    stop()
    late.join()
    assert turns_stored(log.stem) == len(model_calls(lines))
    imported(COVERAGE)
    assert snapshot("claude", log.stem) == snapshot("fresh", log.stem)


def test_concurrent_hook_calls_store_nothing_twice(server, tmp_path, processes):
    lines = lines_of(COVERAGE)
    log = tmp_path / "coverage-test-fix.jsonl"
    log.write_text("")
    # Two state folders: calls that share one take turns; the others only have the server.
    states = [tmp_path / "state-a", tmp_path / "state-b"]

    def grow() -> None:
        with log.open("a") as handle:
            for line in lines:
                handle.write(line)
                handle.flush()
                time.sleep(0.15)

    def finish(wave: list[subprocess.Popen]) -> None:
        for process in wave:
            stdout, stderr = process.communicate(timeout=60)
            assert (process.returncode, stdout) == (0, ""), stderr
        calls.extend(wave)

    calls: list[subprocess.Popen] = []
    writer = threading.Thread(target=grow)
    writer.start()
    # Waves of three calls at once while the log grows (two of them share a state folder).
    while writer.is_alive():
        finish(
            [
                hook(log, url=server.url, key=server.key, state=state, background=processes)
                for state in (*states, states[0])
            ]
        )
    writer.join()
    # And the whole log's Stop, six times at once.
    finish(
        [
            hook(
                log,
                "Stop",
                url=server.url,
                key=server.key,
                state=states[i % 2],
                background=processes,
            )
            for i in range(6)
        ]
    )
    assert len(calls) >= 12

    imported(COVERAGE)
    assert snapshot("claude", log.stem) == snapshot("fresh", log.stem)


def test_with_the_server_down_or_hanging_the_hook_exits_0_in_time_and_catches_up(server, tmp_path):
    lines = lines_of(COVERAGE)
    log = tmp_path / "coverage-test-fix.jsonl"
    state = tmp_path / "state"

    log.write_text("".join(lines[:12]))
    down = hook(
        log, url=f"http://127.0.0.1:{closed_port()}", key=server.key, state=state, timeout=3
    )
    assert (down.returncode, down.stdout) == (0, "")
    assert "cannot reach" in down.stderr and "catches up" in down.stderr
    assert down.elapsed < 3 + STARTUP_SLACK

    # A server that takes the connection and never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        log.write_text("".join(lines[:25]))
        hung = hook(log, url=url, key=server.key, state=state, timeout=1.5)
    assert (hung.returncode, hung.stdout) == (0, "")
    assert hung.elapsed < 1.5 + STARTUP_SLACK
    assert "catches up" in hung.stderr
    assert (state / "capture.log").read_text().count("catches up") == 2
    assert not Session.objects.exists()

    # The server is back: the next call sends everything missed meanwhile.
    log.write_text("".join(lines[:30]))
    back = hook(log, url=server.url, key=server.key, state=state)
    assert (back.returncode, back.stdout, back.stderr) == (0, "", "")
    assert turns_stored(log.stem) == finished_calls(lines[:30])
    log.write_text("".join(lines))
    hook(log, "Stop", url=server.url, key=server.key, state=state)
    imported(COVERAGE)
    assert snapshot("claude", log.stem) == snapshot("fresh", log.stem)


class Recording(httpx.BaseTransport):
    """The real HTTP transport, with each request written down (and slowed, if asked)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.inner = httpx.HTTPTransport()
        self.requests: list[str] = []
        self.delay = delay

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        if self.delay and request.method == "POST":
            time.sleep(self.delay)
        return self.inner.handle_request(request)


def test_an_unchanged_log_costs_no_request_and_a_lost_state_file_nothing_twice(server, tmp_path):
    lines = lines_of(COVERAGE)
    log = tmp_path / "coverage-test-fix.jsonl"
    log.write_text("".join(lines[:21]))  # ends with a tool's output
    state = tmp_path / "state"
    recording = Recording()
    with MemoryClient(server.url, server.key, transport=recording) as client:
        first = capture_file(client, server.target(), log, state_dir=state)
        assert first.sent == finished_calls(lines[:21]) > 0
        recording.requests.clear()
        again = capture_file(client, server.target(), log, state_dir=state)
        assert again.unchanged and recording.requests == []

        before = snapshot("claude", log.stem)
        for file in state.glob("*.json"):
            file.unlink()
        lost = capture_file(client, server.target(), log, state_dir=state)
        assert lost.sent == 0 and not lost.unchanged
        assert recording.requests == [f"GET /api/v1/sessions/{log.stem}"]
        assert snapshot("claude", log.stem) == before

        # Stop asks for more than was sent at the same length: the log is read again.
        stop = capture_file(client, server.target(), log, level=Level.REPLIED, state_dir=state)
        assert stop.sent == 1 and turns_stored(log.stem) == len(model_calls(lines[:21]))


def test_a_call_out_of_time_records_how_far_it_got_and_the_next_goes_on(server, tmp_path):
    lines = lines_of(COVERAGE)
    log = tmp_path / "coverage-test-fix.jsonl"
    log.write_text("".join(lines))
    state = tmp_path / "state"
    with MemoryClient(server.url, server.key, transport=Recording(delay=0.3)) as client:
        short = capture_file(
            client, server.target(), log, state_dir=state, deadline=time.monotonic() + 1.5
        )
    result = short.results[0]
    assert 0 < result.sent < finished_calls(lines) and result.left
    assert "left for the next call" in short.line()
    session = Session.objects.get(key=log.stem)
    assert session.metadata["import"]["turns"] == result.sent == turns_stored(log.stem)
    with MemoryClient(server.url, server.key) as client:
        rest = capture_file(client, server.target(), log, level=Level.REPLIED, state_dir=state)
    assert rest.results[0].skipped == result.sent
    imported(COVERAGE)
    assert snapshot("claude", log.stem) == snapshot("fresh", log.stem)


@pytest.mark.parametrize(
    "stdin,args,key,says",
    [
        ("", (), "k", "not the hook's JSON"),
        ("{not json", (), "k", "not the hook's JSON"),
        ("[]", (), "k", "no transcript_path"),
        ('{"hook_event_name": "Stop"}', (), "k", "no transcript_path"),
        (None, (), None, "no API key"),
        (None, ("--no-such-option",), "k", "unrecognized arguments"),
    ],
)
def test_a_misconfigured_or_odd_call_never_blocks_the_agent(tmp_path, stdin, args, key, says):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(lines_of(COVERAGE)))
    url = f"http://127.0.0.1:{closed_port()}"
    run = hook(log, url=url, key=key, state=tmp_path / "state", stdin=stdin, args=args)
    assert (run.returncode, run.stdout) == (0, "")
    assert says in run.stderr


def test_a_log_not_written_yet_is_left_for_a_later_call(tmp_path):
    state = tmp_path / "state"
    url = f"http://127.0.0.1:{closed_port()}"
    run = hook(tmp_path / "absent.jsonl", url=url, key="k", state=state)
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
    assert "no such file (yet)" in (state / "capture.log").read_text()


# --- python -m agents.watch ---------------------------------------------------------------


@contextmanager
def sigint_as_from_a_terminal() -> Iterator[None]:
    """A child started meanwhile starts with SIGINT at its default, as a program run from a
    terminal does, so Ctrl-C reaches it (Python makes it a KeyboardInterrupt). A child
    inherits an ignored SIGINT, and pytest run in a script's background (`pytest &`) has it
    ignored; caught here, it is reset to the default by the child's exec."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def watch(
    folder: Path,
    server_url: str,
    key: str,
    state: Path,
    *args: str,
    background: list[subprocess.Popen] | None = None,
):
    """`python -m agents.watch`, waited for; with `background` (the `processes` fixture),
    started as from a terminal and added to it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYAPP_")}
    env |= {"MEMORYAPP_URL": server_url, "MEMORYAPP_KEY": key}
    command = [sys.executable, "-m", "agents.watch", str(folder), "--state-dir", str(state)]
    if background is not None:
        with sigint_as_from_a_terminal():
            process = subprocess.Popen(
                [*command, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        background.append(process)
        return process
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=120)


def _age(path: Path, seconds: float) -> None:
    moment = time.time() - seconds
    os.utime(path, (moment, moment))


def test_watch_once_sends_each_session_of_a_folder(server, tmp_path):
    projects = tmp_path / "projects"
    (projects / "-work-a").mkdir(parents=True)
    (projects / "-work-b").mkdir()
    done = projects / "-work-a" / COVERAGE.name
    shutil.copy(COVERAGE, done)
    _age(done, 3600)  # finished an hour ago
    port_lines = lines_of(PORT)
    live = projects / "-work-b" / PORT.name
    live.write_text("".join(port_lines[:40]))  # being written now
    (projects / "-work-b" / "notes.jsonl").write_text('{"title": "not a session log"}\n')
    state = tmp_path / "state"

    run = watch(projects, server.url, server.key, state, "--once")
    assert run.returncode == 0, run.stderr
    assert f"{COVERAGE.stem}: {len(model_calls(lines_of(COVERAGE)))} turns sent" in run.stdout
    assert turns_stored(PORT.stem) == finished_calls(port_lines[:40])
    assert set(Session.objects.values_list("key", flat=True)) == {COVERAGE.stem, PORT.stem}

    # The server goes away while the log grows; back, the next pass catches up.
    live.write_text("".join(port_lines))
    down = watch(projects, f"http://127.0.0.1:{closed_port()}", server.key, state, "--once")
    assert down.returncode == 1 and "cannot reach" in down.stdout
    run = watch(projects, server.url, server.key, state, "--once", "--quiet", "0")
    assert run.returncode == 0, run.stderr
    assert turns_stored(PORT.stem) == len(model_calls(port_lines))
    assert watch(projects, server.url, server.key, state, "--once").stdout == ""
    imported(done)
    assert snapshot("claude", COVERAGE.stem) == snapshot("fresh", COVERAGE.stem)


def test_watch_follows_a_growing_log_and_stops_cleanly_on_ctrl_c(server, tmp_path, processes):
    lines = lines_of(COVERAGE)
    folder = tmp_path / "project"
    folder.mkdir()
    log = folder / COVERAGE.name
    log.write_text("".join(lines[:10]))
    # However slow the machine, the latest model call never goes for the log being quiet.
    options = ("--interval", "0.2", "--quiet", "3600")
    process = watch(
        folder, server.url, server.key, tmp_path / "state", *options, background=processes
    )

    def stored(expected: int) -> None:
        deadline = time.monotonic() + FAILURE_DEADLINE
        while (count := turns_stored(log.stem)) < expected:
            if process.poll() is not None:
                pytest.fail(f"the watcher exited ({process.returncode}): {process.communicate()}")
            assert time.monotonic() < deadline, f"{count} of {expected} turns stored in time"
            time.sleep(0.05)
        assert count == expected

    stored(finished_calls(lines[:10]))
    with log.open("a") as handle:
        handle.write("".join(lines[10:]))
    stored(finished_calls(lines))
    process.send_signal(signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=FAILURE_DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the watcher did not stop within {FAILURE_DEADLINE:g} s of a SIGINT")
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert stdout.strip().splitlines()[-1] == "stopped"
    assert turns_stored(log.stem) == finished_calls(lines)  # nothing more before it stopped


def test_a_log_the_server_refuses_does_not_hold_the_others_back(tmp_path, monkeypatch):
    """A 4xx is about that log (too large, say): the pass goes on with the next ones; an
    unreachable server (or a 5xx, 429, 401) stops the pass, since every log would meet it."""
    from agents import watch as watch_module
    from agents.capture import Capture
    from agents.importers.send import SendResult

    folder = tmp_path / "logs"
    folder.mkdir()
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        shutil.copy(COVERAGE, folder / name)
    outcomes = {
        "a.jsonl": Capture(folder / "a.jsonl", error="the server refused it (413)"),
        "b.jsonl": Capture(folder / "b.jsonl", results=[SendResult("b", sent=2)]),
        "c.jsonl": Capture(folder / "c.jsonl", error="cannot reach it", server_down=True),
    }
    asked: list[str] = []

    def capture_file(client, target, path, **options):
        asked.append(path.name)
        return outcomes[path.name]

    monkeypatch.setattr(watch_module, "capture_file", capture_file)
    said: list[str] = []
    watcher = watch_module.Watcher(None, None, folder, state_dir=tmp_path / "s", write=said.append)
    assert watcher.run_once() == 2
    assert asked == ["a.jsonl", "b.jsonl", "c.jsonl"]
    assert "413" in said[0] and "cannot reach" in said[-1]
    assert watcher.server_down
