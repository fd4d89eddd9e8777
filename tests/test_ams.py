"""The Redis Agent Memory Server API (memoryapp/ams), driven by that server's own published
client, `agent-memory-client` (pinned in pyproject.toml), unchanged, against a live server
with the key in its base URL: every client method that maps to an endpoint, what each
stores in memoryapp's model (and so on the dashboard), the smallest change a PUT of a
whole working memory makes, the filters in both spellings, refusals that change nothing,
and keys kept out of Django's and gunicorn's logs. The plain modules (context windows,
the forgetting policy) are tested as functions; list reads count their queries."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import runpy
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from agent_memory_client import (
    ForgetPolicy,
    MemoryAPIClient,
    MemoryClientConfig,
    MemoryNotFoundError,
    MemoryServerError,
    create_memory_client,
)
from agent_memory_client.filters import (
    CreatedAt,
    Entities,
    LastAccessed,
    MemoryType,
    Namespace,
    SessionId,
    Topics,
    UserId,
)
from agent_memory_client.models import ClientMemoryRecord, MemoryMessage, WorkingMemory
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from memoryapp.ams import forgetting, windows
from memoryapp.ams.models import MemoryRecord
from memoryapp.core.models import (
    Agent,
    ApiKey,
    ContextItem,
    Memory,
    MemoryEvent,
    Message,
    Session,
    Turn,
)
from tests.conftest import logged_in_member

live = pytest.mark.django_db(transaction=True)
# The client's own deprecations (its get-or-create calls its deprecated get).
pytestmark = [
    pytest.mark.filterwarnings("ignore:get_working_memory is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Tool name 'create_long_term_memory':DeprecationWarning"),
]
ROOT = Path(__file__).resolve().parent.parent


class Ams:
    """The async client, called synchronously: each call runs in an event loop of its own,
    so a test checks the database between calls (the ORM refuses a running loop)."""

    def __init__(self, base_url: str, **config) -> None:
        self.base_url = base_url
        self.config = config

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            async def go():
                config = MemoryClientConfig(base_url=self.base_url, **self.config)
                async with MemoryAPIClient(config) as client:
                    return await getattr(client, name)(*args, **kwargs)

            return asyncio.run(go())

        return call

    def search_all(self, text: str, **kwargs) -> list:
        async def go():
            async with MemoryAPIClient(MemoryClientConfig(base_url=self.base_url)) as client:
                return [m async for m in client.search_all_long_term_memories(text, **kwargs)]

        return asyncio.run(go())

    def raw(self, method: str, path: str, **kwargs) -> httpx.Response:
        """A request the client would not send (the server's spellings, bad input)."""
        return httpx.request(method, self.base_url + path, timeout=30, **kwargs)


@pytest.fixture
def ams(live_server, api_key, in_process_tasks) -> Ams:
    return Ams(f"{live_server.url}/ams/{api_key}")


def at(minutes_ago: float) -> datetime:
    return datetime.now(UTC) - timedelta(minutes=minutes_ago)


def message(id_: str, role: str, content: str, minutes_ago: float = 1) -> MemoryMessage:
    return MemoryMessage(id=id_, role=role, content=content, created_at=at(minutes_ago))


def counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Session, Message, Turn, Memory, MemoryRecord, ContextItem, MemoryEvent)
    }


# --- the key in the base URL ----------------------------------------------------------


@live
def test_the_key_travels_in_the_base_url_and_a_wrong_one_is_a_401(ams, live_server):
    assert ams.health_check().now == pytest.approx(time.time(), abs=60)
    asyncio.run(_connect_and_close(ams.base_url))
    wrong = Ams(f"{live_server.url}/ams/mk_wrong")
    with pytest.raises(MemoryServerError) as refused:
        wrong.health_check()
    assert refused.value.status_code == 401
    assert "/ams/" in str(refused.value)
    with pytest.raises(MemoryServerError) as refused:
        wrong.list_sessions()
    assert refused.value.status_code == 401
    # Every answer is JSON, also where no endpoint is; the key is not in it.
    key = ams.base_url.rsplit("/", 1)[1]
    for method, path, status in (
        ("GET", "/v1/nothing-here", 404),
        ("POST", "/v1/health", 405),
        ("GET", "/v1/working-memory", 404),  # Django would redirect to the redacted path
        ("GET", "", 404),
    ):
        answer = ams.raw(method, path)
        assert answer.status_code == status
        assert answer.headers["Content-Type"].startswith("application/json")
        assert key not in answer.text
    assert "/ams/[redacted]/v1/nothing-here" in ams.raw("GET", "/v1/nothing-here").json()["detail"]


@pytest.mark.django_db
def test_wrong_keys_in_the_path_count_against_the_address(settings):
    settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES = "2/300"
    client = Client()
    statuses = [client.get(f"/ams/mk_wrong{i}/v1/health").status_code for i in range(3)]
    assert statuses == [401, 401, 429]
    refused = client.get("/ams/mk_wrong/v1/health")
    assert refused.status_code == 429 and refused["Retry-After"]
    assert "mk_wrong" not in refused.content.decode()


async def _connect_and_close(base_url: str) -> None:
    client = await create_memory_client(base_url)  # checks health, so the key
    await client.close()


@live
def test_a_revoked_key_and_another_agents_key_see_nothing(ams, live_server, api_key):
    ams.put_working_memory("mine", WorkingMemory(session_id="mine", messages=[]))
    ams.create_long_term_memory([ClientMemoryRecord(id="m1", text="Mine only")])
    other = Ams(f"{live_server.url}/ams/{ApiKey.issue(Agent.objects.create(name='other'))[1]}")
    assert other.list_sessions().sessions == []
    with pytest.raises(MemoryNotFoundError):
        other.get_working_memory("mine")
    with pytest.raises(MemoryNotFoundError):
        other.get_long_term_memory("m1")
    assert other.search_long_term_memory("mine").total == 0
    other.delete_long_term_memories(["m1"])
    assert Memory.objects.get().status == Memory.Status.ACTIVE
    ApiKey.objects.update(revoked_at=at(0))
    with pytest.raises(MemoryServerError) as refused:
        ams.health_check()
    assert refused.value.status_code == 401


