"""An append whose API key is looked up in the append's own statement
(sessions.post_turn_at_once, conversation.append_turn_with_key): one round trip to
PostgreSQL for the whole request where authentication and the append took two. It takes
only the common request; every other one is answered the usual way, with nothing written
by the statement that did not apply. Each test holds an answer to what the usual way (the
lane off: MEMORYAPP_API_LANE=false) answers, and counts the statements."""

import os
from datetime import timedelta

import pytest
import tiktoken
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.api import auth
from memoryapp.core import ratelimit
from memoryapp.core.models import Agent, ApiKey, Message, Session, Turn
from memoryapp.lib import tokens
from tests.conftest import ApiClient, count_health_checks, turn, without_times

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (DATABASE_URL=postgres://...): the one-statement append",
    ),
]

needs_redis = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"),
    reason="needs Redis (REDIS_URL=redis://...): a key's count before its lookup",
)


@pytest.fixture(autouse=True)
def key_limit_known_before_the_lookup(settings):
    """Without Redis, a key's limit is counted after its lookup, so the statement is
    tried only with that limit off (test_a_key_limit_counted_after_the_lookup_… shows
    the other case); with Redis, the key's count comes before the lookup (the default)."""
    if not ratelimit.one_round_trip():
        settings.MEMORYAPP_RATE_LIMIT_KEY = "off"


TURNS = "/api/v1/sessions/{}/turns"
BODY = turn(("user", "Where is the parser?"), ("assistant", "In src/parser.py, line 40."))


def statements(queries) -> list[str]:
    # The savepoint a keyed append takes inside the test's transaction is not a statement
    # of the request's own; nor the record of a key's use (once a minute, ApiKey.touch).
    return [
        q["sql"]
        for q in queries.captured_queries
        if "SAVEPOINT" not in q["sql"] and 'UPDATE "core_apikey"' not in q["sql"][:40]
    ]


def at_once(sql: list[str]) -> bool:
    return len(sql) == 1 and "WITH ka AS" in sql[0][:40]


def stored(key: str) -> dict:
    session = Session.objects.get(key=key)
    return {
        "totals": session.totals(),
        "lifetime": session.expires_at - session.last_activity_at,
        "messages": list(
            Message.objects.filter(session=session)
            .order_by("seq")
            .values("seq", "role", "content", "name", "tool_calls", "token_count")
        ),
        "turns": list(
            Turn.objects.filter(session=session).values(
                "iteration", "input_tokens", "output_tokens", "usage_source", "model"
            )
        ),
    }


def post_both_ways(api, settings, key: str, body: dict, headers=None):
    """(answer, statements) of the same append to two like sessions, the lane off then on."""
    results = []
    for lane in (False, True):
        settings.MEMORYAPP_API_LANE = lane
        with CaptureQueriesContext(connection) as queries:
            response = api.post(TURNS.format(f"{key}-{lane}"), body, headers=headers)
        results.append((response, statements(queries)))
    return results


BODIES = {
    "plain": BODY,
    "reported usage, model and names": {
        **turn(("user", "run it"), ("assistant", "ran: 3 passed")),
        "usage": {"input_tokens": 1200, "output_tokens": 80},
        "model": "claude-x",
    },
    "a call in a message and its result": {
        "messages": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "grep", "arguments": '{"q": "def parse"}'},
                    }
                ],
            },
            {"role": "tool", "content": "src/parser.py:40", "name": "grep", "tool_call_id": "c1"},
        ]
    },
    "a timestamp": {**BODY, "timestamp": "2026-11-20T10:00:00Z"},
}


@pytest.mark.parametrize("name", BODIES)
def test_an_append_to_a_live_session_is_one_statement_and_the_same_turn(api, settings, name):
    body = BODIES[name]
    for lane in (False, True):
        settings.MEMORYAPP_API_LANE = lane
        assert api.put(f"/api/v1/sessions/s-{lane}", {}).status_code == 201
        assert api.post(TURNS.format(f"s-{lane}"), BODY).status_code == 201
    (usual, usual_sql), (fast, fast_sql) = post_both_ways(api, settings, "s", body)
    assert usual.status_code == fast.status_code == 201
    assert len(usual_sql) == 2 and at_once(fast_sql)
    assert without_times(fast.json()) == without_times(usual.json())
    usual_rows, fast_rows = stored("s-False"), stored("s-True")
    assert fast_rows == usual_rows
    assert fast["Content-Type"] == usual["Content-Type"]


