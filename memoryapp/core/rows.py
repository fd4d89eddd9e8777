"""Model instances from hand-written SQL, for the few reads every request makes.

The ORM compiles a queryset anew each time it runs (about 0.6 ms for the session a path
names, on PostgreSQL here, against 0.3 ms for the round trip itself). For the reads on
every request's path (the API key with its agent and the session a path names, the
restore's messages, the sections of an assembled context) a fixed statement is written
once and its rows are turned into what the ORM would give: each column through the
converters the ORM applies (SQLite keeps times as text, JSON arrives as text), then
`Model.from_db` for an instance or a dict for `.values()`. Each caller's test compares
its read with the queryset it replaces. (The API's restore on PostgreSQL reads each
message as its answer writes it instead: api/answers.py HISTORY_MESSAGE_SQL, tested
against that answer.)
"""

from __future__ import annotations

import datetime
import functools
import inspect
import re
import select
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from django.conf import settings
from django.core.signals import request_finished
from django.db import DatabaseError, DataError, IntegrityError, connection, models
from django.db.models import signals
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.utils.asyncio import async_unsafe
from psycopg.pq import Format, TransactionStatus
from psycopg.types.numeric import Int8Dumper

_TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid
# psycopg's own loader of a timestamptz (its C one with psycopg[binary]). Django's
# connections load times through a Python loader that wraps it and then sets the tzinfo
# (for a connection whose zone is not Django's); where both zones are UTC that is the
# same value, at ten times the cost: 2,000 messages' created_at took 2.4 ms to load
# against 0.2 for a timestamp without a zone.
_TIMESTAMPTZ_LOADER = psycopg.adapters.get_loader(_TIMESTAMPTZ, Format.TEXT)

# Per database connection (converters are bound to it): Columns -> converters per column.
_CONVERTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# The attributes through which Model.__init__ setting a field's value on a new instance
# comes to setting it in the instance's __dict__ (Columns._from_db).
_PLAIN_ATTRIBUTES = (DeferredAttribute, ForeignKeyDeferredAttribute)


