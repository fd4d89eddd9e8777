"""Extraction and TTL cleanup, their task bodies called as plain functions."""

import json
import threading
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from memoryapp import celery_app
from memoryapp.core import cleanup, dispatch, workers
from memoryapp.core.models import (
    Agent,
    ApiKey,
    CleanupRun,
    ContextItem,
    ExtractionJob,
    Finding,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    Message,
    PendingToolOutput,
    Session,
    Subtask,
    ToolCall,
    Turn,
)
from memoryapp.core.tasks import extract_turn
from tests.conftest import TOOL_OUTPUTS

BASE = "/api/v1"
OUTPUTS = TOOL_OUTPUTS


@pytest.fixture(autouse=True)
def _tasks_in_process(in_process_tasks):
    """Unit tests run tasks in-process (tests/conftest.py); the integration tests use a
    real worker."""


def real_turn():
    """A SWE-agent turn with a real file read, and text that names the file."""
    call = OUTPUTS["swe_open_ctf_python"]
    return {
        "messages": [
            {"role": "user", "content": "Find the flag."},
            {"role": "assistant", "content": "I'm working on `chall.py` first."},
        ],
        "tool_calls": [
            {"tool": call["tool"], "query": call["query"], "output": call["output"] * 3}
        ],
    }


def counts():
    return (
        Finding.objects.count(),
        ContextItem.objects.count(),
        MemoryEvent.objects.count(),
        PendingToolOutput.objects.count(),
    )


# --- extraction ------------------------------------------------------------------------