# --- working memory ---------------------------------------------------------------------


@live
def test_a_working_memory_is_a_session_on_the_dashboard(ams, agent):
    created, empty = ams.get_or_create_working_memory("chat-1", namespace="app", user_id="ann")
    assert created is True and empty.messages == [] and empty.namespace == "app"
    created, again = ams.get_or_create_working_memory("chat-1", namespace="app", user_id="ann")
    assert created is False and again.user_id == "ann"
    memory = WorkingMemory(
        session_id="chat-1",
        namespace="app",
        messages=[
            message("m1", "system", "You plan trips.", 5),
            message("m2", "user", "I want to visit Lisbon in May.", 4),
            message("m3", "assistant", "Lisbon in May is warm; pack light.", 3),
        ],
        memories=[
            ClientMemoryRecord(
                id="r1",
                text="Ann wants to visit Lisbon in May",
                memory_type="episodic",
                topics=["travel"],
                entities=["Lisbon"],
                event_date=datetime(2027, 5, 1, tzinfo=UTC),
            )
        ],
        data={"trip": {"city": "Lisbon", "month": 5}, "budget": 1200},
        context="Ann is planning a trip.",
        ttl_seconds=7200,
    )
    stored = ams.put_working_memory("chat-1", memory, model_name="gpt-4o")
    assert [(m.id, m.role, m.content) for m in stored.messages] == [
        (m.id, m.role, m.content) for m in memory.messages
    ]
    # The client's own times, to the millisecond JSON carries.
    sent = memory.messages[1].created_at
    assert abs(stored.messages[1].created_at - sent) < timedelta(milliseconds=1)
    assert stored.data == {"trip": {"city": "Lisbon", "month": 5}, "budget": 1200}
    assert stored.context == "Ann is planning a trip."
    assert [(r.id, r.text, r.topics, r.entities, r.memory_type.value) for r in stored.memories] == [
        ("r1", "Ann wants to visit Lisbon in May", ["travel"], ["Lisbon"], "episodic")
    ]
    assert stored.memories[0].session_id == "chat-1"
    assert stored.ttl_seconds == 7200 and stored.user_id == "ann"
    assert 0 < stored.context_percentage_total_used < stored.context_percentage_until_summarization
    read = ams.get_working_memory("chat-1", namespace="app", context_window_max=100)
    assert read.messages == stored.messages and read.data == stored.data
    assert read.context_percentage_total_used == pytest.approx(read.tokens, abs=0.01)
    assert ams.get_working_memory("chat-1").context_percentage_total_used is None
    # Another namespace or user is another working memory: absent here.
    with pytest.raises(MemoryNotFoundError):
        ams.get_working_memory("chat-1", namespace="elsewhere")
    with pytest.raises(MemoryNotFoundError):
        ams.get_working_memory("chat-1", user_id="bob")

    # In memoryapp's model, as any session: messages in a turn, items, a memory.
    session = Session.objects.get(agent=agent, key="chat-1")
    assert session.metadata["ams"]["namespace"] == "app" and session.ttl_seconds == 7200
    assert list(session.messages.values_list("client_id", "seq", "role")) == [
        ("m1", 1, "system"),
        ("m2", 2, "user"),
        ("m3", 3, "assistant"),
    ]
    assert session.message_count == 3 and session.turn_count == 1
    assert session.token_count == sum(m.token_count for m in session.messages.all())
    items = {i.key: i.value for i in ContextItem.objects.filter(session=session)}
    assert items["data.trip"] == {"city": "Lisbon", "month": 5} and items["data.budget"] == 1200
    assert items["context"] == "Ann is planning a trip."
    fact = Memory.objects.get()
    assert (fact.content, fact.session, fact.memory_type) == (
        memory.memories[0].text,
        session,
        "fact",
    )
    assert MemoryEvent.objects.filter(target_kind="memory", target_id=fact.pk).count() == 1

    viewer = logged_in_member("viewer", agent, "vera")
    page = viewer.get(f"/agents/{agent.name}/sessions/chat-1/")
    assert page.status_code == 200
    assert [r["seq"] for r in page.context["rows"]] == [1, 2, 3]
    assert {i.key for i in page.context["context_items"]} >= {"context", "data.trip"}
    assert fact in viewer.get(f"/agents/{agent.name}/memories/").context["memories"]

    listed = ams.list_sessions(namespace="app", user_id="ann")
    assert (listed.sessions, listed.total) == (["chat-1"], 1)
    assert ams.list_sessions(namespace="nope").total == 0

    assert ams.delete_working_memory("chat-1").status == "ok"
    assert not Session.objects.exists()
    assert Memory.objects.get().status == Memory.Status.ACTIVE  # long-term stays
    assert MemoryRecord.objects.get().working_memory_id is None
    assert ams.delete_working_memory("chat-1").status == "ok"  # absent: deleted already


@live
def test_sessions_list_newest_first_page_by_page(ams):
    for i in range(5):
        ams.put_working_memory(f"s{i}", WorkingMemory(session_id=f"s{i}", namespace="n"))
    first = ams.list_sessions(limit=2, offset=0, namespace="n")
    second = ams.list_sessions(limit=2, offset=2, namespace="n")
    assert first.sessions == ["s4", "s3"] and second.sessions == ["s2", "s1"]
    assert first.total == second.total == 5