class Columns:
    """A model's concrete columns (or the named ones), selected under a table alias, in
    the model's order of fields: `Model.from_db` matches a subset's values that way."""

    def __init__(
        self, model: type[models.Model], alias: str, names: tuple[str, ...] | None = None
    ) -> None:
        self.model = model
        concrete = list(model._meta.concrete_fields)
        named = concrete if names is None else [model._meta.get_field(n) for n in names]
        self.fields = sorted(named, key=concrete.index)
        self.attnames = [f.attname for f in self.fields]
        quote = connection.ops.quote_name
        self.sql = ", ".join(f"{alias}.{quote(f.column)}" for f in self.fields)
        self._plain_attributes = (
            model.__init__ is models.Model.__init__
            and model.from_db.__func__ is models.Model.from_db.__func__
            and all(
                type(inspect.getattr_static(model, name, None)) in _PLAIN_ATTRIBUTES
                for name in self.attnames
            )
        )

    def __len__(self) -> int:
        return len(self.fields)

    def instance(self, row: tuple | list, start: int = 0) -> Any:
        """The model instance of `row[start : start + len(self)]` (with only some of its
        columns, the others deferred, as `.only()` leaves them)."""
        return self.instances([row], start)[0]

    def instances(self, rows: list[tuple], start: int = 0) -> list[Any]:
        """`instance(row, start)` of each row (the converters looked up once), each what
        `Model.from_db` gives (_from_db)."""
        converters, alias, build = self._converters(), connection.alias, self._from_db()
        return [build(alias, self._converted(r, start, converters)) for r in rows]

    def _from_db(self) -> Callable[[str, list], Any]:
        """How an instance of the columns' values is made: what `Model.from_db` makes.

        `from_db` calls the model's `__init__` with a value or DEFERRED for each of its
        fields, which sets each value through its attribute and sends pre_init and
        post_init; for a subset it first looks each field up in the list of names. 30
        findings with their turn, message and tool call (an assembled context's) took
        0.5 ms that way. Where that comes to setting the values in the instance's
        `__dict__` (every column's attribute is Django's DeferredAttribute, which has no
        setter, or ForeignKeyDeferredAttribute, whose setter only sets it on an instance
        with no cached related object; the model keeps Django's own __init__ and from_db;
        nothing listens to pre_init or post_init for the model) the instance is made so,
        a quarter of the cost; otherwise by `from_db`. tests/test_rows.py holds both equal
        for every model."""
        model, names = self.model, self.attnames
        if not self._plain_attributes or (
            signals.pre_init.has_listeners(model) or signals.post_init.has_listeners(model)
        ):
            return lambda alias, values: model.from_db(alias, names, values)
        new = model.__new__

        def build(alias: str, values: list) -> Any:
            instance = new(model)
            state = instance._state = ModelState()
            state.adding, state.db = False, alias
            instance.__dict__.update(zip(names, values, strict=True))
            return instance

        return build

    def dicts(self, rows: list[tuple]) -> list[dict[str, Any]]:
        """Each row as `.values(*names)` gives it: {attname: value}."""
        converters, names = self._converters(), self.attnames
        return [dict(zip(names, self._converted(r, 0, converters), strict=True)) for r in rows]

    def _converters(self) -> list:
        """(index, expression, converters) of each column that has converters (on
        PostgreSQL a message's JSON columns only, of its eleven)."""
        per_connection = _CONVERTERS.setdefault(_wrapper(), {})
        converters = per_connection.get(self)
        if converters is None:
            converters = per_connection[self] = [
                (i, expression, convert)
                for i, (expression, convert) in enumerate(_converters(f) for f in self.fields)
                if convert
            ]
        return converters

    def _converted(self, row: tuple | list, start: int, converters: list) -> list:
        # A NULL stays None through every converter of these models' fields (tested for
        # each): skipping them saves two calls per message for its JSON columns, mostly
        # NULL, in a restore.
        values = list(row[start : start + len(self.fields)])
        for i, expression, convert in converters:
            value = values[i]
            if value is not None:
                for function in convert:
                    value = function(value, expression, connection)
                values[i] = value
        return values


@functools.cache
def columns(model: type[models.Model], alias: str, names: tuple[str, ...] | None = None) -> Columns:
    """The Columns of `model` under `alias`, built once (a process has one database)."""
    return Columns(model, alias, names)


def _wrapper():
    """The thread's database connection object itself (`connection` is a proxy to it)."""
    from django.db import connections

    return connections[connection.alias]


def _converters(field: models.Field) -> tuple[Any, list]:
    expression = field.get_col(field.model._meta.db_table)
    return expression, [
        *connection.ops.get_db_converters(expression),
        *field.get_db_converters(connection),
    ]


# The prepare threshold a connection has while one of the statements below runs: psycopg
# then prepares it (it is asked to) and would prepare any other only after this many
# runs, in effect never. Outside those runs the connection keeps Django's threshold,
# None: Django's own queries (their parameters written into the text: nothing to reuse)
# are neither prepared nor recorded (psycopg would keep the text of the last hundred,
# each up to a request's size, to count their runs).
_ONLY_WHEN_ASKED = 2**31 - 1


def preparing() -> bool:
    """Whether fixed statements are prepared: on PostgreSQL whose connections outlive a
    request (CONN_MAX_AGE), unless MEMORYAPP_PREPARE_STATEMENTS is off. A pooler in
    transaction mode (README: conn_max_age=0) gets none, nor Django's own pool (which
    needs conn_max_age=0 too, and would hand a connection with stale statements back
    out instead of closing it; see _Bound.execute)."""
    if connection.vendor != "postgresql" or not settings.MEMORYAPP_PREPARE_STATEMENTS:
        return False
    return connection.settings_dict["CONN_MAX_AGE"] != 0


