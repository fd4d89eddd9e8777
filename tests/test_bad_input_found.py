"""Bad input a probe of the live server found answered 500, or accepted when it should
not be: each is now a clear 4xx that changes nothing (a JSON one on the APIs, a plain one
on the dashboard, as its other refusals are).

- a session key holding `/` (an import's `?session=`, a session's key in an agent's
  export, a memory prompt's `session_id`) and an AMS `data` key holding one: no URL
  reaches a name with a `/` (http/schemas.check_name);
- non-ASCII digits (`²`, `①`), which str.isdigit() takes and int() refuses, in AMS memory
  ids and in the dashboard's row numbers;
- NUL in AMS query parameters and path ids (PostgreSQL refuses it in text: a 500);
- `true` as a TTL and `"yes"` as a boolean in AMS bodies (pydantic's lax mode);
- an MCP tool call counted twice against its key's rate limit.

Runs on SQLite by default and on PostgreSQL with DATABASE_URL (NUL matters there)."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest
from django.test import Client

from memoryapp.ams.models import MemoryRecord
from memoryapp.core.models import ContextItem, Memory, MemoryEvent, Message, Session, Turn
from memoryapp.http import ratelimit
from tests.conftest import ApiClient, logged_in_member, turn

BASE = "/api/v1"
MEMORY_PREFIX = "memoryapp-memory-"


def counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Session, Message, Turn, Memory, MemoryRecord, ContextItem, MemoryEvent)
    }


def ams(api_key: str, method: str, path: str, body=None):
    """A request to the AMS API (the key in the path, as its client sends it); `path`
    is sent as written (already quoted)."""
    extra = {} if body is None else {"data": json.dumps(body), "content_type": "application/json"}
    return Client().generic(method, f"/ams/{api_key}/v1{path}", **extra)


def refused(response, status: int = 422) -> dict:
    assert response.status_code == status, response.content[:1000]
    assert response["Content-Type"].startswith("application/json")
    return response.json()


def locs(answer: dict) -> list[list]:
    return [problem["loc"] for problem in answer["detail"]]


# --- 1. a `/` in a session key or an AMS data key --------------------------------------


def test_an_import_refuses_a_session_key_with_a_slash(api: ApiClient, agent):
    """`POST /import?session=z%2Fz` created session `z/z`: no URL reaches it, and the
    agent's dashboard page answered 500 (NoReverseMatch) linking to it."""
    api.post(f"{BASE}/sessions/s/turns", turn(("user", "hi")))
    session_export = b"".join(api.get(f"{BASE}/sessions/s/export").streaming_content)
    agent_export = json.loads(b"".join(api.get(f"{BASE}/agent/export").streaming_content))
    before = counts()
    answer = refused(api.post(f"{BASE}/import?session=z%2Fz&replace=true", session_export))
    assert locs(answer) == [["query", "session"]]
    assert "'/'" in answer["detail"][0]["msg"]
    # The same key inside an agent's export.
    agent_export["sessions"][0]["key"] = "z/z"
    answer = refused(api.post(f"{BASE}/import?replace=true", agent_export))
    assert locs(answer) == [["body", "payload", "sessions", 0, "key"]]
    assert counts() == before
    assert not Session.objects.filter(key__contains="/").exists()
    owner = logged_in_member("editor", agent, "olga")
    assert owner.get(f"/agents/{agent.name}/").status_code == 200


def test_the_import_answers_its_422_in_the_openapi_document(api):
    operation = api.get(f"{BASE}/openapi.json").json()["paths"][f"{BASE}/import"]["post"]
    assert {"201", "409", "413", "422"} <= set(operation["responses"])


def test_an_ams_data_key_with_a_slash_is_a_422(api_key):
    """A data key is a working-context item `data.<key>`: one holding `/` would be an
    item no /api/v1 URL names."""
    before = counts()
    answer = refused(ams(api_key, "PUT", "/working-memory/w", {"data": {"a/b": 1}}))
    assert locs(answer) == [["body", "payload", "data"]]
    assert "'/'" in answer["detail"][0]["msg"]
    assert counts() == before
    assert ams(api_key, "PUT", "/working-memory/w", {"data": {"a.b": 1}}).status_code == 200


def test_a_memory_prompt_for_a_session_key_with_a_slash_is_a_422(api_key):
    """It answered 200 with the session silently left out. A well-formed key of a session
    that does not exist still reads as an empty working memory (200), as Redis's server
    answers it: the client asks for the prompt of a new session before writing it."""
    ams(
        api_key,
        "PUT",
        "/working-memory/w",
        {"messages": [{"id": "1", "role": "user", "content": "hi"}]},
    )
    before = counts()
    answer = refused(
        ams(api_key, "POST", "/memory/prompt", {"query": "q", "session": {"session_id": "a/b"}})
    )
    assert locs(answer) == [["body", "payload", "session", "session_id"]]
    absent = ams(api_key, "POST", "/memory/prompt", {"query": "q", "session": {"session_id": "x"}})
    assert absent.status_code == 200
    assert [m["content"]["text"] for m in absent.json()["messages"]] == ["q"]
    assert counts() == before


