"""Context assembly: budgets, priorities, prompt, summary, and cost bounded by the budget."""

import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryapp.core.context import assemble_context
from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.models import Agent, ContextItem, Finding, Memory, Session, Subtask, ToolCall
from memoryapp.core.summaries import summarize_pruned
from memoryapp.lib import prompt as fmt
from memoryapp.lib import tokens
from tests.conftest import turn

pytestmark = pytest.mark.django_db

BASE = "/api/v1"
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def fill(agent, key, pairs, text=lambda i: f"message {i} " + " ".join(WORDS[: i % 12])):
    for i in range(pairs):
        append_turn(
            agent,
            key,
            TurnInput(
                [MessageInput("user", text(2 * i)), MessageInput("assistant", text(2 * i + 1))]
            ),
        )
    return Session.objects.get(agent=agent, key=key)


def test_context_answer_shape_and_prompt(api, agent):
    api.put(BASE + "/sessions/s1", {"goal": "Port the parser"})
    api.post(BASE + "/sessions/s1/turns", turn(("system", "Be terse."), ("user", "hello")))
    api.put(BASE + "/sessions/s1/context-items/active_file", {"value": "lib/app.ex"})
    api.post(
        BASE + "/sessions/s1/findings",
        {
            "tool": "fs:read",
            "query": "lib/app.ex",
            "fact": "defines App.start/2",
            "file_path": "lib/app.ex",
        },
    )
    memory = "The parser in lib/app.ex targets Elixir 1.17"
    api.post(BASE + "/memories", {"content": memory, "confidence": 0.9})
    body = api.get(BASE + "/sessions/s1/context").json()
    assert [m["content"] for m in body["conversation"]] == ["Be terse.", "hello"]
    assert body["working_context"] == {"active_file": "lib/app.ex"}
    assert [m["content"] for m in body["long_term_memories"]] == [memory]
    assert body["findings"][0]["fact"] == "defines App.start/2"
    assert body["summary"] is None
    prompt = body["prompt"]
    assert prompt.startswith("## Session State\n- **Goal**: Port the parser")
    assert "## Session Context\n- **Active file**: lib/app.ex" in prompt
    assert (
        "# Execution Memory\n\n**Files Already Read:**\n- lib/app.ex: defines App.start/2" in prompt
    )
    assert f"## Remembered Information\n- [fact] (high confidence) {memory}" in prompt
    counts = body["token_counts"]
    assert counts["total"] == sum(
        counts[k] for k in ("system", "conversation", "working", "long_term")
    )
    enc = tokens.get_encoding("cl100k_base")
    # Exact counts: the prompt costs no more than its sections were charged.
    assert (
        tokens.count_text(enc, prompt) <= counts["system"] + counts["working"] + counts["long_term"]
    )
    assert counts["conversation"] == sum(m["token_count"] for m in body["conversation"]) + 3
    assert body["budget"]["total"] == 32000


def test_empty_context_gives_an_empty_prompt(api):
    api.put(BASE + "/sessions/s1", {})
    body = api.get(BASE + "/sessions/s1/context").json()
    assert body["prompt"] == ""
    assert body["token_counts"]["total"] == 0
    assert body["conversation"] == [] and body["long_term_memories"] == []


def test_context_of_absent_expired_or_foreign_session_is_404(api, other_api):
    assert api.get(BASE + "/sessions/nope/context").status_code == 404
    other_api.put(BASE + "/sessions/theirs", {})
    assert api.get(BASE + "/sessions/theirs/context").status_code == 404
    api.put(BASE + "/sessions/old", {})
    Session.objects.filter(key="old").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api.get(BASE + "/sessions/old/context").status_code == 404
    assert api.get(BASE + "/sessions/nope/context", {"token_budget": -5}).status_code == 422