@live
def test_a_put_stores_the_smallest_change(ams, agent):
    key = "chat-2"
    ams.get_or_create_working_memory(key)
    ams.append_messages_to_working_memory(
        key,
        [
            message("a", "user", "What is our deploy command?"),
            message("b", "assistant", "make ship"),
        ],
    )
    ams.append_messages_to_working_memory(key, [message("c", "user", "And rollbacks?")])
    session = Session.objects.get(key=key)
    assert (session.message_count, session.turn_count) == (3, 2)
    assert list(Turn.objects.filter(session=session).values_list("message_count", flat=True)) == [
        2,
        1,
    ]

    # The same working memory again: nothing stored twice, nothing changed.
    whole = ams.get_working_memory(key)
    before = counts()
    rows = list(Message.objects.order_by("seq").values())
    again = ams.put_working_memory(key, whole)
    assert counts() == before
    assert list(Message.objects.order_by("seq").values()) == rows
    assert again.messages == whole.messages

    # A changed message is an edit with its earlier version kept.
    whole.messages[1] = MemoryMessage(
        id="b",
        role="assistant",
        content="make ship ENV=prod",
        created_at=whole.messages[1].created_at,
    )
    edited = ams.put_working_memory(key, whole)
    assert [m.content for m in edited.messages][1] == "make ship ENV=prod"
    b = Message.objects.get(client_id="b")
    assert b.content == "make ship ENV=prod" and b.seq == 2
    assert [(r["action"], r["content"], r["actor"]) for r in b.revisions] == [
        ("edit", "make ship", f"agent:{agent.name}")
    ]
    session.refresh_from_db()
    assert (session.message_count, session.turn_count) == (3, 2)
    assert session.token_count == sum(m.token_count for m in session.messages.all())

    # A message left out is removed: recorded, kept, and back when named again.
    without = whole.model_copy(update={"messages": [whole.messages[0], whole.messages[2]]})
    assert [m.id for m in ams.put_working_memory(key, without).messages] == ["a", "c"]
    b.refresh_from_db()
    assert b.removed_at is not None and b.revisions[-1]["action"] == "remove"
    assert [m.id for m in ams.get_working_memory(key).messages] == ["a", "c"]
    assert Message.objects.count() == 3
    back = ams.put_working_memory(key, whole)
    assert [m.id for m in back.messages] == ["a", "b", "c"]
    b.refresh_from_db()
    assert b.removed_at is None and [r["action"] for r in b.revisions] == [
        "edit",
        "remove",
        "restore",
    ]
    assert Message.objects.count() == 3 and Turn.objects.count() == 2


@live
def test_messages_stored_through_api_v1_keep_their_place(ams, api):
    api.post(
        "/api/v1/sessions/mixed/turns",
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "ls", "arguments": "{}"},
                        }
                    ],
                },
            ]
        },
    )
    created, read = ams.get_or_create_working_memory("mixed")
    assert created is False
    assert [(m.id, m.content) for m in read.messages] == [
        ("memoryapp-message-1", "hi"),
        ("memoryapp-message-2", ""),
    ]
    before = counts()
    appended = ams.append_messages_to_working_memory("mixed", [message("n1", "user", "next")])
    assert [m.id for m in appended.messages] == ["memoryapp-message-1", "memoryapp-message-2", "n1"]
    assert counts()["Message"] == before["Message"] + 1
    assert Message.objects.get(seq=2).tool_calls  # the call is kept, untouched
    # memoryapp's ids are its own: a new message cannot take one.
    refused = ams.raw(
        "PUT",
        "/v1/working-memory/mixed",
        json={"messages": [{"id": "memoryapp-message-9", "role": "user", "content": "x"}]},
    )
    assert refused.status_code == 422 and "memoryapp's" in refused.json()["detail"]


@live
def test_ttl_seconds_is_the_sessions_time_to_live(ams):
    ams.put_working_memory("short", WorkingMemory(session_id="short", ttl_seconds=120))
    session = Session.objects.get(key="short")
    assert session.ttl_seconds == 120
    assert abs((session.expires_at - datetime.now(UTC)).total_seconds() - 120) < 30
    Session.objects.update(expires_at=at(1))
    with pytest.raises(MemoryNotFoundError):
        ams.get_working_memory("short")
    created, fresh = ams.get_or_create_working_memory("short")
    assert created is True and fresh.ttl_seconds is None  # the agent's TTL again
    assert Session.objects.get().ttl_seconds is None


@live
def test_the_clients_working_memory_helpers(ams, agent):
    key = "chat-3"
    ams.set_working_memory_data(key, {"theme": "dark", "lang": "en"})
    ams.update_working_memory_data(key, {"theme": "light"})
    ams.update_working_memory_data(key, {"prefs": {"a": 1}}, merge_strategy="deep_merge")
    ams.update_working_memory_data(key, {"prefs": {"b": 2}}, merge_strategy="deep_merge")
    assert ams.get_working_memory(key).data == {
        "theme": "light",
        "lang": "en",
        "prefs": {"a": 1, "b": 2},
    }
    ams.update_working_memory_data(key, {"only": True}, merge_strategy="replace")
    assert ams.get_working_memory(key).data == {"only": True}
    # Each change of a data key is in that working-context item's history.
    theme = MemoryEvent.objects.filter(target_kind="context_item").order_by("id")
    assert [e.action for e in theme if (e.before or e.after)["key"] == "data.theme"] == [
        "add",
        "update",
        "delete",
    ]
    result = ams.update_memory_data_tool(key, {"step": 2})
    assert result["success"] is True and ams.get_working_memory(key).data["step"] == 2

    ams.add_memories_to_working_memory(key, [ClientMemoryRecord(id="w1", text="Likes green tea")])
    assert ams.add_memory_tool(key, "Works at night", "semantic", topics=["habits"])["success"]
    state = ams.get_working_memory_tool(key)
    assert state["memory_count"] == 2 and state["data"]["step"] == 2
    assert ams.get_or_create_working_memory_tool("fresh-one")["created"] is True
    ams.promote_working_memories_to_long_term(key)
    texts = {m.text for m in ams.search_long_term_memory("").memories}
    assert texts == {"Likes green tea", "Works at night"}
    assert Memory.objects.count() == 2  # promoting what is already long-term adds nothing


# --- long-term memory --------------------------------------------------------------------