def test_the_key_of_the_append_is_the_request_s_and_its_use_recorded(api, agent, settings):
    """The statement records the key's last use as ApiKey.touch does: when it is older
    than MEMORYAPP_KEY_TOUCH_SECONDS, and not otherwise."""
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    key = ApiKey.objects.get(agent=agent)
    long_ago = timezone.now() - timedelta(hours=1)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=long_ago)
    with CaptureQueriesContext(connection) as queries:
        assert api.post(TURNS.format("live"), BODY).status_code == 201
    assert at_once(statements(queries))
    used = ApiKey.objects.get(pk=key.pk).last_used_at
    assert used > long_ago + timedelta(minutes=59)
    assert api.post(TURNS.format("live"), BODY).status_code == 201
    assert ApiKey.objects.get(pk=key.pk).last_used_at == used  # recent: not written again


def test_another_agents_session_of_the_same_name_is_not_touched(api, other_api):
    assert other_api.put("/api/v1/sessions/shared", {}).status_code == 201
    assert api.put("/api/v1/sessions/shared", {}).status_code == 201
    with CaptureQueriesContext(connection) as queries:
        assert api.post(TURNS.format("shared"), BODY).status_code == 201
    assert at_once(statements(queries))
    counts = dict(Session.objects.filter(key="shared").values_list("agent__name", "message_count"))
    assert sorted(counts.values()) == [0, 2]


@pytest.mark.parametrize(
    "case",
    [
        "wrong key",
        "revoked key",
        "no key",
        "new session",
        "expired session",
        "tool calls",
        "query parameter",
        "long Idempotency-Key",
    ],
)
def test_what_the_statement_does_not_take_is_answered_the_usual_way(api, agent, settings, case):
    """The statement writes nothing and the usual way answers: the same answer as with
    the lane off, and what is stored is the same."""
    clients = {True: api, False: api}
    body = BODY
    for lane in (False, True):
        if case in ("new session",):
            continue
        assert api.put(f"/api/v1/sessions/s-{lane}", {}).status_code == 201
        if case == "expired session":
            Session.objects.filter(key=f"s-{lane}").update(expires_at=timezone.now())
    if case == "wrong key":
        clients = {lane: ApiClient(Client(), "mk_wrong") for lane in (False, True)}
    elif case == "revoked key":
        ApiKey.objects.filter(agent=agent).update(revoked_at=timezone.now())
    elif case == "no key":
        clients = {lane: ApiClient(Client(), "") for lane in (False, True)}
    elif case == "tool calls":
        body = {**BODY, "tool_calls": [{"tool": "grep", "query": "def parse", "output": "x:1"}]}
    path, headers = TURNS, None
    if case == "query parameter":
        path = TURNS + "?limt=5"
    elif case == "long Idempotency-Key":
        headers = {"Idempotency-Key": "k" * 201}
    answers = []
    for lane in (False, True):
        settings.MEMORYAPP_API_LANE = lane
        with CaptureQueriesContext(connection) as queries:
            response = clients[lane].post(path.format(f"s-{lane}"), body, headers=headers)
        answers.append((response.status_code, response.json(), statements(queries)))
    (usual_status, usual, usual_sql), (status, answer, sql) = answers
    assert status == usual_status
    if status == 201:
        assert without_times(answer)["iteration"] == without_times(usual)["iteration"]
        assert stored("s-True")["messages"] == stored("s-False")["messages"]
    else:
        assert answer == usual
        assert not Message.objects.exists()
    tried = [s for s in sql if "WITH ka AS" in s[:40]]
    # Tried only for a key authenticated here before, and a request that may apply.
    assert len(tried) == (1 if case in ("revoked key", "new session", "expired session") else 0)
    assert len(sql) == len(usual_sql) + len(tried)


def test_a_replay_of_an_idempotent_append_is_answered_the_usual_way(api, settings):
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    first = api.post(TURNS.format("live"), BODY, headers={"Idempotency-Key": "once"})
    again = api.post(TURNS.format("live"), BODY, headers={"Idempotency-Key": "once"})
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert again.json() == first.json()
    assert Message.objects.count() == 2
    changed = api.post(
        TURNS.format("live"), turn(("user", "other")), headers={"Idempotency-Key": "once"}
    )
    assert changed.status_code == 409 and Message.objects.count() == 2