@pytest.mark.django_db
def test_extraction_runs_after_the_turn_commits(api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = api.post(BASE + "/sessions/s1/turns", real_turn())
    assert response.status_code == 201
    job = ExtractionJob.objects.get()
    assert job.status == "queued" and job.finished_at is None  # nothing ran inside
    assert PendingToolOutput.objects.count() == 1  # the whole output waits for extraction
    assert len(callbacks) == 1
    callbacks[0]()
    job.refresh_from_db()
    assert job.status == "done" and job.findings_added == 1 and job.context_items_set == 1
    finding = Finding.objects.get()
    assert finding.source == "extracted" and finding.step == 1 and finding.kind == "read"
    assert finding.fact.startswith("76 lines; defines TimeCapsule, MyTCPRequestHandler")
    # Provenance: the turn, the message (no call id here: the turn's assistant message)
    # and the tool call it came from; the call keeps its own fact.
    call = ToolCall.objects.get()
    assert (finding.turn.iteration, finding.message.seq, finding.tool_call) == (1, 2, call)
    assert (call.kind, call.fact, call.finding) == ("read", finding.fact, finding)
    # The task the user gave, with its evidence; never a path the agent only mentioned.
    item = ContextItem.objects.get()
    assert (item.key, item.value, item.source) == ("current_task", "Find the flag.", "inferred")
    # The evidence links to the user's message (seq 1), not the turn's last one.
    assert item.evidence == [{"turn": 1, "seq": 1, "what": "the first prompt"}]
    assert PendingToolOutput.objects.count() == 0  # whole output gone, finding kept
    assert len(ToolCall.objects.get().output_excerpt) == 2000


@pytest.mark.django_db
def test_running_a_job_twice_changes_nothing(api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        api.post(BASE + "/sessions/s1/turns", real_turn())
    job = ExtractionJob.objects.get()
    before = counts()
    assert workers.run_extraction(job.pk) == "skipped"
    # Even forced to run again, the same extraction writes nothing new.
    ExtractionJob.objects.filter(pk=job.pk).update(status="pending")
    assert extract_turn.apply(args=(job.pk,)).get() == "done"
    assert counts() == before
    assert workers.run_extraction(999_999) == "missing"


@pytest.mark.django_db
def test_a_turn_without_tool_calls_is_extracted_in_few_statements(
    api, django_capture_on_commit_callbacks
):
    """Most turns have no tool calls: their query is not made (the job's lock reads
    whether there are any), and the job marked done and the session's evidence tally
    are one write each."""
    from django.test.utils import CaptureQueriesContext

    with django_capture_on_commit_callbacks(execute=False):
        api.post(BASE + "/sessions/s1/turns", {"messages": [
            {"role": "user", "content": "Fix the failing test in tests/test_parser.py."},
            {"role": "assistant", "content": "Reading tests/test_parser.py first."}]})  # fmt: skip
    job = ExtractionJob.objects.get()
    started = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        assert workers.run_extraction(job.pk) == "done"
    ended = timezone.now()
    statements = [q["sql"] for q in queries.captured_queries]
    assert not [s for s in statements if '"core_toolcall"."id"' in s]
    writes = [s for s in statements if s.startswith("UPDATE")]
    assert sorted(w.split()[1] for w in writes) == ['"core_extractionjob"', '"core_session"']
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error) == ("done", 1, "")
    assert started <= job.finished_at <= ended and job.context_items_set == 1
    session = Session.objects.get(key="s1")
    assert session.evidence["turns"] == [1]
    item = ContextItem.objects.get(session=session)
    assert (item.key, item.value) == (
        "current_task",
        "Fix the failing test in tests/test_parser.py.",
    )
    # Run again (the broker delivered it twice): counted as an attempt, nothing else.
    ExtractionJob.objects.filter(pk=job.pk).update(status="queued")
    assert workers.run_extraction(job.pk) == "done"
    job.refresh_from_db()
    assert job.attempts == 2 and Session.objects.get(key="s1").evidence == session.evidence


@pytest.mark.django_db
@pytest.mark.parametrize("count", [1, 3])
def test_a_turn_with_tool_calls_still_reads_them_and_writes_each_ones_fact(
    api, django_capture_on_commit_callbacks, count
):
    """Each call gets its kind, fact, success and finding (one statement sent for all of
    them, not the ORM's bulk update)."""
    from django.test.utils import CaptureQueriesContext

    turn = real_turn()
    commands = [("pytest -q", "3 passed in 0.1s"), ("ls src", "app.py\nutil.py"),
                ("git status", "fatal: not a git repository")][:count]  # fmt: skip
    if count > 1:
        turn["tool_calls"] = [
            {"tool": "bash", "query": q, "output": o, "success": not o.startswith("fatal")}
            for q, o in commands
        ]
    with django_capture_on_commit_callbacks(execute=False):
        api.post(BASE + "/sessions/s1/turns", turn)
    job = ExtractionJob.objects.get()
    with CaptureQueriesContext(connection) as queries:
        assert workers.run_extraction(job.pk) == "done"
    statements = [q["sql"] for q in queries.captured_queries]
    assert [s for s in statements if 'FROM "core_toolcall"' in s]
    assert not [s for s in statements if "CASE WHEN" in s]
    calls = list(ToolCall.objects.order_by("id"))
    assert len(calls) == count == Finding.objects.count()
    for call in calls:
        finding = Finding.objects.get(tool_call=call)
        assert call.finding == finding and call.fact == finding.fact and call.fact
        assert (call.kind, call.fact_success) == (finding.kind, finding.success)
    if count > 1:
        assert [c.fact_success for c in calls] == [True, True, False]


@pytest.mark.django_db
@pytest.mark.parametrize("prepare", [True, False])
def test_the_calls_facts_mix_nulls_and_values_in_one_statement(
    api, django_capture_on_commit_callbacks, settings, prepare
):
    """_store_facts sends one statement for every call (executemany): a call whose
    success is unknown and that has no finding (NULLs) beside calls with both, in either
    order, each written as given (a prepared statement's parameter types come from its
    first row); prepared on a kept PostgreSQL connection and not (conn_max_age=0, a
    pooler: MEMORYAPP_PREPARE_STATEMENTS off takes the same path)."""
    settings.MEMORYAPP_PREPARE_STATEMENTS = prepare
    turn = real_turn()
    turn["tool_calls"] = [
        {"tool": "bash", "query": f"echo {i}", "output": str(i), "success": True} for i in range(4)
    ]
    with django_capture_on_commit_callbacks(execute=False):
        api.post(BASE + "/sessions/s1/turns", turn)
    assert workers.run_extraction(ExtractionJob.objects.get().pk) == "done"
    calls = list(ToolCall.objects.order_by("id"))
    findings = [c.finding_id for c in calls]
    assert None not in findings
    given = [
        ("shell", "first unknown", None, None),
        ("shell", "second known", False, findings[1]),
        ("search", "third unknown", None, None),
        ("shell", "fourth known", True, findings[3]),
    ]
    for repeat in (given, given[::-1]):
        for call, (kind, fact, success, finding) in zip(calls, repeat, strict=True):
            call.kind, call.fact, call.fact_success, call.finding_id = kind, fact, success, finding
        workers._store_facts(calls)
        stored = list(
            ToolCall.objects.order_by("id").values_list(
                "kind", "fact", "fact_success", "finding_id"
            )
        )
        assert stored == repeat


@pytest.mark.django_db
def test_extraction_never_overrides_people_or_stronger_values(
    api, django_capture_on_commit_callbacks
):
    api.put(BASE + "/sessions/s1", {})
    api.put(
        BASE + "/sessions/s1/context-items/current_task", {"value": "Pwn it", "confidence": 0.3}
    )
    call = OUTPUTS["swe_open_ctf_python"]
    session = Session.objects.get()
    Finding.objects.create(
        session=session,
        tool="open",
        query=call["query"],
        fact="checked by a person",
        source="manual",
    )
    with django_capture_on_commit_callbacks(execute=True):
        api.post(BASE + "/sessions/s1/turns", real_turn())
    assert ContextItem.objects.get().value == "Pwn it"
    assert Finding.objects.get().fact == "checked by a person"
    assert ExtractionJob.objects.get().status == "done"


@pytest.mark.django_db
def test_findings_from_openai_style_tool_messages(api, django_capture_on_commit_callbacks):
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "terminal", "arguments": json.dumps({"command": "python hello.py"})},
    }
    with django_capture_on_commit_callbacks(execute=True):
        api.post(
            BASE + "/sessions/s1/turns",
            {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]},
        )
        api.post(
            BASE + "/sessions/s1/turns",
            {
                "messages": [
                    {
                        "role": "tool",
                        "tool_call_id": "call_1",
                        "content": OUTPUTS["oh_terminal_python"]["output"],
                    }
                ]
            },
        )
    finding = Finding.objects.get()
    assert (finding.tool, finding.query) == ("terminal", "python hello.py")
    assert finding.fact == "`python hello.py` exit 0: Hello, World!"


