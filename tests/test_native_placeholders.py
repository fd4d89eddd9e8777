"""Issue 13: the fixed statements reach psycopg with PostgreSQL's own placeholders.

psycopg converts a statement's `%(name)s` / `%s` placeholders to `$1, $2, …` on every
run and keeps its work only for statements up to 4,096 characters; the append with the
key's lookup is longer, and converting it cost 0.12 ms of an append after an agent's
pause. core/rows.py converts each statement once (native_placeholders) and runs
it on a psycopg RawCursor. These tests hold the conversion equal to psycopg's own for
every fixed statement a request runs, and check that none of them is converted by
psycopg any more (the PostgreSQL ones say so when skipped).
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import ProgrammingError, connection
from psycopg import _queries

from memoryapp.core import conversation, rows

pytestmark = pytest.mark.django_db

needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="the statements run on psycopg's cursors: run with DATABASE_URL=postgres://…",
)

TURNS = "/api/v1/sessions/native/turns"
HISTORY = "/api/v1/sessions/native/history"
TURN = {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}


def psycopgs(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """psycopg's own conversion of `sql` (its statement and the names in order)."""
    query, _formats, order, _parts = _queries._query2pg_nocache(sql.encode(), "utf-8")
    return query.decode(), (tuple(order) if order else None)


@pytest.mark.parametrize(
    "sql, native, names, count",
    [
        ("SELECT %(a)s, %(b)s, %(a)s", "SELECT $1, $2, $1", ("a", "b"), 2),
        ("SELECT %s, %s FROM t WHERE x = %s", "SELECT $1, $2 FROM t WHERE x = $3", None, 3),
        ("SELECT 5 %% 2, %(n)s", "SELECT 5 % 2, $1", ("n",), 1),
        ("SELECT 1", "SELECT 1", None, 0),
        ("SELECT '100%%'", "SELECT '100%'", None, 0),
        # A % with nothing after it on its line is not a placeholder (psycopg's reading).
        ("SELECT 7 %", "SELECT 7 %", None, 0),
        ("SELECT 7 %\n 2, %s", "SELECT 7 %\n 2, $1", None, 1),
        ("SELECT %(a\nb)s", "SELECT $1", ("a\nb",), 1),
    ],
)
def test_placeholders_are_written_as_postgresqls_own(sql, native, names, count):
    assert rows.native_placeholders(sql) == (native, names, count)
    assert psycopgs(sql) == (native, names)


@pytest.mark.parametrize(
    "sql",
    ["SELECT %(a)s, %s", "SELECT %s, %(a)s", "SELECT %d", "SELECT %(a", "SELECT %()s"]
    + ["SELECT % 2"],
)
def test_placeholders_psycopg_refuses_are_refused(sql):
    with pytest.raises(psycopg.ProgrammingError):
        rows.native_placeholders.__wrapped__(sql)
    with pytest.raises(psycopg.ProgrammingError):
        psycopgs(sql)


@pytest.mark.parametrize("sql", ["SELECT %b", "SELECT %t", "SELECT %(a)b"])
def test_placeholders_no_fixed_statement_uses_are_refused(sql):
    """psycopg's binary and text formats (the raw cursor sends every parameter in the
    format psycopg picks)."""
    with pytest.raises(psycopg.ProgrammingError):
        rows.native_placeholders.__wrapped__(sql)


def test_the_appends_statements_convert_as_psycopg_converts_them():
    """The two longest statements (the append, and the append with the key's lookup,
    which psycopg would convert anew on every run) come out as psycopg writes them."""
    with_key = conversation._append_with_key_pg()[0]
    assert len(with_key) > _queries.MAX_CACHED_STATEMENT_LENGTH  # why this matters
    for sql in (conversation._APPEND_PG, with_key):
        native, names, count = rows.native_placeholders(sql)
        assert (native, names) == psycopgs(sql)
        assert count == len(names) > 20


