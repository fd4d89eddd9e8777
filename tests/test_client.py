"""agents.client against a real HTTP server (pytest-django's live server)."""

import pytest

from agents.client import ApiError, MemoryClient
from memoryapp.core.models import Agent, ApiKey, Message

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(live_server):
    agent = Agent.objects.create(name="remote")
    key = ApiKey.issue(agent)[1]
    with MemoryClient(live_server.url, key) as memory:
        yield memory


def test_round_trip_over_http(client):
    assert client.health()["database"]["ok"] is True
    answer = client.append_turn(
        "run 1:a",  # spaces and the like are escaped in the URL
        [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}],
        usage={"input_tokens": 9, "output_tokens": 0},
        tool_calls=[{"tool": "ls", "query": ".", "output": "a b"}],
        model="test-model",
    )
    assert answer["iteration"] == 1
    client.append_turn("run 1:a", [{"role": "assistant", "content": "hi"}])
    history = client.history("run 1:a", max_messages=2)
    assert [m["content"] for m in history["messages"]] == ["s", "hi"]
    assert history["pruned_count"] == 1
    assert [t["iteration"] for t in client.turns("run 1:a", page_size=1)] == [1, 2]
    assert client.put_session("run 1:a", goal="greet")["goal"] == "greet"
    assert client.session("run 1:a")["totals"]["messages"] == 3
    assert client.update_agent(max_messages=5)["max_messages"] == 5


def test_a_slash_in_a_session_key_is_refused_before_sending(client):
    with pytest.raises(ValueError, match="'/'"):
        client.session("a/b")


def test_sessions_iterates_every_page(client):
    for i in range(5):
        client.put_session(f"s{i}")
    assert sorted(s["key"] for s in client.sessions(page_size=2)) == [f"s{i}" for i in range(5)]


def test_errors_carry_status_and_detail(client):
    with pytest.raises(ApiError) as caught:
        client.session("absent")
    assert caught.value.status_code == 404
    assert caught.value.detail == "session not found"
    with pytest.raises(ApiError) as caught:
        client.append_turn("s", [{"role": "robot", "content": "x"}])
    assert caught.value.status_code == 422
    assert Message.objects.count() == 0


def test_append_retry_uses_one_idempotency_key(client):
    client.append_turn("s", [{"role": "user", "content": "x"}], idempotency_key="fixed")
    client.append_turn("s", [{"role": "user", "content": "x"}], idempotency_key="fixed")
    assert Message.objects.count() == 1


def test_delete(client):
    client.append_turn("s", [{"role": "user", "content": "x"}])
    client.delete_session("s", scope="conversation")
    assert client.session("s")["totals"]["messages"] == 0
    client.delete_session("s")
    with pytest.raises(ApiError):
        client.session("s")


def test_memory_engine_calls_and_tool_dispatch(client):
    from agents.tools import definitions, dispatch

    client.put_session("s", goal="learn")
    client.set_context_item("s", "active_file", "a.py")
    assert client.context_items("s")[0]["value"] == "a.py"
    client.add_finding("s", tool="grep", query="TODO", fact="2 matches")
    assert client.check_finding("s", "grep", "TODO")["known"] is True
    assert client.check_finding("s", "grep", "todo")["known"] is False  # grep is case-sensitive
    assert client.findings("s")[0]["fact"] == "2 matches"
    assert client.tools("anthropic") == definitions("anthropic")
    text = dispatch(client, "remember", {"content": "The CI runs on PostgreSQL"}, session="s")
    assert text.startswith("Remembered:")
    assert "PostgreSQL" in dispatch(client, "recall", {"query": "postgresql"})
    memory_id = client.recall("postgresql")[0]["id"]
    context = client.context("s", query_hint="postgresql")
    assert "## Remembered Information" in context["prompt"]
    client.update_memory(memory_id, confidence=0.3)
    client.forget(memory_id)
    client.restore_memory(memory_id)
    actions = [e["action"] for e in client.memory_history(memory_id)]
    assert actions == ["add", "update", "delete", "restore"]
    assert client.search("postgresql")["items"][0]["kind"] == "memory"
    client.delete_context_item("s", "active_file")
    assert client.context_items("s") == []
