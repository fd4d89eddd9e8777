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
    every = [m["content"] for m in client.messages("run 1:a", page_size=2)]
    assert every == ["s", "hello", "hi"]  # unpruned, oldest first, across pages
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
    from agents.tools import definitions, dispatch, tool_names

    client.put_session("s", goal="learn")
    client.set_context_item("s", "active_file", "a.py")
    assert client.context_items("s")[0]["value"] == "a.py"
    client.add_finding("s", tool="grep", query="TODO", fact="2 matches")
    assert client.check_finding("s", "grep", "TODO")["known"] is True
    assert client.check_finding("s", "grep", "todo")["known"] is False  # grep is case-sensitive
    assert client.findings("s")[0]["fact"] == "2 matches"
    assert definitions(client, "anthropic") == client.tools("anthropic")
    assert tool_names(client) == ["remember", "recall", "forget"]
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


def test_tool_definitions_are_asked_for_once_per_client(client, monkeypatch):
    from agents.tools import definitions, tool_names

    asked = []
    served = client.tools
    monkeypatch.setattr(client, "tools", lambda format: asked.append(format) or served(format))
    mine = definitions(client)
    mine[0]["function"]["name"] = "edited"  # the caller's copy, not the next caller's
    assert tool_names(client) == ["remember", "recall", "forget"]
    assert definitions(client, "anthropic")[0]["name"] == "remember"
    assert asked == ["openai", "anthropic"]
    with pytest.raises(ValueError, match="unknown tool format"):
        definitions(client, "xml")


# --- typed errors, retries, the async client, the whole API ---------------------------------

import asyncio  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402

import httpx  # noqa: E402

from agents.client import (  # noqa: E402
    AsyncMemoryClient,
    Conflict,
    InvalidRequest,
    NotFound,
    RateLimited,
    RetryPolicy,
    ServerError,
    ServiceUnavailable,
    Unauthorized,
    Unreachable,
)
from memoryapp.core.models import Finding, ToolCall  # noqa: E402

FAST = RetryPolicy(retries=2, backoff=0.001, max_wait=0.01)


def test_errors_are_typed_by_status(client, live_server):
    with pytest.raises(NotFound):
        client.session("absent")
    with pytest.raises(InvalidRequest) as caught:
        client.append_turn("s", [{"role": "robot", "content": "x"}])
    assert caught.value.status_code == 422
    client.append_turn("s", [{"role": "user", "content": "x"}], idempotency_key="k")
    with pytest.raises(Conflict):
        client.append_turn("s", [{"role": "user", "content": "y"}], idempotency_key="k")
    with MemoryClient(live_server.url, "wrong-key") as stranger, pytest.raises(Unauthorized):
        stranger.agent()


def scripted(*answers, seen=None):
    """A transport that answers each request with the next of `answers` (status, body and
    optionally headers; or an exception to raise), recording what it was sent."""
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, body, headers = (*answer, None)[:3]
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(handle)


def mock_client(*answers, seen=None, **options) -> MemoryClient:
    return MemoryClient(
        "http://memory", "k", transport=scripted(*answers, seen=seen), retry=FAST, **options
    )


def test_a_retried_append_sends_the_same_idempotency_key_every_time():
    seen: list[httpx.Request] = []
    client = mock_client(
        httpx.ReadTimeout("slow"), (503, {"detail": "db"}), (201, {"iteration": 1}), seen=seen
    )
    assert client.append_turn("s", [{"role": "user", "content": "x"}]) == {"iteration": 1}
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 3 and len(keys) == 1


def test_a_write_that_may_have_happened_is_not_repeated():
    # A timeout after sending a POST without an Idempotency-Key: it may have been stored.
    seen: list[httpx.Request] = []
    client = mock_client(httpx.ReadTimeout("slow"), (201, {}), seen=seen)
    with pytest.raises(Unreachable) as caught:
        client.remember("the CI runs on PostgreSQL")
    assert isinstance(caught.value, httpx.TransportError)  # old `except` clauses still work
    assert len(seen) == 1
    seen.clear()
    client = mock_client((502, {"detail": "bad gateway"}), (201, {}), seen=seen)
    with pytest.raises(ServerError):
        client.add_finding("s", tool="grep", fact="2 matches")
    assert len(seen) == 1


def test_a_request_that_never_left_and_a_429_are_retried_for_every_operation():
    seen: list[httpx.Request] = []
    client = mock_client(
        httpx.ConnectError("refused"),
        (429, {"detail": "slow down"}, {"Retry-After": "0"}),
        (201, {"created": True}),
        seen=seen,
    )
    assert client.remember("a fact") == {"created": True}
    assert len(seen) == 3


