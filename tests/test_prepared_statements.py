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

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings

from memoryapp.core import rows
from memoryapp.core.models import Agent

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
    assert any(s.lstrip().startswith("WITH s AS") for s in made)  # the append
    assert any("FROM core_message m" in s for s in made)  # the restore's read
    # Run again, the same statements are used: none is prepared twice.
    assert api.post(TURNS, TURN).status_code == 201
    assert api.get(HISTORY).status_code == 200
    assert prepared() == sorted(before + made)


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
    # Django's own pool keeps connections too.
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {"pool": True})
    assert rows.preparing()


@needs_postgresql
def test_a_rolled_back_savepoint_forgets_the_statements_and_they_are_prepared_again(api):
    assert api.get("/api/v1/agent").status_code == 200
    assert any("FROM core_apikey k" in s for s in prepared())
    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.create(name="twice")
        Agent.objects.create(name="twice")  # the agent's name is unique
    # psycopg deallocated its statements with the rollback: the next request prepares
    # the lookup anew instead of running a statement the server no longer has.
    assert not any("FROM core_apikey k" in s for s in prepared())
    assert api.get("/api/v1/agent").status_code == 200
    assert any("FROM core_apikey k" in s for s in prepared())


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
