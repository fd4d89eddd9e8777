"""A restore whose messages come in the API key's own statement (api/auth._find_key with
a restore, answers.HISTORY_MESSAGE_SQL): `GET …/history` of a session read all at once
(no more messages than the limit and one) is one statement where the key's lookup and
the messages' read took two, each message written by PostgreSQL as history_message
writes it. Every test holds the answer to the usual way's (the read after the lookup,
auth._restore_in_path off) and counts the statements."""

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.api import answers, auth
from memoryapp.core.conversation import MESSAGE_FIELDS
from memoryapp.core.models import Message, Session
from tests.conftest import turn

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (DATABASE_URL=postgres://...): the messages' JSON fields "
        "are written by its to_char",
    ),
]

HISTORY = "/api/v1/sessions/{}/history"
TURNS = "/api/v1/sessions/{}/turns"


def statements(queries) -> list[str]:
    # Not the record of a key's use (once a minute, ApiKey.touch).
    return [q["sql"] for q in queries.captured_queries if 'UPDATE "core_apikey"' not in q["sql"]]


def fused(sql: list[str]) -> bool:
    """Whether the messages came with the key: the request's first statement reads them,
    and no later one reads them all again (conversation._choose's read of a session read
    all at once; a pruned part's summary reads its own)."""
    again = [s for s in sql[1:] if " m WHERE m.session_id" in s and "AND 1 = 1" in s]
    return bool(sql) and "UNION ALL" in sql[0] and "core_message" in sql[0] and not again


def both_ways(api, monkeypatch, key: str, params: dict | None = None):
    """(status, JSON, statements) of the restore with the messages read with the key,
    then of the same restore the usual way."""
    answers_ = []
    for way in ("at once", "usual"):
        if way == "usual":
            monkeypatch.setattr(auth, "_restore_in_path", lambda request: None)
        with CaptureQueriesContext(connection) as queries:
            answer = api.get(HISTORY.format(key), params or {})
        answers_.append((answer.status_code, answer.json(), statements(queries)))
    monkeypatch.undo()
    return answers_


def a_session(api, key: str, turns: int = 5) -> None:
    api.post(
        TURNS.format(key),
        turn(("system", "You fix parsers."), ("user", "Where is the parser? é 😀 <b>")),
    )
    for n in range(turns):
        api.post(
            TURNS.format(key),
            {
                "messages": [
                    {"role": "user", "content": f"step {n}: run the tests"},
                    {"role": "assistant", "content": f"Ran them: {n} passed.", "name": "coder"},
                ],
                "tool_calls": [{"tool": "bash", "query": "pytest -q", "output": f"{n} passed"}],
            },
        )


@pytest.mark.parametrize(
    "params", [{}, {"max_messages": 10000, "max_tokens": 10_000_000}, {"max_messages": "12"}]
)
def test_a_restore_read_with_the_key_answers_as_the_usual_way_in_one_statement(
    api, monkeypatch, params
):
    a_session(api, "s")
    (status, at_once, sql), (usual_status, usual, usual_sql) = both_ways(
        api, monkeypatch, "s", params
    )
    assert status == usual_status == 200
    assert at_once == usual and len(at_once["messages"]) == 12
    assert fused(sql) and len(sql) == 1, sql
    assert len(usual_sql) == 2 and not fused(usual_sql)


