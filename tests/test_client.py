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