def test_memories_without_hint_are_the_ones_that_bear_on_the_session(api, agent):
    """Without a hint the session says what it is about: a Rust session gets the Rust
    project's test command, not the more confident Python one, nor a memory that shares
    one common word with it."""
    rust = Memory.objects.create(
        agent=agent, content="Run the Rust CLI's tests with cargo nextest run", confidence=0.6
    )
    Memory.objects.create(agent=agent, content="Run the tests with python -m pytest", confidence=1)
    Memory.objects.create(agent=agent, content="The CLI banner is printed in green", confidence=1)
    Memory.objects.create(agent=agent, content="pydicom's NumPy handler reads pixel data")
    Memory.objects.create(
        agent=agent, content="Rust CLI tests need cargo nextest", confidence=1, status="archived"
    )
    api.put(BASE + "/sessions/s1", {"goal": "Add a --json flag to the Rust CLI"})
    api.post(BASE + "/sessions/s1/turns", turn(("user", "and make sure the tests still pass")))
    body = api.get(BASE + "/sessions/s1/context").json()
    assert [m["id"] for m in body["long_term_memories"]] == [rust.id]


def test_a_memory_of_another_language_s_project_is_not_injected_into_a_rust_port(api, agent):
    """The imported python-to-rust-port session: its goal shares "run", "tests" and
    "Python" with a Python project's test command, which must not reach a session whose
    primary language is Rust; a memory that names Rust too still does. A hint asks
    explicitly: it gets what it asks for."""
    python = Memory.objects.create(agent=agent, content="Run the tests with python -m pytest")
    both = Memory.objects.create(
        agent=agent, content="The Rust port is not released yet: keep publishing the Python tests"
    )
    goal = "Port this Python project to Rust; keep the Justfile, update it to run Rust tests"
    api.put(BASE + "/sessions/s1", {"goal": goal})
    body = api.get(BASE + "/sessions/s1/context").json()
    assert python.id in [m["id"] for m in body["long_term_memories"]]  # nothing says Rust yet
    api.put(BASE + "/sessions/s1/context-items/primary_language", {"value": "Rust"})
    body = api.get(BASE + "/sessions/s1/context").json()
    assert [m["id"] for m in body["long_term_memories"]] == [both.id]
    hinted = api.get(BASE + "/sessions/s1/context", {"query_hint": "python -m pytest"}).json()
    assert python.id in [m["id"] for m in hinted["long_term_memories"]]
    # Without a language item, the active file's language says it.
    api.delete(BASE + "/sessions/s1/context-items/primary_language")
    api.put(BASE + "/sessions/s1/context-items/active_file", {"value": "src/lib.rs"})
    body = api.get(BASE + "/sessions/s1/context").json()
    assert python.id not in [m["id"] for m in body["long_term_memories"]]


def test_memories_without_hint_follow_the_current_task_and_the_latest_user_message(api, agent):
    staging = Memory.objects.create(
        agent=agent, content="The staging database is read-only on Sundays"
    )
    upload = Memory.objects.create(
        agent=agent, content="test_upload_resume is flaky on CI: rerun it once"
    )
    api.put(BASE + "/sessions/s1", {})
    api.post(BASE + "/sessions/s1/subtasks", {"title": "Migrate the staging database on Sunday"})
    api.post(BASE + "/sessions/s1/turns", turn(("user", "why does test_upload_resume fail?")))
    body = api.get(BASE + "/sessions/s1/context").json()
    assert {m["id"] for m in body["long_term_memories"]} == {staging.id, upload.id}


def test_no_memory_is_injected_when_none_bears_on_the_session(api, agent):
    for i in range(8):
        Memory.objects.create(agent=agent, content=f"fact number {i} about the build", confidence=1)
    api.put(BASE + "/sessions/empty", {})
    assert api.get(BASE + "/sessions/empty/context").json()["long_term_memories"] == []
    # Stop words and one shared common word are not relevance.
    api.put(BASE + "/sessions/s1", {"goal": "We should do what the build said"})
    body = api.get(BASE + "/sessions/s1/context").json()
    assert body["long_term_memories"] == []
    assert "Remembered Information" not in body["prompt"]