def test_retries_give_up_with_the_last_error():
    client = mock_client(*[(503, {"detail": "database unavailable"}, {"Retry-After": "0"})] * 3)
    with pytest.raises(ServiceUnavailable) as caught:
        client.session("s")
    assert caught.value.detail == "database unavailable"
    assert caught.value.retry_after == 0
    # Locked out for minutes: no point waiting, the error comes at once.
    seen: list[httpx.Request] = []
    client = mock_client((429, {"detail": "locked"}, {"Retry-After": "300"}), seen=seen)
    with pytest.raises(RateLimited):
        client.session("s")
    assert len(seen) == 1
    client = mock_client(*[httpx.ConnectError("refused")] * 3)
    with pytest.raises(Unreachable):
        client.health()


def test_retries_zero_sends_once():
    seen: list[httpx.Request] = []
    client = mock_client(httpx.ConnectError("refused"), seen=seen, retries=0)
    client.retry = RetryPolicy(retries=0)
    with pytest.raises(Unreachable):
        client.health()
    assert len(seen) == 1


def test_async_client_over_http(live_server):
    agent = Agent.objects.create(name="async")
    key = ApiKey.issue(agent)[1]

    async def work():
        async with AsyncMemoryClient(live_server.url, key) as memory:
            await memory.append_turn(
                "a", [{"role": "user", "content": "hello"}], idempotency_key="one"
            )
            await memory.append_turn(
                "a", [{"role": "user", "content": "hello"}], idempotency_key="one"
            )
            await memory.append_turn("a", [{"role": "assistant", "content": "hi"}])
            history = await memory.history("a")
            turns = [t["iteration"] async for t in memory.turns("a", page_size=1)]
            keys = [s["key"] async for s in memory.sessions()]
            await memory.set_context_item("a", "branch", "main")
            items = await memory.context_items("a")
            with pytest.raises(NotFound):
                await memory.session("absent")
            return history, turns, keys, items

    history, turns, keys, items = asyncio.run(work())
    assert [m["content"] for m in history["messages"]] == ["hello", "hi"]
    assert turns == [1, 2] and keys == ["a"]
    assert items[0]["value"] == "main"


def test_the_async_client_has_every_method_of_the_sync_one():
    public = {n for n in dir(MemoryClient) if not n.startswith("_")} - {"close", "retry"}
    unsent = AsyncMemoryClient("http://memory", "k")  # nothing below sends a request
    for name in public:
        method = getattr(AsyncMemoryClient, name)
        if name in ("sessions", "messages", "turns"):
            arguments = ("s",) if name != "sessions" else ()
            pages = getattr(unsent, name)(*arguments)
            assert inspect.isasyncgen(pages), name
            asyncio.run(pages.aclose())
            sync = inspect.signature(getattr(MemoryClient, name)).parameters
            assert inspect.signature(method).parameters == sync, name
        elif name == "findings":
            assert inspect.iscoroutinefunction(method), name
        else:
            # Written once; the async client's `_send` makes each a coroutine.
            sync = inspect.signature(getattr(MemoryClient, name))
            assert inspect.signature(method) == sync, name
    assert asyncio.iscoroutinefunction(AsyncMemoryClient._send)


# One call of each client method, with arguments, and the operations it must reach.
EVERY_CALL = [
    ("health", (), {}),
    ("agent", (), {}),
    ("update_agent", (), {"max_messages": 5}),
    ("put_session", ("s",), {"goal": "g"}),
    ("session", ("s",), {}),
    ("delete_session", ("s",), {}),
    ("sessions_page", (), {}),
    ("stats", ("s",), {}),
    ("append_turn", ("s", [{"role": "user", "content": "x"}]), {}),
    ("history", ("s",), {}),
    ("messages_page", ("s",), {}),
    ("turns_page", ("s",), {}),
    ("subtasks", ("s",), {}),
    ("add_subtask", ("s", "t"), {}),
    ("update_subtask", ("s", 1), {"status": "done"}),
    ("delete_subtask", ("s", 1), {}),
    ("context", ("s",), {}),
    ("context_items", ("s",), {}),
    ("set_context_item", ("s", "k", "v"), {}),
    ("delete_context_item", ("s", "k"), {}),
    ("add_finding", ("s",), {"tool": "grep", "fact": "f"}),
    ("findings_page", ("s",), {}),
    ("check_finding", ("s", "grep", "x"), {}),
    ("check_finding", ("s", "edit", {"old": "a" * 2000}), {}),
    ("remember", ("fact",), {}),
    ("memories_page", (), {}),
    ("recall", ("q",), {}),
    ("memory", (1,), {}),
    ("update_memory", (1,), {"confidence": 0.5}),
    ("forget", (1,), {}),
    ("restore_memory", (1,), {}),
    ("memory_history", (1,), {}),
    ("tools", (), {}),
    ("call_tool", ("recall", {"query": "x"}), {}),
    ("search", ("q",), {}),
    ("export_session", ("s",), {}),
    ("export_agent", (), {}),
    ("import_export", ({"format": "memoryapp-export"},), {}),
]