# Django's placeholders: %(name)s, %s, and %% for a percent sign. Read as psycopg reads
# them: a % and the character after it (a % at the very end or before a line break is
# left as it is), a name of at least one character.
_PLACEHOLDER = re.compile(r"%(?:\((?P<name>[^)]+)\))?(?P<format>.)")


@functools.lru_cache(maxsize=256)
def native_placeholders(sql: str) -> tuple[str, tuple[str, ...] | None, int]:
    """`sql` with PostgreSQL's own placeholders ($1, $2, …) for Django's (`%(name)s`, or
    `%s` in order; `%%` a percent sign), as psycopg's converter writes it (a name used
    twice is one parameter): (the statement, the names in the order of their numbers or
    None for `%s`, how many parameters).

    Written once per statement: psycopg converts a statement's placeholders on every
    run and keeps its work only for statements up to 4,096 characters. The append with
    the key's lookup is longer (4,705), and converting it (a regular expression over the
    whole text, then a part per placeholder) cost 0.07 ms a run back to back, 0.12 ms of
    a 2.4 ms append in process after an agent's pause."""
    names: dict[str, int] = {}
    positional = 0

    def number(found: re.Match) -> str:
        nonlocal positional
        name, format = found["name"], found["format"]
        if name is None and format == "%":
            return "%"
        if format != "s":
            raise psycopg.ProgrammingError(f"unsupported placeholder in a statement: {found[0]!r}")
        if name is None:
            if names:
                raise psycopg.ProgrammingError("a statement mixes %s and %(name)s placeholders")
            positional += 1
            return f"${positional}"
        if positional:
            raise psycopg.ProgrammingError("a statement mixes %s and %(name)s placeholders")
        return f"${names.setdefault(name, len(names) + 1)}"

    native = _PLACEHOLDER.sub(number, sql)
    return native, (tuple(names) if names else None), len(names) or positional


