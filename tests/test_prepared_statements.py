"""Issue 13: the fixed statements on every request's path are prepared on PostgreSQL.

The key's lookup, the one-statement append and the restore's reads are parsed (and, once
PostgreSQL keeps a generic plan, planned) once per connection instead of on every request
(core/rows.py). Only on connections kept across requests: behind a pooler in transaction
mode (conn_max_age=0) a prepared statement could land on another server connection, so
none is made there, nor with MEMORYAPP_PREPARE_STATEMENTS off. The tests that read
pg_prepared_statements need PostgreSQL (DATABASE_URL=postgres://…) and say so when
skipped; the answers themselves are checked by the rest of the suite on both databases.
"""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings

from memoryapp.core import rows
from memoryapp.core.models import Agent
from tests.conftest import count_health_checks

pytestmark = pytest.mark.django_db

needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="prepared statements are PostgreSQL's: run with DATABASE_URL=postgres://…",
)

HISTORY = "/api/v1/sessions/prepared/history"
TURNS = "/api/v1/sessions/prepared/turns"
TURN = {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}


def prepared() -> list[str]:
    """The statements this connection has prepared (its psycopg cursors' own)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return sorted(row[0] for row in cursor.fetchall())


def requests(api) -> None:
    """A session's usual round: create, append twice, restore (whole and pruned)."""
    assert api.put("/api/v1/sessions/prepared", {}).status_code == 201
    for _ in range(2):
        assert api.post(TURNS, TURN).status_code == 201
    assert api.get(HISTORY).status_code == 200
    assert len(api.get(HISTORY + "?max_messages=1").json()["messages"]) == 1


@needs_postgresql
def test_the_key_lookup_the_append_and_the_restore_are_prepared_once(api):
    before = prepared()
    requests(api)
    made = [s for s in prepared() if s not in before]
    assert any("FROM core_apikey k" in s for s in made)  # the key's lookup
    # The append, with the key's lookup in it (sessions.post_turn_at_once).
    assert any(s.lstrip().startswith("WITH ka AS") for s in made)
    assert any("FROM core_message m" in s for s in made)  # the restore's read
    # Run again, the same statements are used: none is prepared twice.
    assert api.post(TURNS, TURN).status_code == 201
    assert api.get(HISTORY).status_code == 200
    assert prepared() == sorted(before + made)
    # Between those statements the connection keeps Django's threshold (None): Django's
    # own queries are neither prepared nor recorded by psycopg.
    assert connection.connection.prepare_threshold is None


@needs_postgresql
@override_settings(MEMORYAPP_PREPARE_STATEMENTS=False)
def test_with_preparing_off_no_statement_is_prepared(api):
    before = prepared()
    requests(api)
    assert prepared() == before


@needs_postgresql
def test_a_connection_not_kept_across_requests_prepares_nothing(api, monkeypatch):
    # conn_max_age=0: what the README asks for behind a pooler in transaction mode.
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    assert not rows.preparing()
    before = prepared()
    requests(api)
    assert prepared() == before


@needs_postgresql
def test_the_statements_outlive_a_rolled_back_savepoint_and_still_answer(api):
    """PostgreSQL keeps prepared statements through a rollback (they are not part of
    the transaction); a savepoint rolled back by Django's own queries (an IntegrityError
    caught, as an append's retry race does) leaves them prepared and usable."""
    assert api.get("/api/v1/agent").status_code == 200
    before = prepared()
    assert any("FROM core_apikey k" in s for s in before)
    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.create(name="twice")
        Agent.objects.create(name="twice")  # the agent's name is unique
    assert prepared() == before
    assert api.get("/api/v1/agent").json()["name"] == Agent.objects.get(api_keys__isnull=False).name
    assert prepared() == before


def test_sqlite_prepares_nothing_and_reads_as_before(api):
    if connection.vendor == "postgresql":
        assert rows.preparing()
    else:
        assert not rows.preparing()
    requests(api)
    assert [m["content"] for m in api.get(HISTORY).json()["messages"]] == ["hello", "hi"] * 2


@needs_postgresql
def test_the_system_messages_read_can_use_its_partial_index_in_a_generic_plan(api):
    """A prepared statement may run on a plan made without its parameters' values, and
    such a plan cannot use an index whose condition is on a parameter: the read of a
    pruned restore's system messages writes 'system' into the statement so that the
    partial index of system messages stays usable (else every pruned restore would read
    the whole session)."""
    from memoryapp.core import conversation
    from memoryapp.core.models import Message, Session

    body = {"messages": [{"role": "system", "content": "Be terse."}]}
    assert api.post(TURNS, body).status_code == 201
    many = [{"role": "user", "content": f"m {i}"} for i in range(200)]
    for _ in range(10):
        assert api.post(TURNS, {"messages": many}).status_code == 201
    session = Session.objects.get(key="prepared")
    seen: list[tuple[str, list]] = []
    with connection.execute_wrapper(
        lambda execute, sql, params, many, context: (
            seen.append((sql, list(params))),
            execute(sql, params, many, context),
        )[1]
    ):
        conversation.restore_history(session, max_messages=100, max_tokens=1_000_000)
    system_reads = [(sql, p) for sql, p in seen if "m.role = 'system'" in sql]
    assert len(system_reads) == 1
    sql, params = system_reads[0]
    numbered = sql
    for n in range(1, len(params) + 1):
        numbered = numbered.replace("%s", f"${n}", 1)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Message._meta.db_table}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE system_read AS {numbered}")
        try:
            cursor.execute(
                "EXPLAIN EXECUTE system_read(" + ", ".join(["%s"] * len(params)) + ")", params
            )
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE system_read")
    assert "message_system_by_seq" in plan, plan