@live
def test_long_term_memories_are_memoryapps_memories(ams, agent):
    ams.put_working_memory("origin", WorkingMemory(session_id="origin"))
    ams.create_long_term_memory(
        [
            ClientMemoryRecord(
                id="r1",
                text="The user prefers dark mode",
                memory_type="semantic",
                topics=["ui"],
                entities=["dark mode"],
                namespace="app",
                user_id="ann",
                session_id="origin",
            ),
            ClientMemoryRecord(id="r2", text="The user flew to Oslo", memory_type="episodic"),
        ]
    )
    r1 = ams.get_long_term_memory("r1")
    assert (r1.text, r1.topics, r1.entities, r1.namespace, r1.user_id, r1.session_id) == (
        "The user prefers dark mode",
        ["ui"],
        ["dark mode"],
        "app",
        "ann",
        "origin",
    )
    assert Memory.objects.get(content=r1.text).session == Session.objects.get(key="origin")

    # The same text again under another id is not stored twice; without deduplication
    # it is a memory of its own.
    ams.create_long_term_memory([ClientMemoryRecord(id="r3", text="the user prefers dark mode.")])
    with pytest.raises(MemoryNotFoundError):
        ams.get_long_term_memory("r3")
    ams.create_long_term_memory(
        [ClientMemoryRecord(id="r4", text="The user prefers dark mode")], deduplicate=False
    )
    assert ams.get_long_term_memory("r4").text == "The user prefers dark mode"
    assert Memory.objects.filter(content="The user prefers dark mode").count() == 2
    # The same record again changes nothing.
    before = counts()
    ams.create_long_term_memory([ClientMemoryRecord(**r1.model_dump())])
    assert counts() == before

    # An edit goes through memoryapp's history: new text replaces the fact, same id.
    edited = ams.edit_long_term_memory(
        "r1", {"text": "The user prefers light mode", "topics": ["ui", "theme"]}
    )
    assert (edited.id, edited.text, edited.topics) == (
        "r1",
        "The user prefers light mode",
        ["ui", "theme"],
    )
    old = Memory.objects.get(
        content="The user prefers dark mode", ams_record__isnull=True, status="superseded"
    )
    assert old.superseded_by.content == "The user prefers light mode"
    assert MemoryEvent.objects.filter(target_kind="memory", target_id=old.pk).count() == 2
    assert ams.edit_long_term_memory("r1", {"namespace": "other"}).namespace == "other"

    # Changed on the dashboard (a person's revision): the client's id follows the fact.
    person = Memory.objects.get(content="The user prefers light mode")
    person.edit_from_dashboard(
        "user:vera", content="Prefers light mode", memory_type="fact", confidence=0.9
    )
    assert ams.get_long_term_memory("r1").text == "Prefers light mode"

    # Delete archives (restorable on the dashboard); the same id again brings it back.
    assert ams.delete_long_term_memories(["r2", "unknown"]).status == "ok, deleted 1 memories"
    assert Memory.objects.get(content="The user flew to Oslo").status == Memory.Status.ARCHIVED
    with pytest.raises(MemoryNotFoundError):
        ams.get_long_term_memory("r2")
    ams.create_long_term_memory([ClientMemoryRecord(id="r2", text="The user flew to Bergen")])
    assert ams.get_long_term_memory("r2").text == "The user flew to Bergen"
    assert Memory.objects.get(content="The user flew to Bergen").status == Memory.Status.ACTIVE

    # A memory written through /api/v1 has an id of memoryapp's.
    with transaction.atomic():
        own, _ = Memory.remember(
            agent, "Deploys on Fridays", memory_type="fact", confidence=0.8, actor="t"
        )
    assert ams.get_long_term_memory(f"memoryapp-memory-{own.pk}").text == "Deploys on Fridays"
    tagged = ams.edit_long_term_memory(f"memoryapp-memory-{own.pk}", {"topics": ["ops"]})
    assert tagged.topics == ["ops"] and tagged.id == f"memoryapp-memory-{own.pk}"

    ams.bulk_create_long_term_memories(
        [[ClientMemoryRecord(id=f"b{i}", text=f"Bulk fact {i}") for i in range(3)]],
        batch_size=2,
        delay_between_batches=0,
    )
    assert MemoryRecord.objects.filter(record_id__startswith="b").count() == 3


@live
def test_memory_tools_resolve_through_the_api(ams):
    ams.create_long_term_memory([ClientMemoryRecord(id="t1", text="Coffee at nine")])
    calls = [
        ("get_long_term_memory", {"memory_id": "t1"}),
        ("edit_long_term_memory", {"memory_id": "t1", "text": "Coffee at ten"}),
        ("search_memory", {"query": "coffee"}),
        ("create_long_term_memory", {"memories": [{"text": "Tea at five", "topics": ["tea"]}]}),
        ("lazily_create_long_term_memory", {"text": "Naps after lunch"}),
        ("get_or_create_working_memory", {}),
        ("delete_long_term_memories", {"memory_ids": ["t1"]}),
    ]
    results = asyncio.run(_resolve(ams.base_url, calls))
    assert [r["success"] for r in results] == [True] * len(calls), results
    assert results[2]["result"]["memories"][0]["text"] == "Coffee at ten"
    assert set(Memory.objects.filter(status="active").values_list("content", flat=True)) == {
        "Tea at five",
        "Naps after lunch",
    }