@pytest.mark.django_db
def test_a_failing_extraction_is_recorded_and_never_fails_ingest(
    api, monkeypatch, django_capture_on_commit_callbacks
):
    def broken(*args, **kwargs):
        raise ValueError("extractor bug")

    monkeypatch.setattr(workers, "extract", broken)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(BASE + "/sessions/s1/turns", real_turn())
    assert response.status_code == 201
    job = ExtractionJob.objects.get()
    assert job.status == "failed" and job.last_error == "ValueError: extractor bug"
    assert Message.objects.count() == 2  # the turn itself is stored
    assert Finding.objects.count() == 0 and ContextItem.objects.count() == 0  # rolled back


@pytest.mark.django_db
def test_broker_down_ingest_succeeds_and_the_sweep_catches_up(
    api, monkeypatch, django_capture_on_commit_callbacks
):
    calls = []

    def unreachable(*args, **kwargs):
        calls.append(args)
        raise BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(extract_turn, "apply_async", unreachable)
    with django_capture_on_commit_callbacks(execute=True):
        first = api.post(BASE + "/sessions/s1/turns", real_turn())
        second = api.post(BASE + "/sessions/s1/turns", real_turn())
    assert first.status_code == second.status_code == 201
    assert len(calls) == 1  # after one failure, dispatch backs off instead of timing out again
    assert list(ExtractionJob.objects.values_list("status", flat=True)) == ["pending", "pending"]
    assert Message.objects.count() == 4
    monkeypatch.undo()
    # Too fresh for the sweep; then old enough.
    assert dispatch.sweep_extractions() == 0
    later = timezone.now() + timedelta(minutes=1)
    assert dispatch.sweep_extractions(now=later) == 2
    assert set(ExtractionJob.objects.values_list("status", flat=True)) == {"done"}
    assert Finding.objects.count() == 1  # same file read twice: one finding


# --- cleanup ---------------------------------------------------------------------------


