"""The agent API: each endpoint's success, auth and bad-input cases."""

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from memoryapp.core.models import (
    ApiKey,
    ContextItem,
    Finding,
    IdempotencyRecord,
    Memory,
    Message,
    Session,
    Subtask,
    ToolCall,
    Turn,
)
from memoryapp.lib import tokens
from tests.conftest import turn

pytestmark = pytest.mark.django_db

BASE = "/api/v1"


def nothing_stored():
    return (
        Session.objects.count() == 0
        and Message.objects.count() == 0
        and Turn.objects.count() == 0
        and ToolCall.objects.count() == 0
    )


# --- auth -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,path",
    [
        ("get", "/agent"),
        ("get", "/sessions"),
        ("get", "/sessions/s1"),
        ("get", "/sessions/s1/history"),
        ("get", "/sessions/s1/turns"),
        ("delete", "/sessions/s1"),
    ],
)
def test_missing_or_wrong_key_is_401(agent, method, path):
    client = Client()
    response = getattr(client, method)(BASE + path)
    assert response.status_code == 401
    assert response.json() == {
        "detail": "missing or unknown API key: send `Authorization: Bearer <key>`"
    }
    assert response["WWW-Authenticate"].startswith("Bearer")
    for header in ("Bearer mk_nope", "Basic abc", "Bearer "):
        response = getattr(client, method)(BASE + path, headers={"Authorization": header})
        assert response.status_code == 401


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("post", "/sessions/s1/turns", turn(("user", "hi"))),
        ("put", "/sessions/s1", {"goal": "x"}),
        ("patch", "/agent", {"max_messages": 1}),
    ],
)
def test_writes_without_a_valid_key_are_401_and_change_nothing(agent, method, path, body):
    import json

    for headers in ({}, {"Authorization": "Bearer mk_nope"}):
        response = getattr(Client(), method)(
            BASE + path, json.dumps(body), content_type="application/json", headers=headers
        )
        assert response.status_code == 401
    assert nothing_stored()
    agent.refresh_from_db()
    assert agent.max_messages == 100


def test_write_without_key_is_401_and_stores_nothing(agent):
    response = Client().post(
        BASE + "/sessions/s1/turns", turn(("user", "hi")), content_type="application/json"
    )
    assert response.status_code == 401
    assert nothing_stored()


def test_revoked_key_is_401(agent, api):
    assert api.get(BASE + "/agent").status_code == 200
    ApiKey.objects.get().revoke()
    assert api.get(BASE + "/agent").status_code == 401


def test_key_use_is_recorded(api):
    key = ApiKey.objects.get()
    assert key.last_used_at is None
    api.get(BASE + "/agent")
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_only_a_hash_of_the_key_is_stored(agent):
    row, raw = ApiKey.issue(agent)
    assert raw not in (row.key_hash, row.prefix)
    assert raw.startswith(row.prefix)
    assert len(raw) > 40


def test_another_agents_session_is_404(api, other_api):
    assert other_api.post(BASE + "/sessions/theirs/turns", turn(("user", "x"))).status_code == 201
    for path in ("/sessions/theirs", "/sessions/theirs/history", "/sessions/theirs/turns"):
        response = api.get(BASE + path)
        assert response.status_code == 404
        assert response.json() == {"detail": "session not found"}
    assert api.delete(BASE + "/sessions/theirs").status_code == 404
    assert Session.objects.get(key="theirs").message_count == 1
    assert [s["key"] for s in api.get(BASE + "/sessions").json()["items"]] == []


def test_same_session_key_for_two_agents_is_two_sessions(api, other_api):
    api.post(BASE + "/sessions/shared/turns", turn(("user", "mine")))
    other_api.post(BASE + "/sessions/shared/turns", turn(("user", "theirs")))
    mine = api.get(BASE + "/sessions/shared/history").json()["messages"]
    assert [m["content"] for m in mine] == ["mine"]


# --- health, docs, agent --------------------------------------------------------------


