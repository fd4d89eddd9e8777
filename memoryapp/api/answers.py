"""Answers of the hot operations written straight to JSON, without django-ninja's
validation of the view's dict against the response schema.

That validation (pydantic over a getter per field) was two thirds of restoring 2,000
messages. These operations build their dicts from the core's fixed shapes (core/shapes.py)
instead, and `answer` writes what ninja would have written for the same dict and schema:
every field the schema declares, in its order (a missing optional one as null), times as
ninja's encoder writes them (UTC as `Z`, milliseconds), a key the schema does not declare
refused as the schemas' `extra="forbid"` refuses it. tests/test_fast_paths.py checks the
bytes' meaning against ninja's own answer for each operation that uses it.
"""

from __future__ import annotations

import functools
import json
import re
import types
import typing
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse
from pydantic import BaseModel

_encoder = DjangoJSONEncoder()


# What datetime.isoformat() writes for an aware time (the core's shapes hold such text).
_ISOFORMAT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?[+-]\d\d:\d\d")


def json_time(value: datetime | str) -> str:
    """A time as ninja's encoder writes it: ISO 8601, milliseconds, UTC as `Z`."""
    if isinstance(value, str):
        if not _ISOFORMAT.fullmatch(value):
            value = datetime.fromisoformat(value)
        else:  # the encoder's own steps, on the text it would have made
            if value[19] == ".":
                value = value[:23] + value[26:]
            return value[:-6] + "Z" if value.endswith("+00:00") else value
    if type(value) is not datetime:
        return _encoder.default(value)
    # The messages of one turn share their time, and a restore writes them in order: the
    # last time written is written again without formatting it again. Equal in the same
    # zone and fold is the same text (with one tzinfo, == ignores fold, and a repeated
    # wall time's two offsets compare equal); one tuple, so threads never see half of it.
    global _last_time
    last, last_text = _last_time  # read once: another thread may replace it
    if last == value and last.tzinfo is value.tzinfo and last.fold == value.fold:
        return last_text
    # The encoder's steps for an aware or naive datetime, without its dispatch on type
    # (every restored message has a time: a 2,000-message restore 30 -> 20 ms in process).
    text = value.isoformat(timespec="milliseconds" if value.microsecond else "seconds")
    text = text[:-6] + "Z" if text.endswith("+00:00") else text
    _last_time = (value, text)
    return text


_last_time: tuple[datetime, str] = (datetime.min, datetime.min.isoformat())


Shaper = Callable[[Any], Any]


class Written(list):
    """Items already written as `schema`'s shaper writes them (every declared field, in
    order, absent ones as null, times as json_time writes them): `answer` passes such a
    list through instead of shaping each item again, where the answer's schema declares
    a list of that `schema` (see history_message); elsewhere it is shaped as any list."""

    def __init__(self, schema: type[BaseModel], items: Any = ()) -> None:
        super().__init__(items)
        self.schema = schema


def _plain(value: Any) -> Any:
    return value


def _optional(shape: Shaper) -> Shaper:
    return lambda value: None if value is None else shape(value)


def _shaper(annotation: Any) -> Shaper:
    """How a value of this annotation is written."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(arms) == 1:
            return _optional(_shaper(arms[0]))
        return _plain
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        inner = _shaper(item)
        if inner is _plain:
            return _plain
        return lambda values: (
            values
            if type(values) is Written and values.schema is item
            else [inner(v) for v in values]
        )
    if origin is typing.Annotated:
        return _shaper(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_shaper(annotation)
    if annotation is datetime:
        return json_time
    return _plain


@functools.cache
def _model_shaper(model: type[BaseModel]) -> Shaper:
    fields = []  # (alias, name, default), in the schema's order
    special = []  # (alias, shaper): the fields whose values are rewritten (times, models)
    for name, field in model.model_fields.items():
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        alias = field.alias or name
        fields.append((alias, name, default))
        field_shape = _shaper(field.annotation)
        if field_shape is not _plain:
            special.append((alias, field_shape))
    declared = frozenset(alias for alias, *_ in fields) | frozenset(n for _, n, _ in fields)

    def shape(data: dict) -> dict:
        if not data.keys() <= declared:
            unknown = sorted(data.keys() - declared)
            raise ValueError(f"{model.__name__} does not declare {unknown}")
        get = data.get
        out = {alias: get(name, default) for alias, name, default in fields}
        for alias, field_shape in special:
            value = out[alias]
            if value is not None:
                out[alias] = field_shape(value)
        return out

    return shape


def history_message(m: dict[str, Any]) -> dict[str, Any]:
    """A message's columns (restore.MESSAGE_FIELDS) as HistoryMessageOut writes
    them: what message_dict then its shaper write, in one step (writing and shaping 100
    messages in process: 0.38 -> 0.23 ms, and 0.65 -> 0.29 in a slower hour);
    tests/test_fast_paths.py checks it against both."""
    removed_at = m["removed_at"]
    return {
        "seq": m["seq"],
        "role": m["role"],
        "content": m["content"],
        "token_count": m["token_count"],
        "created_at": json_time(m["created_at"]),
        "name": m["name"] or None,
        "tool_call_id": m["tool_call_id"] or None,
        "tool_calls": m["tool_calls"] or None,
        "client_id": m["client_id"] or None,
        "removed_at": None if removed_at is None else json_time(removed_at),
        "revisions": m["revisions"] or None,
    }


def answer(schema: type[BaseModel], data: dict, status: int = 200) -> HttpResponse:
    """The view's answer `data`, shaped by `schema`, as a JSON response with `status`."""
    body = _model_shaper(schema)(data)
    try:
        content = orjson.dumps(body)
    except TypeError:  # what orjson refuses (a lone surrogate): the standard library's way
        content = json.dumps(body, cls=DjangoJSONEncoder).encode()
    return HttpResponse(content, status=status, content_type="application/json; charset=utf-8")