def make_session(agent, key, *, expired, messages=4):
    client_key = ApiKey.issue(agent)[1]
    client = Client()
    headers = {"Authorization": f"Bearer {client_key}"}
    body = {
        "messages": [{"role": "user", "content": f"{key} message {i}"} for i in range(messages)],
        "tool_calls": [{"tool": "grep", "query": key, "output": "x" * 3000}],
    }
    client.post(
        f"{BASE}/sessions/{key}/turns",
        body,
        content_type="application/json",
        headers={**headers, "Idempotency-Key": key},
    )
    session = Session.objects.get(agent=agent, key=key)
    with transaction.atomic():
        ContextItem.put(session, "k", "v", source="explicit", confidence=1, actor="t")
        Finding.record(session, tool="grep", query=key, fact="f", actor="t")
    first = Subtask.objects.create(session=session, title="a")
    Subtask.objects.create(session=session, title="b").dependencies.add(first)
    Memory.objects.create(agent=agent, session=session, content=f"learned in {key}")
    if expired:
        Session.objects.filter(pk=session.pk).update(
            expires_at=timezone.now() - timedelta(seconds=5)
        )
    return session


def rows_of(session_ids):
    return sum(
        model.objects.filter(session_id__in=session_ids).count()
        for model in (
            Message,
            Turn,
            ToolCall,
            ContextItem,
            Finding,
            Subtask,
            ExtractionJob,
            IdempotencyRecord,
        )
    )


@pytest.mark.django_db
def test_cleanup_removes_expired_keeps_live_and_memories(agent):
    old = [make_session(agent, f"old{i}", expired=True).pk for i in range(3)]
    live = [make_session(agent, f"live{i}", expired=False).pk for i in range(2)]
    expiring = Memory.objects.create(
        agent=agent, content="temporary", expires_at=timezone.now() - timedelta(seconds=1)
    )
    live_rows = rows_of(live)
    run = cleanup.run_cleanup(triggered_by="test")
    assert (run.status, run.sessions_total, run.sessions_removed, run.sessions_done) == (
        "done",
        3,
        3,
        3,
    )
    assert run.messages_removed == 12 and run.rows_removed > 12
    assert Session.objects.filter(pk__in=old).count() == 0 and rows_of(old) == 0
    assert PendingToolOutput.objects.filter(tool_call__session_id__in=old).count() == 0
    assert Session.objects.filter(pk__in=live).count() == 2 and rows_of(live) == live_rows
    # Memories from expired sessions stay, unlinked; a memory's own expiry archives it.
    assert Memory.objects.filter(content__startswith="learned in old", session=None).count() == 3
    expiring.refresh_from_db()
    assert expiring.status == "archived" and run.memories_expired == 1
    assert MemoryEvent.objects.filter(
        target_kind="memory", target_id=expiring.pk, action="expire"
    ).exists()
    assert cleanup.run_cleanup().sessions_removed == 0  # nothing left: a second run is a no-op


@pytest.mark.django_db
def test_dry_run_counts_and_removes_nothing(agent):
    make_session(agent, "old", expired=True)
    make_session(agent, "live", expired=False)
    out = StringIO()
    call_command("cleanup_expired", "--dry-run", stdout=out)
    assert out.getvalue().startswith("done: would remove 1 sessions, 4 messages")
    assert Session.objects.count() == 2
    run = CleanupRun.objects.get()
    assert run.dry_run and run.sessions_removed == 1 and run.messages_removed == 4
    call_command("cleanup_expired", stdout=out)
    assert list(Session.objects.values_list("key", flat=True)) == ["live"]


@pytest.mark.django_db
def test_a_session_written_to_during_cleanup_is_never_removed(agent):
    session = make_session(agent, "revived", expired=True)
    now = timezone.now()
    # The cleanup chose it as expired; then a write slid its expiry before the batch ran.
    Session.objects.filter(pk=session.pk).update(expires_at=now + timedelta(hours=1))
    assert cleanup.purge_sessions([session.pk], now) == (0, 0, 0)
    assert Session.objects.filter(pk=session.pk).exists() and rows_of([session.pk]) > 0


@pytest.mark.django_db
def test_large_sessions_lose_their_messages_in_chunks(agent, monkeypatch):
    monkeypatch.setattr(cleanup, "CHUNK_MESSAGES", 3)
    session = make_session(agent, "big", expired=True, messages=10)
    run = cleanup.run_cleanup(batch_messages=4)
    assert run.messages_removed == 10 and run.sessions_removed == 1
    assert not Session.objects.filter(pk=session.pk).exists()


