"""The schema bases and rules both APIs' shapes are built from: what a client sends
(`InputSchema`: an unknown field is a 422 naming it) and what an API answers (`Output`),
whole numbers as JSON writes them, every error's shape, and the one rule for names
(session keys, item names). Each API defines its own shapes on these, once
(memoryapp/api/schemas.py, memoryapp/ams/schemas.py)."""

from __future__ import annotations

import functools
import operator
import types
import typing
import unicodedata
from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Path, Schema
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, create_model

from memoryapp.core.shapes import TIME


class InputSchema(Schema):
    """What an agent sends: a field the API does not know (a typo, most often) is a 422
    naming it, never silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Output(Schema):
    """What the API answers. A view's dict with a field its schema does not declare is an
    error (a 500 the tests see), never a field silently dropped from the answer."""

    model_config = ConfigDict(extra="forbid")


# The output schema made from each of the core's shapes (memoryapp/core/shapes.py).
_OUTPUTS: dict[type, type[Output]] = {}


def output_of(shape: type, name: str, **added: Any) -> type[Output]:
    """The API's output schema of one of the core's shapes, named `name`: the shape's
    fields in its order and its docstring as the description; a time (shapes.Time) a
    `date-time`; a key the core may leave out (NotRequired) null when it is left out; a
    shape inside it the schema made from that shape (make that one first). `added`: the
    fields the API adds to what the core answers, as pydantic's create_model takes them
    (`summary=(SummaryOut | None, None)`)."""
    fields: dict[str, Any] = {}
    for field, hint in typing.get_type_hints(shape, include_extras=True).items():
        annotation = _in_api(hint)
        # Either says it (__required_keys__ misses a NotRequired under postponed annotations)
        left_out = typing.get_origin(hint) is typing.NotRequired
        if field in shape.__required_keys__ and not left_out:
            fields[field] = (annotation, ...)
        else:
            fields[field] = (annotation | None, None)
    model = create_model(name, __base__=Output, __doc__=shape.__doc__, **fields, **added)
    _OUTPUTS[shape] = model
    return model


def _in_api(hint: Any) -> Any:
    """A shape's annotation as the API's schema declares it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.NotRequired:
        return _in_api(args[0])
    if origin is Annotated:
        base, *metadata = args
        if TIME in metadata:
            others = [m for m in metadata if m is not TIME]
            return Annotated[(datetime, *others)] if others else datetime
        return Annotated[(_in_api(base), *metadata)]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, map(_in_api, args))
    if origin is list:
        return list[_in_api(args[0])]
    if typing.is_typeddict(hint):
        if hint not in _OUTPUTS:
            raise LookupError(f"make the output schema of {hint.__name__} first")
        return _OUTPUTS[hint]
    return hint


def _whole_number(value: Any) -> Any:
    """JSON has one number type, and JSON Schema counts 3.0 as the integer 3; 3.5, "3"
    and true stay refused (the integer check that follows is strict)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


# After the Field (`Annotated[int, Field(strict=True, ge=…), WHOLE]`), or the published
# schema loses its minimum and maximum.
WHOLE = BeforeValidator(_whole_number)


# The memory types of a record, as the Redis Agent Memory Server API's client names them:
# its shapes (memoryapp/ams/schemas.py) and the AMS section of an export document that
# the agent API imports (memoryapp/api/export.py).
AmsType = Literal["episodic", "semantic", "message"]


class ErrorOut(Output):
    """Every error: `detail` is a sentence, or for a 422 from validation the list of
    problems, each with `loc` (where: `["body", "payload", field, …]` or
    `["query", name]`) and `msg`. A 500 adds `error_id`, the id in the server's log."""

    detail: str | list[dict[str, Any]]
    error_id: str | None = None


# The characters no name holds: control, format, surrogate, line and paragraph separator.
NAME_FORBIDDEN_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")
MAX_NAME_CHARS = 200


def check_name(value: str, what: str) -> str:
    """The one rule for session keys and item names: 1 to 200 characters, not `.` or
    `..` (a link to them would read as a path segment), no `/` (no URL path reaches a
    name holding one: the path converters stop at it, and the dashboard's links to the
    session fail), and none of the characters that hide or reorder text: control (C0,
    DEL, C1 such as U+0085), format (U+200B–U+200F, U+2028/U+2029 line and paragraph
    separators, bidirectional overrides, a BOM), or surrogates. `name_pattern()` is the
    same rule for the OpenAPI document."""
    if not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{what} has 1 to {MAX_NAME_CHARS} characters")
    if value in (".", ".."):
        raise ValueError(f"{what} cannot be '.' or '..'")
    if "/" in value:
        raise ValueError(f"{what} must not contain '/' (no URL could name it)")
    for ch in value:
        if unicodedata.category(ch) in NAME_FORBIDDEN_CATEGORIES:
            raise ValueError(
                f"{what} must not contain control, format or line-separator characters "
                f"(found U+{ord(ch):04X})"
            )
    return value


@functools.cache
def name_pattern() -> str:
    """check_name's rule but its length (the schemas' minLength and maxLength) as a
    regular expression, for the schemas clients read: a character class of every code
    point it refuses (from the same Unicode tables) but surrogates, and `.`/`..` refused
    by a lookahead. Valid in Python's `re` and in ECMA-262 with the `u` flag (astral
    characters are written as themselves). Built when the OpenAPI document is (a pass
    over every code point), then kept."""
    ranges: list[tuple[int, int]] = []
    for point in range(0x110000):
        category = unicodedata.category(chr(point))
        # Surrogates are no characters (no UTF-8 text holds one, and regular expressions
        # over Unicode characters cannot name them): refused, but not in the pattern.
        if point == ord("/") or (category in NAME_FORBIDDEN_CATEGORIES and category != "Cs"):
            if ranges and ranges[-1][1] == point - 1:
                ranges[-1] = (ranges[-1][0], point)
            else:
                ranges.append((point, point))

    def written(point: int) -> str:
        return f"\\u{point:04x}" if point <= 0xFFFF else chr(point)

    refused = "".join(
        written(low) if low == high else f"{written(low)}-{written(high)}" for low, high in ranges
    )
    return f"^(?!\\.\\.?$)[^{refused}]+$"


class _NamePattern:
    """Annotated metadata: the published schema of a name states name_pattern()."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        schema.update(pattern=name_pattern(), minLength=1, maxLength=MAX_NAME_CHARS)
        return schema


NAME_SCHEMA = _NamePattern()


def check_session_key(key: str) -> str:
    return check_name(key, "a session key")


# Names in a path, as the schema states them (each view checks them with check_name).
SessionKeyInPath = Annotated[
    str,
    NAME_SCHEMA,
    Path(
        description="the session's key: 1 to 200 characters, not `.` or `..`, no `/`, no "
        "control, format or line-separator characters (the pattern)"
    ),
]
ItemNameInPath = Annotated[
    str,
    NAME_SCHEMA,
    Path(description="the item's name: the rule of a session key (the pattern)"),
]


# A session key in a body: the same rule as in a path, the 422 naming the field.
SessionKey = Annotated[
    str,
    NAME_SCHEMA,
    Field(description="a session key: the rule of the `key` path parameter (the pattern)"),
    AfterValidator(check_session_key),
]