# --- 2. non-ASCII digits -------------------------------------------------------------------


@pytest.mark.parametrize("digits", ["²", "①", "١"])
def test_a_memory_id_with_non_ascii_digits_names_no_memory(api_key, agent, digits):
    """`memoryapp-memory-²` passed str.isdigit() and failed int(): a 500."""
    Memory.remember(agent, "kept", memory_type="fact", confidence=0.8, actor="agent:coder")
    before = counts()
    path = "/long-term-memory/" + quote(MEMORY_PREFIX + digits)
    assert refused(ams(api_key, "GET", path), 404)["detail"].startswith("memory ")
    assert refused(ams(api_key, "PATCH", path, {"text": "changed"}), 404)
    deleted = ams(
        api_key, "DELETE", "/long-term-memory?memory_ids=" + quote(MEMORY_PREFIX + digits)
    )
    assert deleted.status_code == 200 and deleted.json()["status"] == "ok, deleted 0 memories"
    listed = {"memories": [{"id": MEMORY_PREFIX + digits, "text": "t"}]}
    assert "memoryapp's" in refused(ams(api_key, "PUT", "/working-memory/w", listed))["detail"]
    assert counts() == before
    assert Memory.objects.get().content == "kept"


@pytest.fixture
def memory(agent) -> Memory:
    return Memory.remember(
        agent, "The API is v1", memory_type="fact", confidence=0.7, actor="agent:coder"
    )[0]


def test_bulk_with_non_ascii_digits_is_a_400_that_changes_nothing(agent, memory):
    editor = logged_in_member("editor", agent, "edna")
    before = counts()
    for ids in (["²"], [str(memory.pk), "①"], ["9" * 30]):
        answer = editor.post(
            f"/agents/{agent.name}/memories/bulk/",
            {"action": "archive", "ids": ids, "confirm": "1"},
        )
        assert answer.status_code == 400, ids
    assert counts() == before
    assert Memory.objects.get(pk=memory.pk).status == "active"


def test_a_revert_with_non_ascii_digits_is_refused_before_it_is_saved(agent, memory):
    """`shown_as=²` was read after the revert was saved: a 500 with the change made."""
    editor = logged_in_member("editor", agent, "edna")
    edited = editor.post(
        f"/agents/{agent.name}/items/memory/{memory.pk}/edit/",
        {"content": "The API is v1", "memory_type": "lesson", "confidence": "0.7"},
    )
    assert edited.status_code == 302
    event = MemoryEvent.objects.filter(target_kind="memory", target_id=memory.pk).latest("id")
    before = counts()
    answer = editor.post(
        f"/agents/{agent.name}/items/memory/{memory.pk}/revert/{event.pk}/",
        {"shown_as": "²"},
        headers={"HX-Request": "true"},
    )
    assert answer.status_code == 400
    assert counts() == before
    assert Memory.objects.get(pk=memory.pk).memory_type == "lesson"


# --- 3. NUL in AMS query parameters and path ids ---------------------------------------------


@pytest.mark.parametrize(
    "method, path, name",
    [
        ("GET", "/working-memory/?namespace=a%00b", "namespace"),
        ("GET", "/working-memory/?user_id=a%00b", "user_id"),
        ("GET", "/working-memory/w?namespace=a%00b", "namespace"),
        ("PUT", "/working-memory/w?user_id=a%00b", "user_id"),
        ("DELETE", "/working-memory/w?user_id=a%00b", "user_id"),
        ("POST", "/long-term-memory/forget?namespace=a%00b", "namespace"),
        ("POST", "/long-term-memory/forget?user_id=a%00b", "user_id"),
        ("POST", "/long-term-memory/forget?session_id=a%00b", "session_id"),
        ("DELETE", "/long-term-memory?memory_ids=a%00b", "memory_ids"),
        ("GET", "/long-term-memory/a%00b", "memory_id"),
        ("PATCH", "/long-term-memory/a%00b", "memory_id"),
    ],
)
def test_nul_in_an_ams_parameter_is_a_422_naming_it(api_key, agent, method, path, name):
    """PostgreSQL refuses NUL in text: these were 500s there (SQLite stored or matched
    it). A body's NUL was refused already (a 422)."""
    ams(
        api_key,
        "PUT",
        "/working-memory/w",
        {"messages": [{"id": "1", "role": "user", "content": "hi"}]},
    )
    Memory.remember(agent, "kept", memory_type="fact", confidence=0.8, actor="agent:coder")
    body = {
        "PUT": {},
        "PATCH": {"text": "changed"},
        "POST": {"policy": {"max_age_days": 0}},
    }.get(method)
    before = counts()
    answer = refused(ams(api_key, method, path, body))
    where = "path" if name == "memory_id" else "query"
    assert [loc[:2] for loc in locs(answer)] == [[where, name]]
    assert "NUL" in answer["detail"][0]["msg"]
    assert counts() == before
    assert Memory.objects.get().status == "active"