def test_a_small_session_is_read_by_its_index_beside_a_long_one(api, agent, monkeypatch):
    """The statement reads the session's messages by (session, seq) whatever the table's
    statistics say of an average session. Beside one long session (the statistics then
    count two sessions of 10,000 messages on average), a join of the key's lookup with
    the messages was planned as a scan of the whole table, for a session of 12."""
    from memoryapp.core import rows

    a_session(api, "small")
    api.post(TURNS.format("long"), turn(("user", "first")))
    long = Session.objects.get(agent=agent, key="long")
    Message.objects.bulk_create(
        [
            Message(session=long, seq=seq, role="user", content=f"line {seq}", token_count=3)
            for seq in range(2, 20_002)
        ],
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE core_message")
    read = []
    first_read = rows.first_read
    monkeypatch.setattr(rows, "first_read", lambda sql, params: read.append((sql, params)) or
                        first_read(sql, params))  # fmt: skip
    answer = api.get(HISTORY.format("small"), {"max_messages": 10000})
    assert answer.status_code == 200 and len(answer.json()["messages"]) == 12
    sql, params = read[0]
    assert "UNION ALL" in sql
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "Seq Scan on core_message" not in plan, plan
    assert plan.count("Index Scan using message_unique_seq on core_message") == 2, plan


def test_a_restore_with_a_small_token_budget_prunes_as_the_usual_way(api, monkeypatch):
    a_session(api, "s")
    (_, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "s", {"max_tokens": 60})
    assert at_once == usual and at_once["pruned_count"] > 0 and fused(sql)


def test_a_session_past_the_limit_is_read_the_usual_way(api, agent, monkeypatch):
    agent.max_messages = 6
    agent.save()
    a_session(api, "s")
    (_, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "s")
    assert at_once == usual and at_once["pruned_count"] == 6
    # The statement's condition held its messages back: the usual pruned read follows.
    assert any("m.role = " in s and "system" in s for s in sql[1:])
    # One more than the limit is still read all at once (conversation._choose).
    (_, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "s", {"max_messages": 11})
    assert at_once == usual and fused(sql)
    (_, at_once, sql), _ = both_ways(api, monkeypatch, "s", {"max_messages": 10})
    assert any("m.role = " in s and "system" in s for s in sql[1:])


def test_a_session_longer_than_read_with_the_key_is_read_after_it(api, monkeypatch):
    """Authentication reads the messages before a rate limit can refuse the request:
    never more than auth.READ_WITH_KEY of them, whatever the limit asked."""
    monkeypatch.setattr(auth, "READ_WITH_KEY", 8)
    auth._key_statement.cache_clear()
    try:
        a_session(api, "s", turns=3)  # 8 messages
        whole = {"max_messages": 10000}
        (_, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "s", whole)
        assert at_once == usual and len(at_once["messages"]) == 8 and fused(sql)
        monkeypatch.setattr(auth, "READ_WITH_KEY", 8)
        api.post(TURNS.format("s"), turn(("user", "ninth")))
        (_, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "s", whole)
        assert at_once == usual and len(at_once["messages"]) == 9
        assert "UNION ALL" in sql[0] and not fused(sql)
    finally:
        auth._key_statement.cache_clear()


def test_a_refused_request_reads_no_more_than_read_with_the_key(api, settings):
    settings.MEMORYAPP_RATE_LIMIT_KEY = "1/3600"
    a_session(api, "s", turns=1)
    with CaptureQueriesContext(connection) as queries:
        answer = api.get(HISTORY.format("s"), {"max_messages": 10000})
    assert answer.status_code == 429
    assert f"<= {auth.READ_WITH_KEY} " in statements(queries)[0]


@pytest.mark.parametrize("prepared", [True, False])
def test_a_restore_is_read_with_the_key_prepared_or_not(api, monkeypatch, settings, prepared):
    settings.MEMORYAPP_PREPARE_STATEMENTS = prepared
    a_session(api, "s", turns=1)
    (_, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "s")
    assert at_once == usual and fused(sql) and len(at_once["messages"]) == 4
    (_, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "s", {"max_messages": 0})
    assert at_once == usual and at_once["pruned_count"] == 3
    assert any("m.role = " in s and "system" in s for s in sql[1:])


def test_a_session_named_history_is_not_read_as_a_restore(api):
    a_session(api, "history", turns=1)
    with CaptureQueriesContext(connection) as queries:
        answer = api.get("/api/v1/sessions/history")
    assert answer.status_code == 200 and "UNION ALL" not in statements(queries)[0]


def test_an_empty_session_is_read_with_the_key(api, monkeypatch):
    api.put("/api/v1/sessions/empty", {"goal": "nothing yet"})
    (status, at_once, sql), (_, usual, _) = both_ways(api, monkeypatch, "empty")
    assert status == 200 and at_once == usual and at_once["messages"] == [] and fused(sql)


@pytest.mark.parametrize(
    "asked, status", [("abc", 422), ("-1", 422), ("10001", 422), ("٣", 422), ("", 422),
                      (" 5", 200), ("1.0", 200)]
)  # fmt: skip
def test_a_limit_not_written_as_digits_is_answered_the_usual_way(api, monkeypatch, asked, status):
    """A limit the view refuses is refused as before; one it reads but not written as
    plain digits is read the usual way (auth._restore_in_path reads digits only)."""
    a_session(api, "s", turns=1)
    (at_once_status, at_once, sql), (usual_status, usual, _) = both_ways(
        api, monkeypatch, "s", {"max_messages": asked}
    )
    assert at_once_status == usual_status == status and at_once == usual
    assert not any("UNION ALL" in s for s in sql)


def test_another_agents_or_an_expired_session_is_not_found(api, other_api, agent):
    a_session(api, "s", turns=1)
    assert other_api.get(HISTORY.format("s")).status_code == 404
    Session.objects.filter(agent=agent, key="s").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    with CaptureQueriesContext(connection) as queries:
        answer = api.get(HISTORY.format("s"))
    assert answer.status_code == 404 and fused(statements(queries))


def test_the_other_agents_session_of_the_same_name_is_read(api, other_api, monkeypatch):
    a_session(api, "s", turns=1)
    other_api.post(TURNS.format("s"), turn(("user", "theirs")))
    (_, at_once, sql), (_, usual, _) = both_ways(other_api, monkeypatch, "s")
    assert at_once == usual and [m["content"] for m in at_once["messages"]] == ["theirs"]
    assert fused(sql)


def test_messages_read_with_the_key_are_taken_once_for_their_own_restore(api, agent):
    """messages_read gives the messages only to the restore they were read for: the same
    session and limit; and only once."""
    from types import SimpleNamespace

    a_session(api, "s", turns=1)
    session = Session.objects.get(agent=agent, key="s")
    every = ["m"] * session.message_count
    for read, expected in [
        (("s", None, session.pk, every), every),
        (("t", None, session.pk, every), None),
        (("s", 5, session.pk, every), None),
        (("s", None, session.pk + 1, every), None),
        (("s", None, session.pk, every[1:]), None),
    ]:
        request = SimpleNamespace(auth=SimpleNamespace(messages_read=read))
        assert auth.messages_read(request, session, None) == expected
        assert auth.messages_read(request, session, None) is None


@pytest.mark.parametrize(
    "columns",
    [
        {},
        {"name": "bash", "tool_call_id": "call_1", "tool_calls": [{"id": "call_1"}]},
        {"tool_calls": [], "revisions": [], "name": "", "client_id": ""},
        {"tool_calls": {"a": [1, 2.5, None, "x"]}, "revisions": {}},
        {"client_id": "m-7", "removed_at": "2026-11-24T05:17:38.000001+00:00",
         "revisions": [{"action": "removed", "at": "2026-11-24T05:17:38Z"}]},
        {"created_at": "2026-11-24T05:17:38+00:00"},
        {"created_at": "2026-11-24T05:17:38.000999+00:00"},
        {"created_at": "2026-11-24T05:17:38.999999+00:00"},
        {"created_at": "2026-11-24T05:17:38.5+02:00"},
        {"created_at": "2026-03-29T01:30:00.25-09:30"},
        {"created_at": "1901-12-13T20:45:52.123456+00:00"},
        {"created_at": "0001-01-01T00:00:00.001+00:00"},
        {"created_at": "9999-12-31T23:59:59.999999+00:00"},
        {"content": "\x01\t\"quoted\" \\ back é 😀 \u2028 </script>"},
    ],
)  # fmt: skip
def test_a_message_is_written_by_postgresql_as_history_message_writes_it(api, agent, columns):
    """answers.HISTORY_MESSAGE_SQL then history_messages write each stored column as
    history_message writes what the ORM reads."""
    api.post(TURNS.format("s"), turn(("user", "hello")))
    values = dict(columns)
    for time_field in ("created_at", "removed_at"):
        if time_field in values:
            values[time_field] = datetime.fromisoformat(values[time_field])
    Message.objects.filter(session__key="s").update(**values)
    stored = Message.objects.filter(session__key="s").values(*MESSAGE_FIELDS).get()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {answers.HISTORY_MESSAGE_SQL} FROM {Message._meta.db_table} m "
            f"JOIN {Session._meta.db_table} s ON s.id = m.session_id WHERE s.key = %s",
            ["s"],
        )
        written = answers.history_messages(cursor.fetchall())
    expected = answers.history_message(stored)
    assert written == [expected] and list(written[0]) == list(expected)