class _Bound:
    """A psycopg RawCursor (which sends a statement's text as it is) given statements in
    Django's placeholders: Django's wrapper calls `execute(sql, params)`, a mapping for
    `%(name)s`, a sequence for `%s` (native_placeholders). With `prepare`, the statement
    is prepared on the server (once per connection: later runs skip parsing and, once
    PostgreSQL keeps a generic plan, planning). The rest is the cursor's."""

    def __init__(self, cursor: Any, prepare: bool) -> None:
        self._cursor = cursor
        self._prepare = prepare

    @staticmethod
    def _in_order(params: Any, names: tuple[str, ...] | None, count: int) -> list:
        """The parameters as a list in the order of $1, $2, …: a mapping for names, a
        sequence (not a string) for %s."""
        if names:
            if not isinstance(params, Mapping):
                raise psycopg.ProgrammingError("a statement with %(name)s needs a mapping")
            try:
                return [params[name] for name in names]
            except KeyError as exc:
                raise psycopg.ProgrammingError(f"no parameter for %({exc.args[0]})s") from exc
        if isinstance(params, (Mapping, str, bytes)) or not isinstance(params, Sequence):
            raise psycopg.ProgrammingError("a statement with %s needs a sequence of parameters")
        if len(params) != count:
            raise psycopg.ProgrammingError(
                f"the statement has {count} placeholders but {len(params)} parameters"
            )
        return list(params)

    def executemany(self, sql: str, params_seq: Any) -> Any:
        sql, names, count = native_placeholders(sql)
        rows = [self._in_order(params, names, count) for params in params_seq]
        return self._cursor.executemany(sql, rows)

    def execute(self, sql: str, params: Any = None) -> Any:
        if params is not None:
            sql, names, count = native_placeholders(sql)
            params = self._in_order(params, names, count)
        if not self._prepare:
            return self._cursor.execute(sql, params)
        raw_connection = self._cursor.connection
        threshold = raw_connection.prepare_threshold
        raw_connection.prepare_threshold = _ONLY_WHEN_ASKED
        try:
            return self._cursor.execute(sql, params, prepare=True)
        except (psycopg.errors.FeatureNotSupported, psycopg.errors.InvalidSqlStatementName):
            # "cached plan must not change result type" (a migration changed the type of a
            # column a prepared statement reads) or "prepared statement … does not exist"
            # (the server lost them: a pooler in transaction mode, a DISCARD ALL): the
            # connection's statements are stale. It is closed at the end of the request
            # (or task) instead of failing until its age runs out; the next connection
            # prepares them anew.
            connection.close_at = 0
            raise
        finally:
            raw_connection.prepare_threshold = threshold

    def __iter__(self):
        return iter(self._cursor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def binding_cursor():
    """A cursor on PostgreSQL that sends the parameters apart from the statement (the
    server binds them), in Django's wrapper (errors, query log, transactions, the
    connection's health check as `connection.cursor()` has them), its statements prepared
    when `preparing()`.

    Django's default cursor writes every parameter into the text of the statement, in
    Python (for a turn's contents, 8% of an append's server time in a profile), and the
    server parses and plans each statement anew: the key's lookup took 0.23 ms a run
    here, prepared 0.06; the one-statement append 0.89 ms, prepared 0.58. The statement's
    parameters must each have a type PostgreSQL can tell from where they stand (a column
    they are compared with or written to, or a cast). Integers are sent as bigint
    whatever their size (psycopg picks int2, int4 or int8 by the value, and a statement
    is prepared once per set of parameter types: one statement would become several).
    Times are loaded by psycopg's own loader where it gives what Django's would
    (_TIMESTAMPTZ_LOADER)."""
    return _binding_cursor(preparing())


@async_unsafe
def _binding_cursor(prepared: bool):
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw_connection = connection.connection
        cursor: Any = psycopg.RawCursor(raw_connection)
        if connection.timezone is datetime.UTC and raw_connection.info.timezone is datetime.UTC:
            # What Django's loader would give: an aware time in UTC (see _TIMESTAMPTZ_LOADER).
            cursor.adapters.register_loader(_TIMESTAMPTZ, _TIMESTAMPTZ_LOADER)
        if prepared:
            cursor.adapters.register_dumper(int, Int8Dumper)
        cursor = _Bound(cursor, prepared)
    connection.validate_thread_sharing()
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)
    return connection.make_cursor(cursor)


def fixed_cursor():
    """The cursor for a fixed statement on a request's path: binding_cursor() when
    statements are prepared, else Django's cursor (unprepared, a small statement with its
    parameters written in is parsed faster: the key's lookup 0.23 ms against 0.29)."""
    return _binding_cursor(True) if preparing() else connection.cursor()


def first_read(sql: str, params: list) -> list[tuple]:
    """The rows of `sql`, a read (never a write: it may run twice) that is the first
    statement of a request (the API key's lookup), without Django's health check of a
    kept connection before it.

    That check (CONN_HEALTH_CHECKS) is a `SELECT 1` round trip before a request's first
    statement: 0.2 ms here, 0.65 after an agent's pause. The read itself tells as much: a
    kept connection that died while idle (a restart, a failover) fails it at once; only
    then is the check made, and an unusable connection replaced and the read run again
    on a new one, as the check would have replaced it. Inside a transaction (a
    caller's), or with the check already done or off, Django's own way."""

    def read() -> list[tuple]:
        with fixed_cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    optimistic = (
        connection.connection is not None
        and connection.health_check_enabled
        and not connection.health_check_done
        and not connection.in_atomic_block
    )
    if not optimistic:
        return read()
    connection.health_check_done = True
    try:
        return read()
    except DatabaseError as exc:
        # As Django's check would have found: an error of the statement's own (a
        # timeout, a lock) leaves a usable connection and is answered as before; an
        # unusable one (closed, killed, left in a failed transaction) is replaced.
        if isinstance(exc, DataError | IntegrityError) or connection.is_usable():
            raise
        connection.close()  # the next cursor connects anew
    return read()