# --- 4. lax numbers and booleans in AMS bodies ------------------------------------------------


@pytest.mark.parametrize(
    "method, path, body, loc",
    [
        ("PUT", "/working-memory/w", {"ttl_seconds": True}, ["ttl_seconds"]),
        ("PUT", "/working-memory/w", {"ttl_seconds": "60"}, ["ttl_seconds"]),
        ("PUT", "/working-memory/w", {"tokens": False}, ["tokens"]),
        (
            "POST",
            "/long-term-memory/",
            {"memories": [{"id": "m", "text": "t"}], "deduplicate": "yes"},
            ["deduplicate"],
        ),
        (
            "POST",
            "/long-term-memory/",
            {"memories": [{"id": "m", "text": "t"}], "deduplicate": 1},
            ["deduplicate"],
        ),
        ("POST", "/long-term-memory/search", {"limit": True}, ["limit"]),
        ("POST", "/long-term-memory/search", {"recency_boost": "yes"}, ["recency_boost"]),
        ("POST", "/long-term-memory/search", {"distance_threshold": "0.5"}, ["distance_threshold"]),
        ("POST", "/long-term-memory/forget", {"policy": {"budget": True}}, ["policy", "budget"]),
        ("POST", "/memory/prompt", {"query": "q", "long_term_search": "yes"}, ["long_term_search"]),
    ],
)
def test_a_lax_number_or_boolean_in_an_ams_body_is_a_422(api_key, agent, method, path, body, loc):
    Memory.remember(agent, "kept", memory_type="fact", confidence=0.8, actor="agent:coder")
    before = counts()
    answer = refused(ams(api_key, method, path, body))
    assert all(problem[:2] == ["body", "payload"] for problem in locs(answer))
    assert loc in [problem[2 : 2 + len(loc)] for problem in locs(answer)]
    assert counts() == before


def test_ams_bodies_still_take_what_the_client_sends(api_key):
    """A whole number written 60.0 is 60, as on /api/v1; context_window_max is sent as
    text by the client and read as a number."""
    put = ams(api_key, "PUT", "/working-memory/w", {"ttl_seconds": 60.0, "tokens": 0})
    assert put.status_code == 200 and put.json()["ttl_seconds"] == 60
    created = ams(
        api_key,
        "POST",
        "/long-term-memory/",
        {"memories": [{"id": "m", "text": "t"}], "deduplicate": False},
    )
    assert created.status_code == 200
    searched = ams(api_key, "POST", "/long-term-memory/search", {"limit": 5, "recency_boost": True})
    assert searched.status_code == 200 and searched.json()["total"] == 1
    prompt = ams(
        api_key,
        "POST",
        "/memory/prompt",
        {"query": "q", "session": {"session_id": "w", "context_window_max": "4000"}},
    )
    assert prompt.status_code == 200


# --- 5. an MCP tool call counts once against its key's rate limit --------------------------

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _call(api_key: str, number: int):
    call = {
        "jsonrpc": "2.0",
        "id": number,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": f"fact {number}"}},
    }
    return Client().post(
        f"/mcp/{api_key}", call, content_type="application/json", headers=MCP_HEADERS
    )


class _FrozenTime:
    """The time module, its clock stopped in the middle of a minute."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    @staticmethod
    def time() -> float:
        return 1_800_000_030.0


@pytest.mark.django_db(transaction=True)  # the tools run in worker threads
@pytest.mark.parametrize(
    "setting, refusal",
    [
        ("MEMORYAPP_RATE_LIMIT_KEY", "this API key made more than 3 requests"),
        ("MEMORYAPP_RATE_LIMIT_ADDRESS", "more than 3 requests in 60 seconds from"),
    ],
)
def test_n_mcp_tool_calls_consume_n_requests_of_the_limits(
    api_key, settings, monkeypatch, setting, refusal
):
    """The MCP endpoint counted its request against the key (and the address), and the
    tool's call of the agent API in process counted it again: with 3/60, the second
    call's tool was refused (a 429 inside a 200)."""
    setattr(settings, setting, "3/60")
    # In the middle of one window: the fixed windows' counts start again at each minute.
    monkeypatch.setattr(ratelimit, "time", _FrozenTime())
    for number in (1, 2, 3):
        answer = _call(api_key, number)
        assert answer.status_code == 200, answer.content
        result = answer.json()["result"]
        assert not result["isError"], result
    assert sorted(Memory.objects.values_list("content", flat=True)) == [
        "fact 1",
        "fact 2",
        "fact 3",
    ]
    over = _call(api_key, 4)
    assert refusal in refused(over, 429)["detail"]
    assert Memory.objects.count() == 3
