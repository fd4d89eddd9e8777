"""Model instances from hand-written SQL, for the few reads every request makes.

The ORM compiles a queryset anew each time it runs (about 0.6 ms for the session a path
names, on PostgreSQL here, against 0.3 ms for the round trip itself). For the lookups on
every request's path (the API key and its agent, the session) a fixed statement is
written once and its rows are turned into instances as the ORM would: each column through
the converters the ORM applies (SQLite keeps times as text, JSON arrives as text), then
`Model.from_db`, so the instance is the one a queryset would have given.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

from django.db import connection, models

# Per database connection (converters are bound to it): model -> converters per column.
_CONVERTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Columns:
    """A model's concrete columns, selected under a table alias."""

    def __init__(self, model: type[models.Model], alias: str) -> None:
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        self.attnames = [f.attname for f in self.fields]
        quote = connection.ops.quote_name
        self.sql = ", ".join(f"{alias}.{quote(f.column)}" for f in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def instance(self, row: tuple | list, start: int = 0) -> Any:
        """The model instance of `row[start : start + len(self)]`."""
        per_model = _CONVERTERS.setdefault(_wrapper(), {})
        converters = per_model.get(self.model)
        if converters is None:
            converters = per_model[self.model] = [_converters(f) for f in self.fields]
        values = list(row[start : start + len(self.fields)])
        for i, (expression, convert) in enumerate(converters):
            if convert:
                value = values[i]
                for function in convert:
                    value = function(value, expression, connection)
                values[i] = value
        return self.model.from_db(connection.alias, self.attnames, values)


@functools.cache
def columns(model: type[models.Model], alias: str) -> Columns:
    """The Columns of `model` under `alias`, built once (a process has one database)."""
    return Columns(model, alias)


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