@pytest.mark.django_db
def test_only_one_cleanup_at_a_time(agent):
    CleanupRun.objects.create(status="running")
    assert cleanup.run_cleanup() is None
    with pytest.raises(CommandError, match="another cleanup is running"):
        call_command("cleanup_expired", stdout=StringIO())
    assert cleanup.run_cleanup(dry_run=True).status == "done"  # previews are fine


@pytest.mark.django_db(transaction=True)
def test_ingest_into_live_sessions_goes_on_during_cleanup():
    agent = Agent.objects.create(name="busy")
    for i in range(30):
        make_session(agent, f"old{i}", expired=True, messages=20)
    live_key = ApiKey.issue(agent)[1]
    statuses, errors = [], []
    done = threading.Event()

    def append():
        client = Client()
        try:
            while not done.is_set() or len(statuses) < 5:
                response = client.post(
                    f"{BASE}/sessions/live/turns",
                    {"messages": [{"role": "user", "content": "still here"}]},
                    content_type="application/json",
                    headers={"Authorization": f"Bearer {live_key}"},
                )
                statuses.append(response.status_code)
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connection.close()

    thread = threading.Thread(target=append)
    thread.start()
    try:
        run = cleanup.run_cleanup(batch_messages=40)
    finally:
        done.set()
        thread.join(timeout=60)
    assert errors == [] and set(statuses) == {201}
    assert run.sessions_removed == 30
    live = Session.objects.get(key="live")
    assert live.message_count == len(statuses)
    assert Message.objects.filter(session=live).count() == len(statuses)


@pytest.mark.django_db
def test_beat_runs_cleanup_and_the_sweep(settings):
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule["cleanup-expired"]["task"] == "memoryapp.core.tasks.cleanup_expired"
    assert schedule["cleanup-expired"]["schedule"] == settings.MEMORYAPP_CLEANUP_INTERVAL_SECONDS
    assert schedule["sweep-extractions"]["task"] == "memoryapp.core.tasks.sweep_extractions"
    assert set(celery_app.tasks) >= {s["task"] for s in schedule.values()}


@pytest.mark.django_db
def test_dispatch_waits_for_the_outermost_commit(api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():
            api.post(BASE + "/sessions/s1/turns", real_turn())
            assert ExtractionJob.objects.get().status == "queued"
    assert len(callbacks) == 1
    assert ExtractionJob.objects.get().finished_at is None


@pytest.mark.django_db
def test_a_tool_result_in_the_next_turn_is_not_extracted_a_second_time(
    api, django_capture_on_commit_callbacks
):
    """Claude Code's layout: the call (with its structured details) is reported with the
    turn that made it; its tool message arrives in the next turn's inputs."""
    call = OUTPUTS["cc_edit_python"]
    args = json.loads(call["query"])
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "Edit", "arguments": call["query"]},
            }
        ],
    }
    record = {
        "tool": "Edit",
        "query": args,
        "output": call["output"],
        "call_id": "toolu_1",
        "details": call["details"],
    }
    with django_capture_on_commit_callbacks(execute=True):
        api.post(BASE + "/sessions/s1/turns", {"messages": [assistant], "tool_calls": [record]})
        api.post(
            BASE + "/sessions/s1/turns",
            {
                "messages": [
                    {"role": "tool", "tool_call_id": "toolu_1", "content": call["output"]},
                    {"role": "assistant", "content": "Done."},
                ]
            },
        )
    finding = Finding.objects.get()
    assert finding.fact.startswith("edited /tmp/tmpw6sk2trg/src/math_utils.py (+5/−0 lines)")
    assert (
        MemoryEvent.objects.filter(target_kind="finding").count() == 1
    )  # added once, never rewritten
    assert finding.message.seq == 1  # the assistant message that made the call