# A kept connection used within this many seconds is trusted without Django's check before
# a write (skip_health_check_if_idle): a connection dropped silently on the way (a NAT's or
# a load balancer's idle timeout, minutes long: 350 s on AWS) is dropped after longer pauses.
TRUSTED_IDLE_SECONDS = 60.0


def skip_health_check_if_idle() -> None:
    """Before a request's first statement when it is a write (which, unlike first_read's
    read, must never run twice): Django's health check of a kept connection (a `SELECT 1`
    round trip) is skipped when the connection shows locally that it is fine: used by a
    request that ended less than TRUSTED_IDLE_SECONDS ago, open, in no transaction, and
    with nothing to read on its socket. A server that ends a connection (a restart, a
    failover, an idle timeout, a terminated backend) closes its socket, which then reads
    as ready (the end, or the server's last message): the check runs then, as before, and
    replaces the connection; so it does after a longer pause, when something on the way
    may have dropped the connection without a word. PostgreSQL only."""
    if not (
        connection.vendor == "postgresql"
        and connection.connection is not None
        and connection.health_check_enabled
        and not connection.health_check_done
        and not connection.in_atomic_block
    ):
        return
    ended = getattr(_wrapper(), "memoryapp_request_ended", None)
    if ended is None or time.monotonic() - ended > TRUSTED_IDLE_SECONDS:
        return
    raw = connection.connection
    if raw.closed or raw.info.transaction_status != TransactionStatus.IDLE:
        return
    try:
        poller = select.poll()
        poller.register(raw.pgconn.socket, select.POLLIN)
        if poller.poll(0):
            return  # something to read: the server's end, or a message; Django checks
    except (OSError, ValueError):
        return
    connection.health_check_done = True


def _note_request_ended(**kwargs: Any) -> None:
    """When a request ended, on its thread's connection (skip_health_check_if_idle)."""
    _wrapper().memoryapp_request_ended = time.monotonic()


request_finished.connect(_note_request_ended, dispatch_uid="memoryapp.rows.request_ended")


def fetch(model: type[models.Model], alias: str, rest: str, params: list) -> list[Any]:
    """Instances of `model` (all concrete columns) from `SELECT … FROM its table alias
    <rest>`: `rest` holds the joins, conditions, order and limit, with %s placeholders."""
    cols = columns(model, alias)
    with fixed_cursor() as cursor:
        cursor.execute(f"SELECT {cols.sql} FROM {model._meta.db_table} {alias} {rest}", params)
        return cols.instances(cursor.fetchall())


def fetch_one_with(
    model: type[models.Model],
    alias: str,
    link: str,
    where: str,
    params: list,
    *,
    lock=False,
    extra: str | None = None,
) -> Any:
    """`model.objects.select_related(link).filter(…).first()` by a fixed statement, `link`
    a foreign key that is never null (an inner join, as the ORM makes it, its table
    aliased `r`); with `lock`, as `.select_for_update(of=SELF)`: the row of `model` is
    locked for the caller's transaction, not the linked one (the ORM too writes nothing
    on SQLite). With `extra`, an SQL expression read in the same row: answers (the
    instance or None, the expression's value or None) instead."""
    field = model._meta.get_field(link)
    target = field.related_model
    cols, linked = columns(model, alias), columns(target, "r")
    quote = connection.ops.quote_name
    sql = (
        f"SELECT {cols.sql}, {linked.sql}{f', {extra}' if extra else ''} "
        f"FROM {model._meta.db_table} {alias} "
        f"JOIN {target._meta.db_table} r ON r.{quote(target._meta.pk.column)} = "
        f"{alias}.{quote(field.column)} {where}"
    )
    if lock and connection.features.has_select_for_update_of:
        sql += f" FOR UPDATE OF {alias}"
    with fixed_cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return (None, None) if extra else None
    instance = cols.instance(row)
    setattr(instance, link, linked.instance(row, len(cols)))
    return (instance, row[-1]) if extra else instance