async def _resolve(base_url: str, calls: list) -> list:
    """The first call as an OpenAI tool call, the rest as a batch of function calls."""
    (name, arguments), *rest = calls
    openai = {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    async with MemoryAPIClient(MemoryClientConfig(base_url=base_url)) as client:
        first = await client.resolve_tool_call(openai, session_id="tools")
        others = await client.resolve_function_calls(
            [{"name": n, "arguments": a} for n, a in rest], session_id="tools"
        )
    return [first, *others]


@pytest.fixture
def five_memories(ams):
    ams.create_long_term_memory(
        [
            ClientMemoryRecord(
                id="tea",
                text="Ann drinks green tea every morning",
                session_id="s1",
                namespace="home",
                user_id="ann",
                topics=["drinks", "morning"],
                entities=["tea"],
                memory_type="semantic",
            ),
            ClientMemoryRecord(
                id="coffee",
                text="Bob drinks coffee at night",
                session_id="s2",
                namespace="home",
                user_id="bob",
                topics=["drinks", "night"],
                entities=["coffee"],
                memory_type="semantic",
            ),
            ClientMemoryRecord(
                id="trip",
                text="Ann drank mint tea in Marrakesh",
                session_id="s1",
                namespace="travel",
                user_id="ann",
                topics=["trips", "drinks"],
                entities=["tea", "Marrakesh"],
                memory_type="episodic",
                event_date=datetime(2026, 3, 1, tzinfo=UTC),
            ),
            ClientMemoryRecord(
                id="desk",
                text="Bob works at a standing desk",
                session_id="s2",
                namespace="work",
                user_id="bob",
                topics=["work"],
                memory_type="semantic",
            ),
            ClientMemoryRecord(
                id="chat",
                text="Ann said hello",
                session_id="s3",
                namespace="home",
                user_id="ann",
                memory_type="message",
            ),
        ]
    )
    # Made at different times (the date filters).
    for minutes, record_id in enumerate(["tea", "coffee", "trip", "desk", "chat"]):
        MemoryRecord.objects.filter(record_id=record_id).update(created_at=at(60 * (5 - minutes)))
    return ams


def ids(results) -> set[str]:
    return {m.id for m in results.memories}


@live
def test_search_filters_as_the_client_sends_them(five_memories):
    ams = five_memories
    assert ids(ams.search_long_term_memory("tea")) == {"tea", "trip"}
    ranked = ams.search_long_term_memory("green tea")
    assert ranked.memories[0].id == "tea" and ranked.memories[0].dist == 0.0
    assert ranked.memories[-1].dist > 0
    assert ids(ams.search_long_term_memory("green tea", distance_threshold=0.0)) == {"tea"}
    assert ids(ams.search_long_term_memory("", session_id=SessionId(eq="s1"))) == {"tea", "trip"}
    assert ids(ams.search_long_term_memory("", session_id=SessionId(in_=["s2", "s3"]))) == {
        "coffee",
        "desk",
        "chat",
    }
    assert ids(ams.search_long_term_memory("", session_id=SessionId(not_eq="s1"))) == {
        "coffee",
        "desk",
        "chat",
    }
    assert ids(ams.search_long_term_memory("", session_id=SessionId(not_in=["s1", "s2"]))) == {
        "chat"
    }
    assert ids(ams.search_long_term_memory("", namespace=Namespace(eq="travel"))) == {"trip"}
    assert ids(ams.search_long_term_memory("", user_id=UserId(eq="bob"))) == {"coffee", "desk"}
    assert ids(ams.search_long_term_memory("", topics=Topics(any=["night", "work"]))) == {
        "coffee",
        "desk",
    }
    assert ids(ams.search_long_term_memory("", topics=Topics(all=["drinks", "morning"]))) == {"tea"}
    assert ids(ams.search_long_term_memory("", topics=Topics(none=["drinks"]))) == {"desk", "chat"}
    assert ids(ams.search_long_term_memory("", entities=Entities(any=["tea"]))) == {"tea", "trip"}
    assert ids(ams.search_long_term_memory("", entities=Entities(all=["tea", "Marrakesh"]))) == {
        "trip"
    }
    assert ids(ams.search_long_term_memory("", memory_type=MemoryType(eq="episodic"))) == {"trip"}
    assert ids(
        ams.search_long_term_memory("", memory_type=MemoryType(not_in=["semantic", "episodic"]))
    ) == {"chat"}
    assert ids(ams.search_long_term_memory("", created_at=CreatedAt(gte=at(150)))) == {
        "desk",
        "chat",
    }
    assert ids(ams.search_long_term_memory("", created_at=CreatedAt(lte=at(200)))) == {
        "tea",
        "coffee",
    }
    # Searches mark what they served as read: long ago, only the trip was.
    Memory.objects.update(last_accessed_at=at(1))
    Memory.objects.filter(ams_record__record_id="trip").update(last_accessed_at=at(600))
    assert ids(ams.search_long_term_memory("", last_accessed=LastAccessed(lte=at(300)))) == {"trip"}
    assert ids(
        ams.search_long_term_memory(
            "drinks", user_id=UserId(eq="ann"), topics=Topics(any=["drinks"])
        )
    ) == {"tea"}
    # The tool form and the LLM-friendly answer.
    tool = ams.search_memory_tool("tea", topics=["trips"], memory_type="episodic", user_id="ann")
    assert [m["id"] for m in tool["memories"]] == ["trip"] and tool["has_more"] is False


@live
def test_search_filters_in_the_servers_spelling(five_memories):
    ams = five_memories

    def found(**body) -> set[str]:
        answer = ams.raw("POST", "/v1/long-term-memory/search", json={"text": "", **body})
        assert answer.status_code == 200, answer.text
        return {m["id"] for m in answer.json()["memories"]}

    assert found(session_id={"ne": "s1"}) == {"coffee", "desk", "chat"}
    assert found(namespace={"any": ["travel", "work"]}) == {"trip", "desk"}
    assert found(user_id={"all": ["ann"]}) == {"tea", "trip", "chat"}
    assert found(topics={"eq": "drinks"}) == {"tea", "coffee", "trip"}
    assert found(topics={"ne": "drinks"}) == {"desk", "chat"}
    assert found(entities={"not_in": ["tea"]}) == {"coffee", "desk", "chat"}
    assert found(memory_type={"ne": "semantic"}) == {"trip", "chat"}
    assert found(memory_type={"any": ["episodic", "message"]}) == {"trip", "chat"}
    assert found(created_at={"gt": at(150).isoformat()}) == {"desk", "chat"}
    assert found(created_at={"between": [at(250).isoformat(), at(150).isoformat()]}) == {
        "coffee",
        "trip",
    }
    assert found(event_date={"lt": "2026-06-01T00:00:00Z"}) == {"trip"}
    assert found(event_date={"eq": "2026-03-01T00:00:00Z"}) == {"trip"}
    refused = ams.raw(
        "POST", "/v1/long-term-memory/search", json={"text": "", "topics": {"some": ["x"]}}
    )
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "payload", "topics", "some"]