@pytest.mark.django_db
def test_shell_writes_make_reads_stale_failed_edits_do_not_and_claimed_issues_are_named(
    api, django_capture_on_commit_callbacks
):
    api.put(BASE + "/sessions/s1", {"metadata": {"cwd": "/app"}})
    check = BASE + "/sessions/s1/findings/check"

    def call(tool, args, output, success=True):
        body = {
            "messages": [{"role": "assistant", "content": ""}],
            "tool_calls": [{"tool": tool, "query": args, "output": output, "success": success}],
        }
        with django_capture_on_commit_callbacks(execute=True):
            assert api.post(BASE + "/sessions/s1/turns", body).status_code == 201

    def answer(path):
        return api.get(check, {"tool": "Read", "query": path}).json()

    call("Read", {"file_path": "/app/lib/q.ex"}, "     1→defmodule Q do\n     2→end\n")
    call("Read", {"file_path": "/app/lib/r.ex"}, "     1→defmodule R do\n     2→end\n")
    assert answer("lib/q.ex")["known"] is True  # relative to the session's directory
    call("Bash", {"command": "sed -i 's/Q/P/' lib/q.ex"}, "")
    assert (answer("/app/lib/q.ex")["known"], answer("/app/lib/q.ex")["stale"]) == (False, True)
    edit = {"file_path": "/app/lib/r.ex", "old_string": "nope", "new_string": "x"}
    call(
        "Edit", edit, "<tool_use_error>String to replace not found in file.</tool_use_error>", False
    )
    assert answer("/app/lib/r.ex")["known"] is True  # a failed edit changed nothing
    call("Bash", {"command": "mix format"}, "")
    assert answer("/app/lib/r.ex")["stale"] is True  # a formatter may have changed any file

    shown = OUTPUTS["stress_bd_show"]
    call("Bash", json.loads(shown["query"]), shown["output"])
    call(
        "Bash",
        {"command": "bd update spotter-42 --status in_progress"},
        "✓ Updated issue: spotter-42",
    )
    task = ContextItem.objects.get(key="current_task")
    assert task.value == "spotter-42: Add max nightly rate filter to listings page"
    assert task.evidence[-1]["what"] == "ran bd update spotter-42 --status in_progress"


# --- lost jobs redone within a minute (issue 11, #8 and #9) ------------------------------


@pytest.mark.django_db
def test_a_job_lost_from_the_broker_is_redone_within_a_minute_unless_a_backlog_holds_it(
    api, monkeypatch, django_capture_on_commit_callbacks, in_process_tasks, settings
):
    """Queued, then lost (Redis restarted without its data): the sweep redoes it after
    half a minute, not fifteen; while the queue has a backlog the job may still be waiting, and
    is left alone. Redoing a job twice stores nothing twice."""
    monkeypatch.setattr(extract_turn, "apply_async", lambda *a, **k: None)  # "lost"
    with django_capture_on_commit_callbacks(execute=True):
        assert api.post(BASE + "/sessions/s1/turns", real_turn()).status_code == 201
    assert ExtractionJob.objects.get().status == "queued"
    monkeypatch.undo()
    later = timezone.now() + timedelta(seconds=31)
    settings.CELERY_TASK_ALWAYS_EAGER = False  # as with a broker (the run stays in-process)
    monkeypatch.setattr(dispatch, "_broker_backlog", lambda: 250)
    assert dispatch.sweep_extractions(now=later) == 0  # a backlog: it may still come
    monkeypatch.setattr(dispatch, "_broker_backlog", lambda: 0)
    assert dispatch.sweep_extractions(now=timezone.now() + timedelta(seconds=20)) == 0
    assert dispatch.sweep_extractions(now=later) == 1
    assert ExtractionJob.objects.get().status == "done"
    assert dispatch.sweep_extractions(now=later + timedelta(minutes=5)) == 0
    assert Finding.objects.count() == 1


@pytest.mark.django_db
def test_the_embedded_setup_retries_pending_jobs_on_the_next_ingest(
    api, monkeypatch, django_capture_on_commit_callbacks, in_process_tasks, settings
):
    """No beat runs in the embedded setup: a job left pending (its in-process run failed)
    is retried by a later ingest, at most once a minute."""

    def failing(*args, **kwargs):
        raise BrokerError("the in-process run failed: database is locked")

    settings.CELERY_TASK_ALWAYS_EAGER = True  # the embedded setup
    monkeypatch.setattr(extract_turn, "apply_async", failing)
    with django_capture_on_commit_callbacks(execute=True):
        api.post(BASE + "/sessions/s1/turns", real_turn())
    assert ExtractionJob.objects.get().status == "pending"
    monkeypatch.undo()
    dispatch.reset_broker_backoff()
    ExtractionJob.objects.update(created_at=timezone.now() - timedelta(minutes=2))
    monkeypatch.setattr(dispatch, "_last_embedded_sweep", 0.0)
    with django_capture_on_commit_callbacks(execute=True):
        api.post(BASE + "/sessions/s2/turns", real_turn())
    assert sorted(ExtractionJob.objects.values_list("status", flat=True)) == ["done", "done"]