def test_memories_with_hint_are_up_to_ten_relevant_by_confidence(api, agent):
    for i in range(14):
        Memory.objects.create(
            agent=agent, content=f"deploy step {i} uses kubectl", confidence=0.3 + i / 40
        )
    Memory.objects.create(agent=agent, content="unrelated note about lunch", confidence=1.0)
    api.put(BASE + "/sessions/s1", {})
    body = api.get(BASE + "/sessions/s1/context", {"query_hint": "kubectl deploy"}).json()
    kept = body["long_term_memories"]
    assert len(kept) == 10
    assert all("kubectl" in m["content"] for m in kept)
    confidences = [m["confidence"] for m in kept]
    assert confidences == sorted(confidences, reverse=True)
    # Low confidence is fine with a hint: relevance chose them.
    assert min(confidences) < 0.7


def test_reading_memories_into_context_records_access(api, agent):
    memory = Memory.objects.create(agent=agent, content="kept fact of the parser", confidence=0.9)
    api.put(BASE + "/sessions/s1", {"goal": "Fix the parser's kept fact"})
    api.get(BASE + "/sessions/s1/context")
    api.get(BASE + "/sessions/s1/context")
    memory.refresh_from_db()
    assert memory.access_count == 2
    assert memory.last_accessed_at is not None


def test_session_state_in_the_prompt(api, agent):
    api.put(BASE + "/sessions/s1", {"goal": "Ship v2"})
    api.post(
        BASE + "/sessions/s1/turns",
        turn(
            ("user", "go"),
            tool_calls=[
                {"tool": "read_file", "query": "a.py", "output": "x", "file_path": "src/a.py"}
            ],
        ),
    )
    session = Session.objects.get()
    Subtask.objects.create(session=session, title="Done already", status="done", position=0)
    Subtask.objects.create(session=session, title="Write migration", status="pending", position=1)
    Subtask.objects.create(session=session, title="Fix tests", status="in_progress", position=2)
    prompt = api.get(BASE + "/sessions/s1/context").json()["prompt"]
    assert "- **Current subtask**: Fix tests (in_progress)" in prompt
    assert "- **Active files**: src/a.py" in prompt
    assert "- **Recent tools**: read_file" in prompt


def test_unused_working_and_memory_share_flows_to_conversation(agent):
    session = fill(agent, "s", 30)
    body = assemble_context(session, token_budget=800)
    assert body["budget"]["conversation"] == 800 - 50  # all but the system share
    assert body["token_counts"]["conversation"] <= body["budget"]["conversation"]
    assert body["token_counts"]["conversation"] > 800 * 5 // 8  # more than its base share


def test_summary_of_pruned_history_is_stored_and_returned(api, agent):
    agent.max_messages = 4
    agent.save()
    fill(agent, "s1", 6)
    body = api.get(BASE + "/sessions/s1/context").json()
    summary = body["summary"]
    assert summary["stale"] is False
    assert summary["covers_through_seq"] == 8
    assert summary["text"].startswith("Task: message 0")
    assert "## Earlier Conversation" in body["prompt"]
    session = Session.objects.get()
    assert session.summary_through_seq == 8
    history = api.get(BASE + "/sessions/s1/history").json()
    assert history["summary"]["covers_through_seq"] == 8
    assert history["pruned_count"] == 8