def test_health_needs_no_key(settings):
    response = Client().get(BASE + "/health")
    assert response.status_code == 200
    body = response.json()
    assert body["database"]["ok"] is True
    expected_kind = "redis" if settings.REDIS_URL else "in-process"
    assert body["broker"]["kind"] == expected_kind
    assert body["broker"]["ok"] is True
    assert body["status"] == "ok"


def test_health_reports_a_broker_that_is_down(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    body = Client().get(BASE + "/health").json()
    assert body["broker"]["ok"] is False
    assert body["broker"]["error"] == "ConnectionError"
    assert "127.0.0.1" not in str(body)
    assert body["status"] == "degraded"


def test_health_is_503_when_the_database_is_down(monkeypatch):
    from django.db import OperationalError

    class DownConnection:
        vendor = "postgresql"

        def cursor(self):
            raise OperationalError("could not connect to server at db.internal:5432")

    monkeypatch.setattr("memoryapp.api.api.connection", DownConnection())
    response = Client().get(BASE + "/health")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == {"vendor": "postgresql", "ok": False, "error": "OperationalError"}
    assert body["status"] == "degraded"


def test_openapi_schema_and_docs_page():
    schema = Client().get(BASE + "/openapi.json").json()
    assert "/api/v1/sessions/{key}/turns" in schema["paths"]
    assert "/api/v1/sessions/{key}/history" in schema["paths"]
    docs = Client().get(BASE + "/docs")
    assert docs.status_code == 200
    assert b"cdn.jsdelivr" not in docs.content  # served from our own host
    # Under our CSP only scripts from our host run: every script is a file or a data block.
    for tag in re.findall(rb"<script[^>]*>", docs.content):
        assert b' src="/static/' in tag or b'type="application/json"' in tag, tag
    assert Client().get("/static/ninja/swagger-ui-bundle.js").status_code == 200


def test_the_schema_states_the_rules_it_cannot_type():
    """What a request is refused for, stated where a client reads it: the encodings this
    server loads as an enum, ids that must be this session's and the timestamp's range in
    the fields' descriptions."""
    from memoryapp.lib import tokens

    components = Client().get(BASE + "/openapi.json").json()["components"]["schemas"]
    encoding = components["AgentPatch"]["properties"]["encoding"]
    assert encoding["enum"] == list(tokens.loadable_encodings())
    dependencies = components["SubtaskIn"]["properties"]["dependencies"]
    assert "this session's subtasks" in dependencies["description"]
    known_from = components["ToolCallIn"]["properties"]["known_from"]["anyOf"][0]
    assert "a finding of this session" in known_from["description"]
    assert (
        "from 1970 to a day from now"
        in components["TurnIn"]["properties"]["timestamp"]["description"]
    )


def test_get_agent(api, agent):
    body = api.get(BASE + "/agent").json()
    assert body["name"] == "coder"
    assert body["ttl_seconds"] == 3600
    assert body["max_messages"] == 100
    assert body["token_budget"] == 32000
    assert body["encoding"] == "cl100k_base"
    assert body["default_conversation_budget"] == 20000


def test_patch_agent_changes_only_given_fields(api, agent):
    response = api.patch(BASE + "/agent", {"max_messages": 7, "conversation_budget": 900})
    assert response.status_code == 200
    agent.refresh_from_db()
    assert agent.max_messages == 7
    assert agent.conversation_budget == 900
    assert agent.ttl_seconds == 3600
    assert response.json()["default_conversation_budget"] == 900


@pytest.mark.parametrize(
    "body",
    [
        {"max_messages": -1},
        {"max_messages": "7"},
        {"token_budget": 1.5},
        {"ttl_seconds": None},
        {"encoding": "no-such-encoding"},
        {"encoding": "o200k_base"},  # not shipped offline, no TIKTOKEN_CACHE_DIR
    ],
)
def test_patch_agent_rejects_bad_values_and_changes_nothing(api, agent, body, monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    response = api.patch(BASE + "/agent", body)
    assert response.status_code == 422
    assert "detail" in response.json()
    agent.refresh_from_db()
    assert (agent.max_messages, agent.token_budget, agent.ttl_seconds, agent.encoding) == (
        100,
        32000,
        3600,
        "cl100k_base",
    )


# --- sessions -------------------------------------------------------------------------


def test_put_creates_then_updates_keeping_omitted_fields(api):
    response = api.put(BASE + "/sessions/s1", {"goal": "fix the bug", "metadata": {"a": 1}})
    assert response.status_code == 201
    assert response.json()["goal"] == "fix the bug"
    response = api.put(BASE + "/sessions/s1", {"ttl_seconds": 120})
    assert response.status_code == 200
    body = response.json()
    assert body["goal"] == "fix the bug"
    assert body["metadata"] == {"a": 1}
    assert body["ttl_seconds"] == 120
    session = Session.objects.get()
    remaining = (session.expires_at - timezone.now()).total_seconds()
    assert 100 < remaining <= 120


def test_put_rejects_bad_body(api):
    assert api.put(BASE + "/sessions/s1", {"ttl_seconds": 0}).status_code == 422
    assert api.put(BASE + "/sessions/s1", {"ttl_seconds": "60"}).status_code == 422
    assert api.put(BASE + "/sessions/s1", {"status": "weird"}).status_code == 422
    assert api.put(BASE + "/sessions/s1", "{not json").status_code == 400
    assert api.put(BASE + "/sessions/" + "k" * 201, {}).status_code == 422
    assert nothing_stored()


def test_get_session(api):
    api.post(BASE + "/sessions/s1/turns", turn(("user", "hello"), ("assistant", "hi")))
    body = api.get(BASE + "/sessions/s1").json()
    assert body["key"] == "s1"
    assert body["totals"]["messages"] == 2
    assert body["totals"]["turns"] == 1
    assert api.get(BASE + "/sessions/absent").status_code == 404


def test_session_keys_may_hold_any_printable_text(api):
    key = "user:42 <b>&\"'"
    from urllib.parse import quote

    path = BASE + "/sessions/" + quote(key, safe="")
    assert api.post(path + "/turns", turn(("user", "x"))).status_code == 201
    assert api.get(path).json()["key"] == key


def test_sliding_expiry_uses_agent_ttl_or_session_ttl(api, agent):
    api.post(BASE + "/sessions/s1/turns", turn(("user", "x")))
    session = Session.objects.get()
    left = (session.expires_at - timezone.now()).total_seconds()
    assert 3590 < left <= 3600
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() + timedelta(seconds=5))
    api.post(BASE + "/sessions/s1/turns", turn(("user", "y")))
    session.refresh_from_db()
    assert (session.expires_at - timezone.now()).total_seconds() > 3590


def test_list_sessions_is_cursor_paginated_without_a_silent_cap(api):
    for i in range(7):
        api.put(BASE + f"/sessions/s{i}", {"goal": f"g{i}"})
    seen, cursor = [], None
    while True:
        params = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = api.get(BASE + "/sessions", params).json()
        assert len(page["items"]) <= 3
        seen += [item["key"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [f"s{i}" for i in reversed(range(7))]
    item = api.get(BASE + "/sessions").json()["items"][0]
    assert set(item) >= {"key", "goal", "totals", "last_activity_at", "expires_at"}
    assert api.get(BASE + "/sessions", {"limit": 201}).status_code == 422
    assert api.get(BASE + "/sessions", {"limit": 0}).status_code == 422
    assert api.get(BASE + "/sessions", {"cursor": "!!"}).status_code == 422
    assert api.get(BASE + "/sessions", {"status": "dead"}).status_code == 422


def test_list_sessions_filters_active_and_expired(api):
    api.put(BASE + "/sessions/live", {})
    api.put(BASE + "/sessions/old", {})
    Session.objects.filter(key="old").update(expires_at=timezone.now() - timedelta(seconds=1))

    def keys(status):
        return [s["key"] for s in api.get(BASE + "/sessions", {"status": status}).json()["items"]]

    assert keys("active") == ["live"]
    assert keys("expired") == ["old"]
    assert sorted(keys("all")) == ["live", "old"]


def test_delete_all_removes_the_session_but_not_long_term_memories(api, agent):
    api.post(BASE + "/sessions/s1/turns", turn(("user", "x")))
    session = Session.objects.get()
    Memory.objects.create(agent=agent, session=session, content="the repo uses pytest")
    assert api.delete(BASE + "/sessions/s1").status_code == 204
    assert nothing_stored()
    memory = Memory.objects.get()
    assert memory.session is None
    assert api.delete(BASE + "/sessions/s1").status_code == 404


def test_delete_conversation_keeps_session_state(api):
    api.put(BASE + "/sessions/s1", {"goal": "ship it"})
    api.post(
        BASE + "/sessions/s1/turns",
        turn(("user", "x"), ("assistant", "y"), tool_calls=[{"tool": "grep", "output": "a"}]),
        headers={"Idempotency-Key": "k1"},
    )
    session = Session.objects.get()
    ContextItem.objects.create(session=session, key="active_file", value="a.py")
    Finding.objects.create(session=session, tool="grep", fact="3 matches")
    Subtask.objects.create(session=session, title="write tests")
    response = api.delete(BASE + "/sessions/s1?scope=conversation")
    assert response.status_code == 204
    session.refresh_from_db()
    assert session.goal == "ship it"
    assert session.totals() == {
        "messages": 0,
        "tokens": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "turns": 0,
    }
    assert Message.objects.count() == Turn.objects.count() == ToolCall.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0
    assert ContextItem.objects.count() == Finding.objects.count() == Subtask.objects.count() == 1
    answer = api.post(BASE + "/sessions/s1/turns", turn(("user", "again"))).json()
    assert (answer["iteration"], answer["first_seq"]) == (1, 1)
    assert api.delete(BASE + "/sessions/s1?scope=nonsense").status_code == 422


# --- lazy expiry ----------------------------------------------------------------------


def test_expired_session_reads_as_absent_before_cleanup(api):
    api.post(BASE + "/sessions/s1/turns", turn(("user", "old message")))
    Session.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api.get(BASE + "/sessions/s1").status_code == 404
    assert api.get(BASE + "/sessions/s1/history").status_code == 404
    assert api.get(BASE + "/sessions/s1/turns").status_code == 404
    assert api.delete(BASE + "/sessions/s1").status_code == 404
    assert api.get(BASE + "/sessions").json()["items"] == []
    # Still stored until cleanup (or a new write) removes it.
    assert Message.objects.count() == 1


def test_writing_to_an_expired_session_starts_it_afresh(api):
    api.put(BASE + "/sessions/s1", {"goal": "old goal"})
    api.post(BASE + "/sessions/s1/turns", turn(("user", "old message")))
    Session.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = api.post(BASE + "/sessions/s1/turns", turn(("user", "new message"))).json()
    assert (answer["iteration"], answer["first_seq"]) == (1, 1)
    assert answer["session"]["goal"] == ""
    history = api.get(BASE + "/sessions/s1/history").json()
    assert [m["content"] for m in history["messages"]] == ["new message"]
    assert Session.objects.count() == 1


# --- append ---------------------------------------------------------------------------


def test_append_stores_messages_with_exact_counts(api, agent):
    calls = [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]
    body = {
        "messages": [
            {"role": "system", "content": "You are careful."},
            {"role": "user", "content": "Find TODOs", "name": "alice"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "content": "a.py:1: TODO", "tool_call_id": "c1"},
        ],
        "usage": {"input_tokens": 120, "output_tokens": 15},
        "tool_calls": [
            {
                "tool": "grep",
                "query": {"pattern": "TODO"},
                "output": "a.py:1: TODO\n" * 1000,
                "success": True,
                "file_path": "a.py",
            }
        ],
        "model": "gpt-4o",
    }
    response = api.post(BASE + "/sessions/s1/turns", body)
    assert response.status_code == 201
    answer = response.json()
    enc = tokens.get_encoding("cl100k_base")
    expected = [
        tokens.count_message(enc, "system", "You are careful."),
        tokens.count_message(enc, "user", "Find TODOs", "alice"),
        tokens.count_message(enc, "assistant", "", None, calls),
        tokens.count_message(enc, "tool", "a.py:1: TODO"),
    ]
    assert answer["token_counts"] == expected
    assert (answer["iteration"], answer["first_seq"], answer["last_seq"]) == (1, 1, 4)
    totals = answer["session"]["totals"]
    assert totals == {
        "messages": 4,
        "tokens": sum(expected),
        "input_tokens": 120,
        "output_tokens": 15,
        "turns": 1,
    }
    stored = list(Message.objects.order_by("seq"))
    assert [m.token_count for m in stored] == expected
    assert stored[1].name == "alice"
    assert stored[2].tool_calls == calls
    assert stored[3].tool_call_id == "c1"
    assert all(m.turn.iteration == 1 for m in stored)
    turn_row = Turn.objects.get()
    assert (turn_row.tool_call_count, turn_row.model, turn_row.usage_source) == (
        1,
        "gpt-4o",
        "reported",
    )
    call = ToolCall.objects.get()
    assert call.output_size == len("a.py:1: TODO\n" * 1000)
    assert len(call.output_excerpt) == 2000  # bounded, never the whole output
    assert call.query == '{"pattern": "TODO"}'


def test_append_without_usage_counts_tokens_by_role(api):
    answer = api.post(
        BASE + "/sessions/s1/turns", turn(("user", "hello there"), ("assistant", "hi"))
    ).json()
    user_tokens, assistant_tokens = answer["token_counts"]
    assert answer["session"]["totals"]["input_tokens"] == user_tokens
    assert answer["session"]["totals"]["output_tokens"] == assistant_tokens
    assert Turn.objects.get().usage_source == "counted"


def test_turns_number_on_and_seq_stays_gapless(api):
    for i in range(3):
        answer = api.post(
            BASE + "/sessions/s1/turns", turn(("user", f"q{i}"), ("assistant", f"a{i}"))
        ).json()
        assert (answer["iteration"], answer["first_seq"], answer["last_seq"]) == (
            i + 1,
            2 * i + 1,
            2 * i + 2,
        )
    assert list(Message.objects.order_by("seq").values_list("seq", flat=True)) == list(range(1, 7))


BAD_TURNS = [
    ("malformed json", '{"messages": [', 400),
    ("not an object", "[1, 2]", 422),
    ("empty body", "", 422),
    ("no messages", {"messages": []}, 422),
    ("unknown role", turn(("robot", "x")), 422),
    ("negative tokens", turn(("user", "x"), usage={"input_tokens": -1, "output_tokens": 0}), 422),
    ("string tokens", turn(("user", "x"), usage={"input_tokens": "5", "output_tokens": 0}), 422),
    ("float tokens", turn(("user", "x"), usage={"input_tokens": 5.5, "output_tokens": 0}), 422),
    ("bool tokens", turn(("user", "x"), usage={"input_tokens": True, "output_tokens": 0}), 422),
    ("content not text", {"messages": [{"role": "user", "content": 5}]}, 422),
    (
        "tool_calls not a list",
        {"messages": [{"role": "assistant", "content": "", "tool_calls": "x"}]},
        422,
    ),
    ("long name", {"messages": [{"role": "user", "content": "x", "name": "n" * 201}]}, 422),
    ("tool call without tool", turn(("user", "x"), tool_calls=[{"query": "q"}]), 422),
    ("one bad among good", {"messages": [{"role": "user", "content": "ok"}, {"role": "x"}]}, 422),
]


@pytest.mark.parametrize("name,body,status", BAD_TURNS, ids=[b[0] for b in BAD_TURNS])
def test_bad_turn_is_4xx_json_and_stores_nothing(api, name, body, status):
    response = api.post(BASE + "/sessions/s1/turns", body)
    assert response.status_code == status
    assert "detail" in response.json()
    assert nothing_stored()


def test_oversized_body_is_413_and_stores_nothing(api, settings):
    settings.MEMORYAPP_MAX_BODY_BYTES = 10_000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = api.post(BASE + "/sessions/s1/turns", turn(("user", "x" * 20_000)))
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]
    assert nothing_stored()
    assert api.post(BASE + "/sessions/s1/turns", turn(("user", "x" * 5_000))).status_code == 201


def test_bad_session_key_is_422(api):
    assert (
        api.post(BASE + "/sessions/" + "k" * 201 + "/turns", turn(("user", "x"))).status_code == 422
    )
    assert api.post(BASE + "/sessions/a%01b/turns", turn(("user", "x"))).status_code == 422
    assert nothing_stored()


# --- idempotency ----------------------------------------------------------------------


def test_idempotent_retry_stores_nothing_new_and_returns_the_first_answer(api):
    body = turn(("user", "hello"), ("assistant", "hi"))
    first = api.post(BASE + "/sessions/s1/turns", body, headers={"Idempotency-Key": "abc"})
    again = api.post(BASE + "/sessions/s1/turns", body, headers={"Idempotency-Key": "abc"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert Message.objects.count() == 2
    assert Turn.objects.count() == 1
    # A different key is a different request.
    third = api.post(BASE + "/sessions/s1/turns", body, headers={"Idempotency-Key": "abd"})
    assert third.json()["iteration"] == 2
    # Without a key, every request is stored.
    api.post(BASE + "/sessions/s1/turns", body)
    assert Message.objects.count() == 6


def test_idempotency_key_reused_with_another_body_is_409(api):
    api.post(BASE + "/sessions/s1/turns", turn(("user", "a")), headers={"Idempotency-Key": "k"})
    response = api.post(
        BASE + "/sessions/s1/turns", turn(("user", "b")), headers={"Idempotency-Key": "k"}
    )
    assert response.status_code == 409
    assert Message.objects.count() == 1


# --- history --------------------------------------------------------------------------


def _seed(api, key="s1"):
    """system, then 5 user/assistant pairs, with a tool exchange in the middle."""
    api.post(BASE + f"/sessions/{key}/turns", turn(("system", "rules"), ("user", "u1")))
    api.post(BASE + f"/sessions/{key}/turns", turn(("assistant", "a1"), ("user", "u2")))
    api.post(
        BASE + f"/sessions/{key}/turns",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "t",
                            "type": "function",
                            "function": {"name": "ls", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "content": "a b c", "tool_call_id": "t"},
                {"role": "assistant", "content": "a2"},
            ]
        },
    )
    api.post(BASE + f"/sessions/{key}/turns", turn(("user", "u3"), ("assistant", "a3")))


def test_history_defaults_return_everything_that_fits(api):
    _seed(api)
    body = api.get(BASE + "/sessions/s1/history").json()
    assert [m["seq"] for m in body["messages"]] == list(range(1, 10))
    assert body["pruned_count"] == 0 and body["pruned_tokens"] == 0
    assert body["max_messages"] == 100 and body["max_tokens"] == 20000
    assert body["token_count"] == sum(m["token_count"] for m in body["messages"]) + 3
    assert body["messages"][4]["tool_calls"][0]["id"] == "t"
    assert body["messages"][5]["tool_call_id"] == "t"


def test_history_message_limit_keeps_system_and_newest(api):
    _seed(api)
    body = api.get(BASE + "/sessions/s1/history", {"max_messages": 3}).json()
    assert [m["content"] for m in body["messages"]] == ["rules", "u3", "a3"]
    assert body["pruned_count"] == 6
    stored = Message.objects.filter(seq__in=range(2, 8))
    assert body["pruned_tokens"] == sum(m.token_count for m in stored)
    assert Message.objects.count() == 9  # pruning deletes nothing


def test_history_drops_orphan_tool_result(api):
    _seed(api)
    # Newest non-system run of 4 would be tool, a2, u3, a3: the tool's call was pruned.
    body = api.get(BASE + "/sessions/s1/history", {"max_messages": 5}).json()
    assert [m["content"] for m in body["messages"]] == ["rules", "a2", "u3", "a3"]
    body = api.get(BASE + "/sessions/s1/history", {"max_messages": 6}).json()
    assert [m["role"] for m in body["messages"]][1:3] == ["assistant", "tool"]


def test_history_token_limit(api):
    _seed(api)
    by_seq = {m.seq: m.token_count for m in Message.objects.all()}
    budget = by_seq[1] + by_seq[8] + by_seq[9] + 3
    body = api.get(BASE + "/sessions/s1/history", {"max_tokens": budget}).json()
    assert [m["seq"] for m in body["messages"]] == [1, 8, 9]
    assert body["token_count"] == budget
    body = api.get(BASE + "/sessions/s1/history", {"max_tokens": budget - 1}).json()
    assert [m["seq"] for m in body["messages"]] == [1, 9]


def test_history_uses_agent_settings_by_default(api, agent):
    _seed(api)
    agent.max_messages = 2
    agent.save()
    body = api.get(BASE + "/sessions/s1/history").json()
    assert [m["content"] for m in body["messages"]] == ["rules", "a3"]


def test_history_rejects_bad_limits(api):
    _seed(api)
    assert api.get(BASE + "/sessions/s1/history", {"max_messages": -1}).status_code == 422
    assert api.get(BASE + "/sessions/s1/history", {"max_tokens": "lots"}).status_code == 422


# --- turns ----------------------------------------------------------------------------


def test_turns_metadata_is_paginated(api):
    for i in range(5):
        api.post(
            BASE + "/sessions/s1/turns",
            turn(("user", f"q{i}"), usage={"input_tokens": 10 * i, "output_tokens": i}),
        )
    page = api.get(BASE + "/sessions/s1/turns", {"limit": 2}).json()
    assert [t["iteration"] for t in page["items"]] == [1, 2]
    first = page["items"][0]
    assert set(first) >= {
        "iteration",
        "message_count",
        "input_tokens",
        "output_tokens",
        "tool_calls",
        "timestamp",
    }
    iterations = [t["iteration"] for t in page["items"]]
    while page["next_cursor"]:
        page = api.get(
            BASE + "/sessions/s1/turns", {"limit": 2, "cursor": page["next_cursor"]}
        ).json()
        iterations += [t["iteration"] for t in page["items"]]
    assert iterations == [1, 2, 3, 4, 5]
    assert api.get(BASE + "/sessions/s1/turns", {"limit": 500}).status_code == 422
    assert api.get(BASE + "/sessions/s1/turns", {"cursor": "%%%"}).status_code == 422
    assert api.get(BASE + "/sessions/absent/turns").status_code == 404


# --- imported turns: when they happened, and how their tool calls link to messages --------


def test_turn_keeps_its_timestamp_call_ids_and_tool_details(api):
    body = turn(
        ("user", "read it"),
        timestamp="2026-01-21T06:20:33.873Z",
        tool_calls=[
            {
                "tool": "Read",
                "query": {"file_path": "/src/app.py"},
                "output": "     1→import os",
                "call_id": "toolu_01",
                "details": {"totalLines": 338, "startLine": 1, "numLines": 1},
            }
        ],
    )
    assert api.post(f"{BASE}/sessions/s1/turns", body).status_code == 201
    stored = Turn.objects.get()
    assert stored.timestamp.isoformat() == "2026-01-21T06:20:33.873000+00:00"
    assert Message.objects.get().created_at == stored.timestamp
    call = ToolCall.objects.get()
    assert (call.call_id, call.details) == (
        "toolu_01",
        {"totalLines": 338, "startLine": 1, "numLines": 1},
    )
    assert call.created_at == stored.timestamp


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"timestamp": "2999-01-01T00:00:00Z"}, "future"),
        ({"timestamp": "yesterday"}, "datetime"),
        ({"tool_calls": [{"tool": "Read", "details": {"x": "y" * 9000}}]}, "at most 8192"),
        ({"tool_calls": [{"tool": "Read", "call_id": "c" * 201}]}, "at most 200 characters"),
    ],
)
def test_bad_timestamp_or_tool_details_are_422_and_store_nothing(api, extra, message):
    response = api.post(f"{BASE}/sessions/s1/turns", turn(("user", "hi"), **extra))
    assert response.status_code == 422
    assert message in json.dumps(response.json())
    assert nothing_stored()