@pytest.mark.parametrize(
    "body",
    [
        {"messages": []},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": [{"role": "user", "content": "a\x00b"}]},
        {**BODY, "surprise": 1},
        "not json",
    ],
)
@pytest.mark.parametrize("key", ["right", "wrong"])
def test_a_bad_body_is_answered_the_usual_way(api, settings, body, key):
    """422 with the field's name, or 401 without a usable key (authentication first)."""
    client = api if key == "right" else ApiClient(Client(), "mk_wrong")
    answers = []
    for lane in (False, True):
        settings.MEMORYAPP_API_LANE = lane
        assert api.put(f"/api/v1/sessions/s-{lane}", {}).status_code == 201
        if body == "not json":
            response = client.client.post(
                TURNS.format(f"s-{lane}"),
                "not json",
                content_type="application/json",
                headers=client._headers(None),
            )
        else:
            response = client.post(TURNS.format(f"s-{lane}"), body)
        answers.append((response.status_code, response.json()))
    assert answers[0] == answers[1]
    assert answers[1][0] == (401 if key == "wrong" else 400 if body == "not json" else 422)
    assert not Message.objects.exists()


def test_an_agent_whose_encoding_changed_counts_in_its_new_one(api, agent, monkeypatch):
    """Tokens are counted before the statement finds the agent, in the encoding its key
    was authenticated with: after the agent's encoding changed the statement does not
    match, the usual way counts in the new one, and the next append counts in it at once.
    (An encoding of single bytes stands for another one: only cl100k_base loads
    offline here.)"""
    bytes_only = tiktoken.Encoding(
        name="bytes_only",
        pat_str=r"[\s\S]",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )
    monkeypatch.setitem(tokens._cache, "bytes_only", bytes_only)
    assert api.put("/api/v1/sessions/live", {}).status_code == 201  # known: cl100k_base
    Agent.objects.filter(pk=agent.pk).update(encoding="bytes_only")
    text = "naïve café: überprüfen the parser " * 20
    expected = tokens.count_message(bytes_only, "user", text, None, None)
    assert expected != tokens.count_message(tokens.get_encoding("cl100k_base"), "user", text)
    answers = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            response = api.post(TURNS.format("live"), turn(("user", text)))
        answers.append((response.json()["token_counts"], statements(queries)))
    (first, first_sql), (second, second_sql) = answers
    assert first == second == [expected]
    assert "WITH ka AS" in first_sql[0][:40] and len(first_sql) == 3  # tried, usual way
    assert at_once(second_sql)
    assert list(Message.objects.values_list("token_count", flat=True)) == [expected] * 2


def test_an_encoding_that_cannot_be_loaded_is_left_to_the_usual_way(api, agent):
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    key_hash = ApiKey.objects.get(agent=agent).key_hash
    auth.KNOWN_KEYS.encodings[key_hash] = "no_such_encoding"
    with CaptureQueriesContext(connection) as queries:
        response = api.post(TURNS.format("live"), BODY)
    assert response.status_code == 201 and len(statements(queries)) == 2
    assert auth.KNOWN_KEYS.encoding(key_hash) == "cl100k_base"  # noted again
    assert Message.objects.count() == 2


def test_a_wrong_key_is_counted_as_a_failure_once(api, settings):
    """A wrong key is never tried in a statement (it was never authenticated here): its
    failures are counted by authentication alone, as with the lane off (each from an
    address of its own)."""
    settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES = "2/300"
    answers = {}
    for lane, address in ((False, "10.0.0.1"), (True, "10.0.0.2")):
        settings.MEMORYAPP_API_LANE = lane
        wrong = ApiClient(Client(REMOTE_ADDR=address), "mk_wrong")
        with CaptureQueriesContext(connection) as queries:
            answers[lane] = [wrong.post(TURNS.format("s"), BODY).status_code for _ in range(3)]
        assert not any("WITH ka AS" in sql[:40] for sql in statements(queries))
    assert answers[False] == answers[True] == [401, 401, 429]
    assert not Message.objects.exists()