def test_a_tight_system_budget_keeps_the_summary_s_first_lines(api, agent):
    """The summary lists what matters most first (the task); a small budget cuts its end."""
    agent.max_messages = 4
    agent.save()
    fill(agent, "s1", 6)
    full = api.get(BASE + "/sessions/s1/context").json()["summary"]["text"].splitlines()
    assert len(full) >= 2
    tight = api.get(BASE + "/sessions/s1/context", {"token_budget": 600}).json()["prompt"]
    earlier = tight.split("## Earlier Conversation\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert earlier == [fmt.escape_markdown(line) for line in full[: len(earlier)]]
    assert 1 <= len(earlier) < len(full)


class _FakeCompletions(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"choices": [{"message": {"content": "The user asked for 12 steps.\\nDone 8."}}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_summarizer_endpoint_is_used_when_configured(api, agent, settings):
    server = HTTPServer(("127.0.0.1", 0), _FakeCompletions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings.MEMORYAPP_SUMMARIZER_URL = f"http://127.0.0.1:{server.server_port}/v1"
        agent.max_messages = 2
        agent.save()
        fill(agent, "s1", 3)
        summary = api.get(BASE + "/sessions/s1/history").json()["summary"]
        assert summary["text"] == "The user asked for 12 steps.\nDone 8."
        assert summary["stale"] is False
    finally:
        server.shutdown()


def test_failing_summarizer_hides_nothing_and_says_stale(api, agent, settings):
    agent.max_messages = 2
    agent.save()
    fill(agent, "s1", 3)
    good = api.get(BASE + "/sessions/s1/history").json()["summary"]
    fill(agent, "s1", 2)  # more to prune: the summary must roll forward
    settings.MEMORYAPP_SUMMARIZER_URL = "http://127.0.0.1:1/v1"  # nothing listens
    body = api.get(BASE + "/sessions/s1/history").json()
    assert body["summary"]["stale"] is True
    assert body["summary"]["text"] == good["text"]
    assert "ConnectError" in body["summary"]["error"]
    assert len(body["messages"]) == 2  # the history itself is unchanged by the failure
    assert Session.objects.get().summary_error


def _context_queries(agent, key, pairs):
    session = fill(agent, key, pairs)
    ContextItem.objects.create(session=session, key="k", value="v")
    Finding.objects.create(session=session, tool="grep", query="q", fact="f")
    assemble_context(session)  # the first call rolls the summary forward
    with CaptureQueriesContext(connection) as queries:
        assemble_context(session, query_hint="fact")
    return len(queries)


def test_context_query_count_does_not_grow_with_history(agent):
    Memory.objects.create(agent=agent, content="a fact", confidence=0.9)
    agent.max_messages = 10
    agent.save()
    n = _context_queries(agent, "n", 20)
    # The kept run is read once (issue 13); memories: words, vectors, rows (core.recall).
    assert n == _context_queries(agent, "2n", 40) == 10


# --- properties ------------------------------------------------------------------------

_counter = iter(range(10**9))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=25),
    roles=st.lists(
        st.sampled_from(["system", "user", "assistant", "tool"]), min_size=25, max_size=25
    ),
    confidences=st.lists(st.floats(min_value=0, max_value=1), max_size=12),
    items=st.lists(st.integers(min_value=1, max_value=300), max_size=8),
    total=st.integers(min_value=0, max_value=6000),
)
def test_no_budget_is_ever_exceeded(db, sizes, roles, confidences, items, total):
    agent = Agent.objects.create(name=f"p{next(_counter)}")
    messages = [MessageInput(roles[i], "word " * size) for i, size in enumerate(sizes)]
    append_turn(agent, "s", TurnInput(messages))
    session = Session.objects.get(agent=agent)
    for i, confidence in enumerate(confidences):
        Memory.objects.create(
            agent=agent, content=f"memory {i} " + "x " * (i * 20), confidence=confidence
        )
    for i, size in enumerate(items):
        ContextItem.objects.create(
            session=session, key=f"item_{i}", value="v " * size, confidence=(i % 10) / 10
        )
        Finding.objects.create(session=session, tool="grep", query=f"q{i}", fact="f " * size)
    body = assemble_context(session, token_budget=total)
    counts, budget = body["token_counts"], body["budget"]
    for section in ("system", "conversation", "working", "long_term"):
        assert counts[section] <= budget[section]
    assert counts["total"] <= total
    enc = tokens.get_encoding("cl100k_base")
    assert (
        tokens.count_text(enc, body["prompt"])
        <= counts["system"] + counts["working"] + counts["long_term"]
    )
    # Truncation keeps the newest messages...
    kept = [m["seq"] for m in body["conversation"] if m["role"] != "system"]
    others = [i + 1 for i, role in enumerate(roles[: len(sizes)]) if role != "system"]
    assert kept == others[len(others) - len(kept) :]
    # ...and the highest-confidence memories.
    chosen = [m["confidence"] for m in body["long_term_memories"]]
    eligible = sorted((c for c in confidences if c >= 0.7), reverse=True)[:5]
    assert chosen == eligible[: len(chosen)]
    # ...and the most confident working-context items.
    kept_items = body["working_context_items"]
    all_conf = sorted(((i % 10) / 10 for i in range(len(items))), reverse=True)
    assert [k["confidence"] for k in kept_items] == all_conf[: len(kept_items)]


def test_rolling_the_summary_reads_a_bounded_number_of_queries(
    api, agent, django_assert_max_num_queries, django_capture_on_commit_callbacks, in_process_tasks
):
    """Each pruned tool call's fact comes with its call, not from a query of its own."""
    agent.max_messages = 4
    agent.save()
    for i in range(30):
        body = turn(
            ("user", f"step {i}"),
            tool_calls=[{"tool": "Bash", "query": {"command": f"echo {i}"}, "output": str(i)}],
        )
        with django_capture_on_commit_callbacks(execute=True):
            api.post(BASE + "/sessions/s1/turns", body)
    session = Session.objects.get()
    assert ToolCall.objects.exclude(kind="").count() == 30  # extracted: facts on the calls
    with django_assert_max_num_queries(12):
        summarize_pruned(session, session.message_count - 4)


def test_a_long_backlog_is_summarised_over_several_calls_oldest_first(api, agent, monkeypatch):
    from memoryapp.core import summaries

    monkeypatch.setattr(summaries, "MAX_MESSAGES_PER_CALL", 4)
    agent.max_messages = 2
    agent.save()
    session = fill(agent, "s1", 6)  # 12 messages; 10 pruned
    first = summaries.summarize_pruned(session, 10)
    assert first["covers_through_seq"] == 4
    assert "Messages 5–10 are not summarised yet." in first["text"]
    assert summaries.summarize_pruned(session, 10)["covers_through_seq"] == 8
    done = summaries.summarize_pruned(session, 10)
    assert done["covers_through_seq"] == 10 and "not summarised" not in done["text"]
    assert done["text"].startswith("Task: message 0")  # the oldest messages were read first


def test_the_summary_never_covers_what_the_conversation_keeps(api, agent):
    """A call with a tiny budget prunes (and summarises) everything; a later call that
    keeps the newest messages gets a summary that stops before them (issue 10)."""
    fill(agent, "s1", 60)  # 120 messages
    tiny = api.get(BASE + "/sessions/s1/context", {"token_budget": 0}).json()
    assert tiny["conversation"] == [] and tiny["summary"]["covers_through_seq"] == 120
    body = api.get(BASE + "/sessions/s1/context", {"token_budget": 4000}).json()
    first_kept = body["conversation"][0]["seq"]
    assert 1 < first_kept <= 120
    assert body["summary"]["covers_through_seq"] == first_kept - 1
    assert "Covers messages 1–" + str(first_kept - 1) in body["summary"]["text"]
    # and back: the stored summary follows the latest call either way
    again = api.get(BASE + "/sessions/s1/context", {"token_budget": 0}).json()
    assert again["summary"]["covers_through_seq"] == 120


def test_the_summary_never_reads_relayed_output_as_the_person_s_words(api, agent):
    """User messages a harness named (SWE-agent's observations, a demonstration) are not
    later instructions in the summary."""
    agent.max_messages = 2
    agent.save()
    api.post(BASE + "/sessions/s1/turns", turn(("user", "Fix the parser bug in lexer.py please.")))
    for i in range(4):
        body = {
            "messages": [
                {"role": "assistant", "content": f"Running step {i}."},
                {
                    "role": "user",
                    "name": "observation",
                    "content": f"Traceback (most recent call last): step {i}",
                },
            ]
        }
        api.post(BASE + "/sessions/s1/turns", body)
    text = api.get(BASE + "/sessions/s1/context").json()["summary"]["text"]
    assert text.startswith("Task: Fix the parser bug in lexer.py please.")
    assert "Traceback" not in text and "Later instruction" not in text