@needs_postgresql
def test_no_fixed_statement_is_converted_by_psycopg(api, monkeypatch):
    """A session's round (create, appends, restores whole and pruned, context) and the
    agent: each fixed statement is converted once by native_placeholders (the same text
    psycopg would write), none by psycopg's converter on its run."""
    converted: list[str] = []
    seen: list[str] = []
    convert = _queries.PostgresQuery.convert
    native = rows.native_placeholders

    def counting_convert(self, query, vars):
        if type(self) is _queries.PostgresQuery:  # (Django's own use ClientCursor's)
            converted.append(str(query))
        return convert(self, query, vars)

    def noting_native(sql):
        seen.append(sql)
        return native(sql)

    monkeypatch.setattr(_queries.PostgresQuery, "convert", counting_convert)
    monkeypatch.setattr(rows, "native_placeholders", noting_native)
    assert api.put("/api/v1/sessions/native", {}).status_code == 201
    for _ in range(3):
        assert api.post(TURNS, TURN).status_code == 201
    assert len(api.get(HISTORY).json()["messages"]) == 6
    assert len(api.get(HISTORY + "?max_messages=1").json()["messages"]) == 1
    assert api.get("/api/v1/sessions/native/context").status_code == 200
    assert api.get("/api/v1/agent").status_code == 200
    assert converted == []
    assert any(s.lstrip().startswith("WITH ka AS") for s in seen)  # the append with the key
    assert any("FROM core_apikey k" in s for s in seen)  # the key's lookup
    for sql in set(seen):
        assert native(sql)[:2] == psycopgs(sql)


@needs_postgresql
def test_parameters_that_do_not_fit_a_statement_are_refused_clearly(db):
    with rows.binding_cursor() as cursor:
        cursor.execute("SELECT %(a)s::int + %(b)s::int", {"a": 1, "b": 2})
        assert cursor.fetchone() == (3,)
        cursor.execute("SELECT %s::text || %s::text", ["x", "y"])
        assert cursor.fetchone() == ("xy",)
        cursor.execute("SELECT 7 % 4")  # no parameters: sent as it is, as psycopg sends it
        assert cursor.fetchone() == (3,)
    for sql, params in [
        ("SELECT %(a)s::int + %(b)s::int", {"a": 1}),  # a name missing
        ("SELECT %s::int + %s::int", [1]),  # too few
        ("SELECT %s::int", [1, 2]),  # too many
        ("SELECT %(a)s::int", [1]),  # a sequence for names
        ("SELECT %s::text", {"a": "x"}),  # a mapping for %s
        ("SELECT %s::text", "x"),  # a string is not a sequence of parameters
        ("SELECT %s::text", 5),
    ]:
        with pytest.raises(ProgrammingError), rows.binding_cursor() as cursor:
            cursor.execute(sql, params)
    # The connection is still usable after each refusal.
    with rows.binding_cursor() as cursor:
        cursor.execute("SELECT %(a)s::int", {"a": 5})
        assert cursor.fetchone() == (5,)


@needs_postgresql
def test_executemany_takes_djangos_placeholders_too(db):
    """Django's wrapper calls executemany with its placeholders, as execute."""
    with rows.binding_cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE native_many (a int, b text)")
        cursor.executemany("INSERT INTO native_many VALUES (%s, %s)", [(1, "x"), (2, "y%")])
        cursor.executemany(
            "INSERT INTO native_many VALUES (%(a)s, %(b)s || '%%')", [{"a": 3, "b": "z"}]
        )
        cursor.execute("SELECT a, b FROM native_many ORDER BY a")
        assert cursor.fetchall() == [(1, "x"), (2, "y%"), (3, "z%")]
        with pytest.raises(ProgrammingError):
            cursor.executemany("INSERT INTO native_many VALUES (%s, %s)", [(4,)])
        cursor.execute("SELECT count(*) FROM native_many")
        assert cursor.fetchone() == (3,)
        cursor.execute("DROP TABLE native_many")