def test_an_address_refused_is_answered_429_and_nothing_is_written(api, settings):
    settings.MEMORYAPP_RATE_LIMIT_ADDRESS = "2/60"
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    assert api.post(TURNS.format("live"), BODY).status_code == 201
    refused = api.post(TURNS.format("live"), BODY)
    assert refused.status_code == 429 and "requests in 60 seconds" in refused.json()["detail"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert Message.objects.count() == 2


def test_a_key_limit_counted_after_the_lookup_is_applied_the_usual_way(api, settings, monkeypatch):
    """Without Redis a key is counted after its lookup (a wrong key is not counted): the
    statement is not tried while the key's limit is on, and the limit holds."""
    monkeypatch.setattr(ratelimit, "_counter_store", ratelimit._CacheCounters())
    settings.MEMORYAPP_RATE_LIMIT_KEY = "3/60"
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    with CaptureQueriesContext(connection) as queries:
        answers = [api.post(TURNS.format("live"), BODY).status_code for _ in range(3)]
    assert answers == [201, 201, 429]
    assert not any("WITH ka AS" in s[:40] for s in statements(queries))
    assert Message.objects.count() == 4  # the PUT counted too


@needs_redis
def test_a_key_over_its_limit_counted_in_redis_gets_429_and_nothing_is_written(api, settings):
    settings.MEMORYAPP_RATE_LIMIT_KEY = "3/60"
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    with CaptureQueriesContext(connection) as queries:
        answers = [api.post(TURNS.format("live"), BODY).status_code for _ in range(3)]
    assert answers == [201, 201, 429]
    tried = [s for s in statements(queries) if "WITH ka AS" in s[:40]]
    assert len(tried) == 2  # within the limit at once; over it, the usual way's 429
    assert Message.objects.count() == 4
    assert api.get("/api/v1/agent").status_code == 429


@pytest.mark.django_db(transaction=True)
def test_a_kept_connection_that_is_fine_gets_no_health_check(api, monkeypatch):
    """Outside a transaction, as in a server: an idle kept connection whose socket has
    nothing to say is used without Django's `SELECT 1` before the write."""
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    connection.close_if_unusable_or_obsolete()  # a request's start, as in a server
    checks = count_health_checks(monkeypatch)
    before = connection.connection
    assert not connection.in_atomic_block and connection.health_check_enabled
    assert api.post(TURNS.format("live"), BODY).status_code == 201
    assert checks == [] and connection.connection is before
    assert Message.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_ended_is_checked_and_replaced_before_the_write(api, monkeypatch):
    """The server ended the backend while the connection was idle (a restart, an idle
    timeout): its socket reads as closed, so Django's check runs before the write and
    replaces the connection; the turn is stored once."""
    import psycopg

    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    connection.close_if_unusable_or_obsolete()
    checks = count_health_checks(monkeypatch)
    before = connection.connection
    other = psycopg.connect(**{**connection.get_connection_params(), "autocommit": True})
    try:
        other.execute("SELECT pg_terminate_backend(%s)", [before.info.backend_pid])
        # The backend is gone once the server says so: wait for that, not a fixed time.
        for _ in range(100):
            gone = other.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [before.info.backend_pid]
            ).fetchone()[0]
            if not gone:
                break
            other.execute("SELECT pg_sleep(0.02)")
    finally:
        other.close()
    response = api.post(TURNS.format("live"), BODY)
    assert response.status_code == 201, response.content
    assert checks == [1] and connection.connection is not before
    assert Message.objects.count() == 2
    Session.objects.all().delete()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("why", ["a long pause", "a socket poll cannot watch"])
def test_after_a_long_pause_or_without_a_look_at_the_socket_django_checks(api, monkeypatch, why):
    """Something on the way (a NAT, a load balancer) may drop an idle connection without
    a word: after more than rows.TRUSTED_IDLE_SECONDS, Django's check runs before the
    write, as it does when the socket cannot be looked at (poll() failing, say)."""
    import select

    from memoryapp.core import rows

    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    connection.close_if_unusable_or_obsolete()
    checks = count_health_checks(monkeypatch)
    if why == "a long pause":
        ended = connections[connection.alias].memoryapp_request_ended
        connections[connection.alias].memoryapp_request_ended = (
            ended - rows.TRUSTED_IDLE_SECONDS - 1
        )
    else:

        def refuse():
            raise ValueError("filedescriptor out of range in select()")

        monkeypatch.setattr(select, "poll", refuse)
    assert api.post(TURNS.format("live"), BODY).status_code == 201
    assert checks == [1]
    assert Message.objects.count() == 2
    Session.objects.all().delete()