@needs_postgresql
def test_a_statement_is_prepared_once_whatever_the_size_of_its_integers(api):
    """psycopg sends a small int as smallint and a large one as integer; a statement is
    prepared once per set of parameter types, so integers go as bigint."""
    from memoryapp.core import conversation
    from memoryapp.core.models import Session

    assert api.post(TURNS, TURN).status_code == 201
    session = Session.objects.get(key="prepared")
    for last in (2, 40_000, 3_000_000_000):
        conversation._message_rows("1 = 1", [session.pk, last])
    whole_reads = [s for s in prepared() if "FROM core_message m" in s and "1 = 1" in s]
    assert len(whole_reads) == 1


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_connection_that_died_while_idle_is_replaced_before_the_key_is_looked_up(api):
    """The key's lookup is a request's first statement: it runs after Django's health
    check of a kept connection, as connection.cursor() would."""
    assert api.get("/api/v1/agent").status_code == 200
    # What the start of a request does in a server (Django's test client skips it): the
    # kept connection is to be checked before its next statement.
    connection.close_if_unusable_or_obsolete()
    connection.connection.close()  # the server closed it meanwhile (a restart, a failover)
    assert api.get("/api/v1/agent").status_code == 200


@needs_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("alive", [True, False])
def test_a_requests_key_lookup_needs_no_health_check_round_trip(api, monkeypatch, alive):
    """Django checks a kept connection with `SELECT 1` before a request's first
    statement; the key's lookup, a read, is that check itself: a live connection answers
    it with no check before, a dead one is replaced and the lookup run again."""
    assert api.get("/api/v1/agent").status_code == 200
    connection.close_if_unusable_or_obsolete()  # a request's start, as in a server
    checks = count_health_checks(monkeypatch)
    if not alive:
        connection.connection.close()  # the server closed it meanwhile
    before = connection.connection
    assert api.get("/api/v1/agent").status_code == 200
    assert checks == ([] if alive else [1])  # a check only once the lookup failed
    assert (connection.connection is before) is alive
    assert api.get("/api/v1/sessions/prepared/history").status_code == 404


@needs_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["terminated", "failed transaction"])
def test_a_connection_broken_on_the_server_is_replaced_at_the_key_lookup(api, how):
    """The server ended the backend (a restart, an idle timeout), or the connection was
    left in a failed transaction: the lookup fails, the check finds it unusable, and the
    request is answered on a new connection."""
    import psycopg

    assert api.get("/api/v1/agent").status_code == 200
    connection.close_if_unusable_or_obsolete()
    before = connection.connection
    if how == "terminated":
        pid = before.info.backend_pid
        other = psycopg.connect(**{**connection.get_connection_params(), "autocommit": True})
        try:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
        finally:
            other.close()
    else:
        before.execute("BEGIN")
        with pytest.raises(psycopg.errors.DivisionByZero):
            before.execute("SELECT 1 / 0")
    assert api.get("/api/v1/agent").status_code == 200
    assert connection.connection is not before


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_statements_own_error_keeps_the_connection(api):
    """A timeout leaves the connection usable: the request is answered as before (503,
    the lookup not run twice) and the connection, with its prepared statements, kept."""
    import psycopg

    assert api.get("/api/v1/agent").status_code == 200
    connection.close_if_unusable_or_obsolete()
    before = connection.connection
    before.execute("SET statement_timeout = 200")
    other = psycopg.connect(**{**connection.get_connection_params(), "autocommit": False})
    # The lock ends after 2 s: a lookup run again on a new connection (no timeout there)
    # would wait for it and answer 200, failing this test instead of hanging it.
    release = threading.Timer(2.0, other.rollback)
    try:
        other.execute("LOCK TABLE core_apikey IN ACCESS EXCLUSIVE MODE")
        release.start()
        answer = api.get("/api/v1/agent")
    finally:
        release.join()
        other.close()
        if not before.closed:
            before.execute("SET statement_timeout = 0")
    assert answer.status_code == 503
    assert connection.connection is before
    assert api.get("/api/v1/agent").status_code == 200