@live
def test_search_pages_with_limit_and_offset(five_memories):
    ams = five_memories
    first = ams.search_long_term_memory("", limit=2, offset=0)
    second = ams.search_long_term_memory("", limit=2, offset=2)
    last = ams.search_long_term_memory("", limit=2, offset=4)
    assert (first.total, first.next_offset, second.next_offset, last.next_offset) == (5, 2, 4, None)
    assert [m.id for m in first.memories + second.memories + last.memories] == [
        "chat",
        "desk",
        "trip",
        "coffee",
        "tea",
    ]
    assert {m.id for m in ams.search_all(text="", batch_size=2)} == {
        "tea",
        "coffee",
        "trip",
        "desk",
        "chat",
    }
    # What a search served counts as read.
    assert Memory.objects.filter(access_count__gte=1).count() == 5


@live
def test_forgetting_archives_what_the_policy_picks(five_memories):
    ams = five_memories
    MemoryRecord.objects.filter(record_id__in=["tea", "coffee"]).update(created_at=at(60 * 24 * 40))
    policy = ForgetPolicy(max_age_days=30)
    dry = ams.forget_long_term_memories(policy, dry_run=True, pinned_ids=["tea"])
    assert (dry.scanned, dry.deleted, dry.deleted_ids, dry.dry_run) == (5, 1, ["coffee"], True)
    assert Memory.objects.filter(status="archived").count() == 0
    done = ams.forget_long_term_memories(policy, namespace="home", pinned_ids=["tea"])
    assert (done.scanned, done.deleted_ids, done.dry_run) == (3, ["coffee"], False)
    assert Memory.objects.get(ams_record__record_id="coffee").status == Memory.Status.ARCHIVED
    # Of the semantic ones left (tea, desk) the budget keeps the most recent: desk.
    kept = ams.forget_long_term_memories(ForgetPolicy(budget=1, memory_type_allowlist=["semantic"]))
    assert (kept.scanned, kept.deleted_ids) == (4, ["tea"])
    assert ams.forget_long_term_memories(ForgetPolicy(budget=10), user_id="ann").deleted == 0


# --- the memory prompt --------------------------------------------------------------------