@pytest.mark.django_db
def test_lost_jobs_are_redone_under_load_beyond_what_the_queue_can_hold(
    api, monkeypatch, django_capture_on_commit_callbacks, in_process_tasks, settings
):
    """Under load the queue is never empty, which kept lost jobs waiting minutes
    (bench/faults.py). The queue holds at most its backlog of the queued jobs, the newest:
    the oldest beyond that were lost and are redone; the ones it may hold are left."""
    monkeypatch.setattr(extract_turn, "apply_async", lambda *a, **k: None)  # all "lost"
    for i in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            api.post(BASE + f"/sessions/s{i}/turns", real_turn())
    monkeypatch.undo()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr(dispatch, "_broker_backlog", lambda: 1)  # one may still be queued
    later = timezone.now() + timedelta(seconds=31)
    assert dispatch.sweep_extractions(now=later) == 2
    statuses = list(ExtractionJob.objects.order_by("id").values_list("status", flat=True))
    assert statuses == ["done", "done", "queued"]


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="the production worker's database: run with DATABASE_URL=postgres://…",
)
@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_its_database_connection_from_task_to_task():
    """Celery's Django fixup closes every connection before and after each task unless
    CELERY_DB_REUSE_MAX is set (a new connection per extraction job cost more than the
    job); the worker keeps it as a request does, closing it only past CONN_MAX_AGE (at
    once with CONN_MAX_AGE=0, as behind a pooler)."""
    from celery.fixups.django import DjangoWorkerFixup
    from celery.signals import task_postrun, task_prerun

    fixup = DjangoWorkerFixup(celery_app)  # what `celery worker` installs
    connection.ensure_connection()
    kept = connection.connection

    def one_task():
        fixup.on_task_prerun(sender=extract_turn)
        task_prerun.send(sender=extract_turn, task_id="t", task=extract_turn, args=(), kwargs={})
        Agent.objects.count()
        fixup.on_task_postrun(sender=extract_turn)
        task_postrun.send(sender=extract_turn, task_id="t", task=extract_turn, args=(), kwargs={})

    for _ in range(3):
        one_task()
    if connection.settings_dict["CONN_MAX_AGE"] == 0:  # a pooler's setting: none is kept
        assert connection.connection is not kept
        return
    assert connection.connection is kept
    connection.close_at = 0  # past its age: replaced at the next task, as at a request
    one_task()
    assert connection.connection is not kept


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="row locks as the production database takes them: run with DATABASE_URL=postgres://…",
)
@pytest.mark.django_db(transaction=True)
def test_a_job_locks_its_session_before_itself_as_the_cleanup_does(api):
    """The TTL cleanup locks an expired session, then deletes its jobs; a job of that
    session run meanwhile must wait for the session before it locks itself, or each would
    hold what the other waits for (PostgreSQL would end one of them as a deadlock,
    rolling back a whole batch of the cleanup's)."""
    from django.db import connections

    api.post(BASE + "/sessions/s1/turns", real_turn())
    job = ExtractionJob.objects.get()
    ExtractionJob.objects.filter(pk=job.pk).update(status="queued")  # delivered again
    answers: list = []

    def worker():
        try:
            answers.append(workers.run_extraction(job.pk))
        except Exception as exc:
            answers.append(repr(exc))
        finally:
            connections.close_all()

    with transaction.atomic():
        Session.objects.select_for_update().get(key="s1")  # the cleanup's first lock
        thread = threading.Thread(target=worker)
        thread.start()
        with connection.cursor() as cursor:
            for _ in range(100):  # until the worker waits for a lock
                cursor.execute("SELECT pg_stat_clear_snapshot()")  # (read once a transaction)
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the worker never waited for the session")
        # The cleanup's next lock, the job's row: free, the worker does not hold it.
        ExtractionJob.objects.select_for_update(nowait=True).get(pk=job.pk)
    thread.join(timeout=30)
    assert answers == ["done"]