@needs_postgresql
def test_inside_a_transaction_the_key_lookup_takes_djangos_way(api, monkeypatch):
    """In a caller's transaction a failed read cannot be run again on a new connection:
    there Django's own check (when due) comes first."""
    assert api.get("/api/v1/agent").status_code == 200
    checks = count_health_checks(monkeypatch)
    connection.health_check_done = False
    assert connection.in_atomic_block
    assert api.get("/api/v1/agent").status_code == 200
    assert checks == [1]


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_after_a_column_type_changes_a_connection_fails_once_and_is_replaced(api):
    """A migration that changes the type of a column a prepared statement reads makes
    that statement fail ("cached plan must not change result type") on every connection
    that prepared it: the first such request fails, and its connection is closed at the
    end of it instead of failing until its age runs out."""
    import psycopg

    assert api.get("/api/v1/agent").status_code == 200
    other = psycopg.connect(**{**connection.get_connection_params(), "autocommit": True})
    try:
        other.execute("ALTER TABLE core_apikey ALTER COLUMN name TYPE varchar(101)")
        assert api.get("/api/v1/agent").status_code >= 500
        # What the end of a request does in a server (the test client skips it): a
        # connection kept otherwise would fail every request until its age ran out.
        connection.close_if_unusable_or_obsolete()
        assert api.get("/api/v1/agent").status_code == 200
        assert api.get("/api/v1/agent").status_code == 200
    finally:
        other.execute("ALTER TABLE core_apikey ALTER COLUMN name TYPE varchar(100)")
        other.close()
        connection.close()  # its statements were prepared against the changed column


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_after_the_server_loses_the_statements_a_connection_fails_once_and_is_replaced(api):
    """Statements the server no longer has ("prepared statement … does not exist": a
    pooler in transaction mode, a DISCARD ALL) fail the request that runs them once; its
    connection is closed at its end instead of failing until its age runs out."""
    assert api.get("/api/v1/agent").status_code == 200
    connection.connection.execute("DEALLOCATE ALL")  # psycopg does not see this one
    assert api.get("/api/v1/agent").status_code >= 500
    # What the end of a request does in a server (the test client skips it).
    connection.close_if_unusable_or_obsolete()
    assert api.get("/api/v1/agent").status_code == 200


@needs_postgresql
@pytest.mark.parametrize(
    "moment",
    [
        "2026-11-20 10:00:00+00",
        "2026-11-20 10:00:00.000500+00",
        "2026-11-20 10:00:00.999999+00",
        "1969-07-20 20:17:40.123456+00",
        "0099-01-01 00:00:00+00",
        "9999-12-31 23:59:59.999999+00",
        "2026-03-29 02:30:00+05:30",  # written with another zone: read back in UTC
    ],
)
def test_a_fixed_statement_reads_times_as_the_orm_reads_them(api, moment):
    """The fixed statements load a time by psycopg's own loader, not Django's (which
    wraps it in Python and sets the zone again): where both zones are UTC, the same
    value, tzinfo included."""
    from datetime import UTC

    import psycopg

    from memoryapp.core import conversation
    from memoryapp.core.models import Message, Session

    assert api.post(TURNS, TURN).status_code == 201
    session = Session.objects.get(key="prepared")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE core_message SET created_at = %s::timestamptz, "
            "removed_at = %s::timestamptz WHERE session_id = %s",
            [moment, moment, session.pk],
        )
    read = conversation._message_rows("1 = 1", [session.pk, session.message_count])
    orm = list(
        Message.objects.filter(session=session).order_by("seq").values("created_at", "removed_at")
    )
    assert [(m["created_at"], m["removed_at"]) for m in read] == [
        (m["created_at"], m["removed_at"]) for m in orm
    ]
    assert all(m["created_at"].tzinfo is UTC and m["removed_at"].tzinfo is UTC for m in read)
    with rows.binding_cursor() as cursor:
        loader = cursor.cursor.adapters.get_loader(rows._TIMESTAMPTZ, psycopg.pq.Format.TEXT)
    assert loader is psycopg.adapters.get_loader(rows._TIMESTAMPTZ, psycopg.pq.Format.TEXT)


@needs_postgresql
def test_a_connection_in_another_zone_reads_times_through_djangos_loader(api):
    """A connection whose zone is not UTC (a SET TIME ZONE) keeps Django's loader, which
    labels the time with Django's zone as the ORM does."""
    from memoryapp.core import conversation
    from memoryapp.core.models import Message, Session

    assert api.post(TURNS, TURN).status_code == 201
    session = Session.objects.get(key="prepared")
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
    try:
        read = conversation._message_rows("1 = 1", [session.pk, session.message_count])
        orm = list(Message.objects.filter(session=session).order_by("seq").values("created_at"))
        assert [m["created_at"] for m in read] == [m["created_at"] for m in orm]
        assert [m["created_at"].utcoffset() for m in read] == [
            m["created_at"].utcoffset() for m in orm
        ]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