@live
def test_the_memory_prompt_has_summary_recent_messages_and_memories(ams, agent):
    agent.max_messages = 4
    agent.save()
    chat = [
        message(f"p{i}", "user" if i % 2 == 0 else "assistant", f"turn {i} about packing", 30 - i)
        for i in range(8)
    ]
    ams.put_working_memory(
        "trip", WorkingMemory(session_id="trip", messages=chat, context="Ann packs for Lisbon.")
    )
    ams.create_long_term_memory(
        [ClientMemoryRecord(id="lt1", text="Ann always packs an umbrella", topics=["packing"])]
    )
    prompt = ams.memory_prompt(
        "what should I pack?",
        session_id="trip",
        context_window_max=4000,
        long_term_search={"topics": {"any": ["packing"]}, "limit": 5},
    )
    roles = [m["role"] for m in prompt["messages"]]
    texts = [m["content"]["text"] for m in prompt["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "system", "user"]
    assert texts[0].startswith("## A summary of the conversation so far:\nAnn packs for Lisbon.")
    assert len(texts[0].split("\n\n")) == 2  # the client's context, then memoryapp's summary
    assert texts[1:5] == [f"turn {i} about packing" for i in range(4, 8)]
    assert texts[5] == (
        "## Long term memories related to the user's query\n"
        "- Ann always packs an umbrella (ID: lt1)"
    )
    assert texts[-1] == "what should I pack?"
    assert [m["id"] for m in prompt["long_term_memories"]] == ["lt1"]
    # A smaller window keeps fewer recent messages.
    small = ams.memory_prompt("x", session_id="trip", context_window_max=20)
    assert 1 < len(small["messages"]) < 6
    hydrated = ams.hydrate_memory_prompt("umbrella", topics={"any": ["packing"]})
    assert "Ann always packs an umbrella" in hydrated["messages"][0]["content"]["text"]
    # `long_term_search: true` in the server's spelling; neither session nor search: 422.
    answer = ams.raw(
        "POST", "/v1/memory/prompt", json={"query": "umbrella", "long_term_search": True}
    )
    assert (
        answer.status_code == 200 and "umbrella" in answer.json()["messages"][0]["content"]["text"]
    )
    assert ams.raw("POST", "/v1/memory/prompt", json={"query": "x"}).status_code == 422


# --- refusals -------------------------------------------------------------------------------


@live
def test_bad_requests_are_refused_and_change_nothing(ams, settings):
    ams.put_working_memory(
        "taken",
        WorkingMemory(session_id="taken", namespace="a", messages=[message("x", "user", "hi")]),
    )
    before = counts()
    ok_message = {"id": "1", "role": "user", "content": "hello"}
    for method, path, body, status in [
        ("PUT", "/v1/working-memory/new", {"messages": [ok_message, ok_message]}, 422),
        ("PUT", "/v1/working-memory/new", {"messages": [{**ok_message, "role": "robot"}]}, 422),
        ("PUT", "/v1/working-memory/new", {"messages": [{"role": "user", "content": "x"}]}, 422),
        ("PUT", "/v1/working-memory/new", {"messages": [{**ok_message, "content": "a\x00b"}]}, 422),
        ("PUT", "/v1/working-memory/new", {"data": {"k": None}}, 422),
        ("PUT", "/v1/working-memory/new", {"data": {"bad/\u202ekey": 1}}, 422),
        ("PUT", "/v1/working-memory/new", {"ttl_seconds": 0}, 422),
        ("PUT", "/v1/working-memory/new", {"session_id": "other"}, 422),
        ("PUT", "/v1/working-memory/new", {"tokenz": 1}, 422),
        ("PUT", "/v1/working-memory/new?model_name=gpt-99", {}, 422),
        ("PUT", "/v1/working-memory/new?limt=3", {}, 422),
        ("PUT", "/v1/working-memory/taken", {"namespace": "b"}, 409),
        ("PUT", "/v1/working-memory/new", {"data": {f"k{i}": i for i in range(101)}}, 422),
        (
            "PUT",
            "/v1/working-memory/taken",  # an edit of the stored one, then too many new ones
            {
                "namespace": "a",
                "messages": [{"id": "x", "role": "user", "content": "edited"}]
                + [{**ok_message, "id": f"n{i}"} for i in range(1001)],
            },
            422,
        ),
        (
            "PUT",
            "/v1/working-memory/new",
            {"messages": [ok_message], "memories": [{"id": "m", "text": ""}]},
            422,
        ),
        ("POST", "/v1/long-term-memory/", {"memories": [{"text": "no id"}]}, 422),
        (
            "POST",
            "/v1/long-term-memory/",
            {"memories": [{"id": "memoryapp-memory-x", "text": "t"}]},
            422,
        ),
        ("POST", "/v1/long-term-memory/", {"memories": [{"id": "m", "text": "x" * 4001}]}, 422),
        (
            "POST",
            "/v1/long-term-memory/",
            {"memories": [{"id": "m", "text": "t", "memory_type": "odd"}]},
            422,
        ),
        ("PATCH", "/v1/long-term-memory/nope", {"text": "t"}, 404),
        ("POST", "/v1/long-term-memory/search", {"limit": 101}, 422),
        ("POST", "/v1/long-term-memory/search", '{"distance_threshold": NaN}', 422),
        ("POST", "/v1/long-term-memory/forget", {"policy": {"budget": -1}}, 422),
        ("DELETE", "/v1/long-term-memory?memory_ids=" + "x" * 201, None, 422),
    ]:
        if isinstance(body, str):
            sent = {"content": body, "headers": {"Content-Type": "application/json"}}
        else:
            sent = {} if body is None else {"json": body}
        answer = ams.raw(method, path, **sent)
        assert answer.status_code == status, (method, path, body, answer.text)
        assert answer.headers["Content-Type"].startswith("application/json")
        assert "detail" in answer.json()
    assert counts() == before
    settings.MEMORYAPP_MAX_BODY_BYTES = 2048
    big = ams.raw("PUT", "/v1/working-memory/big", json={"context": "x" * 4096})
    assert big.status_code == 413 and counts() == before


# --- logs -----------------------------------------------------------------------------------


@live
def test_keys_never_reach_djangos_logs(ams, live_server, api_key, caplog):
    caplog.set_level(logging.INFO)
    wrong = "mk_not-a-key-at-all"
    Ams(f"{live_server.url}/ams/{wrong}").raw("GET", "/v1/health")
    ams.raw("GET", "/v1/working-memory/absent")
    ams.raw("GET", "/v1/no-such-thing")
    # The server's records (the client's httpx logs the URL it calls: its own business).
    logged = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("httpx"))
    assert "/ams/[redacted]/v1/working-memory/absent" in logged
    assert "/ams/[redacted]/v1/health" in logged
    assert api_key not in logged and wrong not in logged


def test_the_development_servers_request_log_redacts_keys():
    record = logging.LogRecord(
        "django.server",
        logging.INFO,
        __file__,
        1,
        '"%s" %s %s',
        ("GET /ams/mk_secret/v1/health HTTP/1.1", "200", "12"),
        None,
    )
    assert logging.getLogger("django.server").filter(record)
    assert record.getMessage() == '"GET /ams/[redacted]/v1/health HTTP/1.1" 200 12'


def test_gunicorns_logger_redacts_keys_from_access_and_error_lines(capsys):
    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    from gunicorn.config import Config

    config = Config()
    config.set("accesslog", "-")
    logger = conf["RedactingLogger"](config)
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": "/ams/mk_secret/v1/health?x=1",
        "PATH_INFO": "/ams/mk_secret/v1/health",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_REFERER": "https://h/mcp/mk_secret",
    }
    response = type("Response", (), {"status": "200 OK", "sent": 10, "headers": []})()
    atoms = logger.atoms(response, [], environ, timedelta(seconds=1))
    assert atoms["r"] == "GET /ams/[redacted]/v1/health?x=1 HTTP/1.1"
    assert atoms["U"] == "/ams/[redacted]/v1/health" and atoms["f"] == "https://h/mcp/[redacted]"
    redactions = []
    module = conf["RedactingLogger"].debug.__globals__  # the file's own (run_path copies)
    redact = module["redact"]
    module["redact"] = lambda value: redactions.append(value) or redact(value)
    logger.debug("%s %s", "GET", "/ams/mk_secret/v1/x")  # the default level: not written
    assert redactions == [] and "mk_secret" not in capsys.readouterr().err
    config.set("loglevel", "debug")
    logger.setup(config)
    logger.exception("Error handling request %s", "/ams/mk_secret/v1/health")
    logger.debug("%s %s", "GET", "/ams/mk_secret/v1/x")
    written = capsys.readouterr().err
    assert "mk_secret" not in written and written.count("/ams/[redacted]/v1/") == 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_real_gunicorn_logs_no_key(tmp_path):
    port = _free_port()
    access = tmp_path / "access.log"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "memoryapp.wsgi",
            "--config",
            "gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--log-level",
            "debug",
            "--access-logfile",
            str(access),
        ],
        cwd=ROOT,
        env={**os.environ, "DEBUG": "true"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(100):
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/ams/mk_secret_key/v1/no-such-thing")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer.status_code == 404
        assert "mk_secret_key" not in answer.text
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
    logged = access.read_text()
    assert '"GET /ams/[redacted]/v1/no-such-thing HTTP/1.1" 404' in logged
    assert "Not Found: /ams/[redacted]/v1/no-such-thing" in output
    assert "mk_secret_key" not in logged + output


# --- query counts ------------------------------------------------------------------------


def _reads(client: Client, key: str) -> tuple[int, int]:
    base = f"/ams/{key}/v1"
    with CaptureQueriesContext(connection) as read:
        assert client.get(f"{base}/working-memory/q").status_code == 200
    with CaptureQueriesContext(connection) as searched:
        answer = client.post(f"{base}/long-term-memory/search", {"text": ""}, "application/json")
        assert answer.status_code == 200
    return len(read), len(searched)


def _grow(agent: Agent, session: Session, start: int, n: int) -> None:
    for i in range(start, start + n):
        Message.objects.create(
            session=session,
            seq=i + 1,
            role="user",
            content=f"m{i}",
            token_count=5,
            client_id=f"c{i}",
        )
        memory = Memory.objects.create(agent=agent, content=f"fact {i}")
        record = MemoryRecord.objects.create(
            agent=agent, memory=memory, record_id=f"r{i}", working_memory=session
        )
        record.tags.create(kind="topic", value=f"t{i}")
    session.message_count = start + n
    session.save()


@pytest.mark.django_db
def test_reads_cost_the_same_queries_at_n_and_2n_rows(agent, api_key):
    session = Session(agent=agent, key="q")
    session.slide_expiry()
    session.save()
    ContextItem.objects.create(session=session, key="data.a", value=1)
    client = Client()
    _grow(agent, session, 0, 5)
    _reads(client, api_key)  # the key's first use is recorded once
    at_n = _reads(client, api_key)
    _grow(agent, session, 5, 5)
    assert _reads(client, api_key) == at_n


@pytest.mark.django_db
def test_records_have_an_admin_page(agent):
    memory = Memory.objects.create(agent=agent, content="x")
    record = MemoryRecord.objects.create(agent=agent, memory=memory, record_id="r1")
    record.tags.create(kind="topic", value="t")
    staff = Client()
    staff.force_login(get_user_model().objects.create_superuser("root", password="pw-for-tests"))
    assert staff.get("/admin/ams/memoryrecord/", {"q": "r1"}).status_code == 200
    assert staff.get(f"/admin/ams/memoryrecord/{record.pk}/change/").status_code == 200


# --- the plain modules ---------------------------------------------------------------------


def test_context_windows_and_percentages():
    assert windows.window_for(None, None) is None
    assert windows.window_for("gpt-4o-mini", None) == 128_000
    assert windows.window_for("gpt-4o-mini", 500) == 500
    with pytest.raises(ValueError, match="unknown model_name 'gpt-99'"):
        windows.window_for("gpt-99", None)
    assert windows.context_percentages(50, None) == (None, None)
    assert windows.context_percentages(0, 100) == (0.0, 0.0)
    assert windows.context_percentages(35, 100) == (35.0, 50.0)
    assert windows.context_percentages(500, 100) == (100.0, 100.0)


def _candidate(id_: str, made: float, used: float, kind: str = "semantic"):
    now = datetime(2026, 6, 1, tzinfo=UTC)
    return forgetting.Candidate(
        id_, kind, now - timedelta(days=made), now - timedelta(days=used)
    ), now


def test_the_forgetting_policy():
    (old, now), (idle, _), (fresh, _), (ancient, _) = (
        _candidate("old", 40, 1),
        _candidate("idle", 5, 20),
        _candidate("fresh", 1, 0),
        _candidate("ancient", 400, 0, "episodic"),
    )
    every = [old, idle, fresh, ancient]
    pick = forgetting.to_forget
    none = frozenset()
    assert pick(every, forgetting.Policy(max_age_days=30), now, none) == ["old", "ancient"]
    assert pick(every, forgetting.Policy(max_inactive_days=10), now, none) == ["idle"]
    # Both: old and idle, or older than 12 times the age limit.
    both = forgetting.Policy(max_age_days=30, max_inactive_days=10)
    assert pick(every, both, now, none) == ["ancient"]
    assert pick(every, forgetting.Policy(max_age_days=4, max_inactive_days=10), now, none) == [
        "idle",
        "ancient",
    ]
    # The budget keeps the most recently used and made: fresh, then old (used yesterday).
    assert pick(every, forgetting.Policy(budget=2), now, none) == ["idle", "ancient"]
    semantic = forgetting.Policy(max_age_days=30, memory_type_allowlist=frozenset({"semantic"}))
    assert pick(every, semantic, now, none) == ["old"]
    assert pick(every, forgetting.Policy(max_age_days=30), now, frozenset({"old"})) == ["ancient"]
    assert forgetting.recency(fresh, now) > forgetting.recency(idle, now)


@live
def test_edits_and_removals_show_in_the_api_and_on_the_session_page(ams, agent, api):
    key = "chat-trail"
    ams.get_or_create_working_memory(key)
    ams.append_messages_to_working_memory(
        key, [message("a", "user", "Deploy?"), message("b", "assistant", "make ship")]
    )
    whole = ams.get_working_memory(key)
    whole.messages[1] = MemoryMessage(id="b", role="assistant", content="make release")
    ams.put_working_memory(key, whole)
    ams.put_working_memory(key, whole.model_copy(update={"messages": [whole.messages[1]]}))

    listed = api.get(f"/api/v1/sessions/{key}/messages").json()["items"]
    a, b = listed
    assert a["client_id"] == "a" and a["removed_at"] is not None
    assert [r["action"] for r in a["revisions"]] == ["remove"]
    assert b["content"] == "make release" and b["removed_at"] is None
    assert b["revisions"][0]["content"] == "make ship"

    viewer = logged_in_member("viewer", agent, "reader")
    page = viewer.get(f"/agents/{agent.name}/sessions/{key}/").content.decode()
    assert page.count("removed by its client") == 1
    assert "1 change by its client · its id b" in page
    assert "make ship</pre>" in page  # the earlier version, escaped as text
    edited_at = datetime.fromisoformat(b["revisions"][0]["at"])
    assert edited_at.strftime("%Y-%m-%d %H:%M:%S") in page  # a time people read


@live
def test_a_replacement_the_client_already_names_keeps_its_own_id(ams):
    ams.create_long_term_memory(
        [
            ClientMemoryRecord(id="p1", text="The build uses make"),
            ClientMemoryRecord(id="p2", text="The build uses just"),
        ]
    )
    old = Memory.objects.get(content="The build uses make")
    new = Memory.objects.get(content="The build uses just")
    # Replaced outside this API by a memory that has a record of its own already.
    Memory.objects.filter(pk=old.pk).update(status=Memory.Status.SUPERSEDED, superseded_by=new)
    assert ams.get_long_term_memory("p2").text == "The build uses just"  # not a 500
    assert MemoryRecord.objects.get(record_id="p1").memory_id == old.pk
    assert MemoryRecord.objects.get(record_id="p2").memory_id == new.pk