def test_the_client_covers_every_operation_of_the_api():
    from memoryapp.api.api import api

    document = api.get_openapi_schema()
    operations = {
        (method.upper(), path.removeprefix("/api/v1"))
        for path, item in document["paths"].items()
        for method in item
    }
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    client = MemoryClient("http://memory", "k", transport=httpx.MockTransport(answer))
    called = {name for name, _, _ in EVERY_CALL}
    assert called >= {
        n for n in dir(MemoryClient) if not n.startswith("_") and n not in ("close", "retry")
    } - {"sessions", "messages", "turns", "findings"}
    for name, args, kwargs in EVERY_CALL:
        getattr(client, name)(*args, **kwargs)

    def template_of(request: httpx.Request) -> tuple[str, str]:
        path = request.url.path.removeprefix("/api/v1")
        for method, template in operations:
            pattern = re.sub(r"\{[^}]+\}", "[^/]+", template)
            if method == request.method and re.fullmatch(pattern, path):
                return method, template
        raise AssertionError(f"{request.method} {path} is not an operation of the API")

    reached = {template_of(r) for r in seen}
    assert reached == operations, sorted(operations - reached)
    # Bodies are JSON objects the API accepts as such.
    assert all(json.loads(r.content) is not None for r in seen if r.content)


def test_stats_count_what_the_session_holds_and_the_calls_avoided(client):
    client.append_turn(
        "s",
        [
            {"role": "user", "content": "héllo"},  # 6 bytes in UTF-8
            {"role": "assistant", "content": "grep", "tool_calls": [{"id": "c1"}]},
        ],
        usage={"input_tokens": 10, "output_tokens": 4},
        tool_calls=[{"tool": "grep", "query": "TODO", "output": "a.py:1: TODO", "call_id": "c1"}],
    )
    finding = client.add_finding("s", tool="grep", query="TODO", fact="1 match in a.py")
    known = finding["finding"]["id"]
    client.append_turn(
        "s",
        [{"role": "tool", "content": "Known: 1 match in a.py", "tool_call_id": "c2"}],
        usage={"input_tokens": 20, "output_tokens": 0},
        tool_calls=[{"tool": "grep", "query": "TODO", "call_id": "c2", "known_from": known}],
    )
    stats = client.stats("s")
    assert stats["redundant_tool_calls_avoided"] == 1
    assert stats["entries"]["messages"] == 3
    assert stats["entries"]["turns"] == 2
    assert stats["entries"]["tool_calls"] == 2
    assert stats["entries"]["total"] == sum(v for k, v in stats["entries"].items() if k != "total")
    assert stats["average_turn_tokens"]["input"] == 15.0
    assert stats["average_turn_tokens"]["output"] == 2.0
    message_bytes = sum(len(m.content.encode()) for m in Message.objects.all())
    assert stats["bytes"] >= message_bytes + len("TODO") * 2 + len("1 match in a.py")
    skipped = ToolCall.objects.get(skipped=True)
    assert skipped.finding_id == known and skipped.call_id == "c2"
    # Extraction leaves the finding the skipped call points to as it was.
    assert Finding.objects.get(pk=known).fact == "1 match in a.py"


def test_a_skip_must_name_a_finding_of_the_session(client):
    client.put_session("other")
    client.add_finding("other", tool="grep", query="x", fact="elsewhere")
    foreign = Finding.objects.get().id
    with pytest.raises(InvalidRequest) as caught:
        client.append_turn(
            "s",
            [{"role": "user", "content": "x"}],
            tool_calls=[{"tool": "grep", "query": "x", "known_from": foreign}],
        )
    assert "known_from" in str(caught.value.detail)
    with pytest.raises(NotFound):
        client.session("s")  # nothing stored, not even the session