def test_a_pruned_restore_reads_its_pages_as_its_answer_writes_them(api, agent, monkeypatch):
    """A session past the limit is read after the key, its system messages and newest
    pages written by PostgreSQL as history_message writes them (answers.HISTORY_READER):
    the same answer as ninja's own for every kind of column."""
    agent.max_messages = 6
    agent.save()
    a_session(api, "s", turns=8)
    moment = datetime.fromisoformat
    odd = [
        {"name": "bash", "tool_call_id": "call_1", "tool_calls": [{"id": "call_1"}]},
        {"tool_calls": [], "revisions": [], "name": "", "client_id": ""},
        {"client_id": "m-7", "removed_at": moment("2026-11-24T05:17:38.000001+00:00"),
         "revisions": [{"action": "removed", "at": "2026-11-24T05:17:38Z"}]},
        {"created_at": moment("2026-11-24T05:17:38.5+02:00")},
    ]  # fmt: skip
    session = Session.objects.get(agent=agent, key="s")
    for seq, columns in zip((1, 14, 15, 16), odd, strict=True):  # the system message too
        Message.objects.filter(session=session, seq=seq).update(**columns)
    with CaptureQueriesContext(connection) as queries:
        fast = api.get(HISTORY.format("s"))
    sql = statements(queries)  # before the next request empties the log
    monkeypatch.setattr(answers, "ENABLED", False)
    slow = api.get(HISTORY.format("s"))
    assert fast.status_code == slow.status_code == 200
    assert fast.json() == slow.json() and fast.json()["pruned_count"] == 12
    # The system messages' read and the newest page's (a summary reads its own span).
    pages = [s for s in sql[1:] if ("m.role = " in s and "system" in s) or "m.seq DESC" in s]
    assert len(pages) == 2 and all("to_char" in s for s in pages), sql


def test_a_limit_of_thousands_of_digits_is_not_a_500(api):
    """Python's int() refuses more than 4,300 digits: such a limit is left to the view."""
    a_session(api, "s", turns=1)
    answer = api.get(HISTORY.format("s"), {"max_messages": "0" * 4301 + "5"})
    assert answer.status_code == 200 and len(answer.json()["messages"]) == 4
