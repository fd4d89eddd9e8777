"""Bad input to every write of the agent API, field by field, generated from one table.

Every write operation in the live OpenAPI schema has a row in WRITES with a request it
accepts against fresh objects (`world`); a new operation without a row, or a body field no
row's body holds, fails. Walking each valid body beside its schema (the tool definitions'
schemas for `/tools/call` arguments) gives each field's bad variants: every JSON type the
field does not take, NUL and a lone surrogate in text (sent as the escape `\\ud800`),
integers beyond their column and below zero, out-of-range floats, NaN, Infinity and
`1e400`, over-long and empty text, unknown and missing fields, and in open objects bad
keys and non-JSON numbers. Every row also gets the whole-body rules (not an object,
malformed, too large, nested too deep) and its path and query parameters the name rule's
forbidden keys. Each variant must be answered by a JSON 4xx with `detail`, name a body
field in an error's `loc`, and leave every row as it was.

Variants run grouped by row, each in a savepoint rolled back after it (building the objects
for each variant alone would take minutes); every failing variant of a row is listed in the
one assertion message, with the request and the answer.

Decisions: the error for a path or query parameter may be plain text (it names the rule;
there is no body field to point at). A key holding `/` is a 404: no route matches. An id
path parameter that is a number but cannot name a row may be a 404 or a 422. Columns are
PostgreSQL `integer` (2^31 - 1) except ids, which are `bigint`: fields holding ids are tried
with 2^63 instead. `5.0` is not tried as a bad integer (JSON Schema counts it as one).
Operations that take no body refuse any body but an empty one with a 422 ("this operation
takes no body"): a DELETE given `{"scope": ...}` must not go ahead ignoring it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.test import Client

from memoryapp.api.api import api as ninja_api
from memoryapp.core.models import ApiKey
from memoryapp.lib import memory_tools
from tests.conftest import ApiClient, turn
from tests.test_export import COMPLETE_DOCUMENT

pytestmark = pytest.mark.django_db
BASE = "/api/v1"
MAX_INT = 2**31 - 1  # PostgreSQL `integer`
MAX_BIGINT = 2**63 - 1  # PostgreSQL `bigint`: ids
SCHEMA = ninja_api.get_openapi_schema()
COMPONENTS = SCHEMA["components"]["schemas"]
TOOL_ARGUMENTS = {t["name"]: t["input_schema"] for t in memory_tools.definitions("anthropic")}


@dataclass(frozen=True)
class Ref:
    """An id that exists only once `world` has made its objects."""

    name: str


@dataclass(frozen=True)
class Token:
    """A JSON number written as is: `1e400` is valid JSON that Python reads as infinity."""

    text: str


@dataclass(frozen=True)
class Write:
    """One write operation and a request it accepts against `world`'s objects."""

    method: str
    path: str  # the OpenAPI path, without BASE
    body: Any = None  # None: the operation takes no body
    status: int = 200
    params: dict[str, Any] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    label: str = ""
    # Schemas for objects the OpenAPI document leaves open, by body path.
    open_schemas: dict[tuple, dict] = field(default_factory=dict)
    # Body paths holding a session key: the name rule applies to them too.
    key_fields: tuple[tuple, ...] = ()
    # Body paths (a list's items as `[]`) holding ids: bounded by `bigint`, not `integer`.
    id_fields: tuple[tuple, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}" + (f" ({self.label})" if self.label else "")


PARAMS = {"key": "s", "name": "item", "memory_id": Ref("memory"), "subtask_id": Ref("subtask")}

WRITES = [
    Write(
        "PATCH",
        "/agent",
        {
            "ttl_seconds": 7200,
            "max_messages": 50,
            "token_budget": 16000,
            "encoding": "cl100k_base",
            "system_budget": 1000,
            "conversation_budget": 8000,
            "working_budget": 2000,
            "long_term_budget": 3000,
        },
    ),
    Write(
        "PUT",
        "/sessions/{key}",
        {
            "goal": "Port the parser",
            "status": "paused",
            "ttl_seconds": 600,
            "metadata": {"cwd": "/repo", "branch": "main", "depth": 2},
        },
        status=201,
        params={"key": "fresh"},
    ),
    Write("DELETE", "/sessions/{key}", status=204, query={"scope": "conversation"}),
    Write(
        "POST",
        "/sessions/{key}/turns",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "Searching.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "grep", "arguments": '{"pattern": "TODO"}'},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "content": "a.py:1: TODO",
                    "name": "grep",
                    "tool_call_id": "call_1",
                },
            ],
            "usage": {"input_tokens": 812, "output_tokens": 64},
            "tool_calls": [
                {
                    "tool": "grep",
                    "query": "TODO",
                    "output": "a.py:1: TODO",
                    "success": True,
                    "file_path": "a.py",
                    "call_id": "call_1",
                    "details": {"numMatches": 1, "mode": "content"},
                },
                {"tool": "Read", "query": {"file_path": "a.py", "limit": 20}},
            ],
            "model": "gpt-4o",
            "timestamp": "2025-01-02T03:04:05Z",
        },
        status=201,
        params={"key": "fresh"},
    ),
    Write(
        "POST",
        "/sessions/{key}/turns",
        {
            "messages": [{"role": "tool", "content": "Known: none", "tool_call_id": "call_9"}],
            "tool_calls": [
                {"tool": "grep", "query": "x", "call_id": "call_9", "known_from": Ref("finding")}
            ],
        },
        status=201,
        label="a call skipped as known",
        id_fields=(("tool_calls", "[]", "known_from"),),
    ),
    Write(
        "PUT",
        "/sessions/{key}/context-items/{name}",
        {"value": {"path": "lib/app.ex", "lines": [1, 2]}, "source": "explicit", "confidence": 0.9},
        params={"name": "fresh-item"},
    ),
    Write("DELETE", "/sessions/{key}/context-items/{name}", status=204),
    Write(
        "POST",
        "/sessions/{key}/findings",
        {
            "tool": "bash",
            "query": "mix test",
            "fact": "exit 1, 2 failures",
            "step": 3,
            "success": False,
            "file_path": "test/app_test.exs",
        },
        status=201,
    ),
    Write(
        "POST",
        "/sessions/{key}/findings/check",
        {"tool": "grep", "query": "TODO"},
        label="text query",
    ),
    Write(
        "POST",
        "/sessions/{key}/findings/check",
        {"tool": "Read", "query": {"file_path": "src/a.ts", "offset": 10}},
        label="arguments query",
    ),
    Write(
        "POST",
        "/memories",
        {
            "content": "The project uses Elixir 1.17",
            "memory_type": "convention",
            "confidence": 0.7,
            "session": "s",
        },
        status=201,
        key_fields=(("session",),),
    ),
    Write(
        "PATCH",
        "/memories/{memory_id}",
        {"content": "Tests run with mix test --trace", "memory_type": "lesson", "confidence": 0.6},
    ),
    Write("DELETE", "/memories/{memory_id}", status=204),
    Write("POST", "/memories/{memory_id}/restore", params={"memory_id": Ref("archived")}),
    Write(
        "POST",
        "/tools/call",
        {
            "name": "remember",
            "arguments": {"content": "CI runs on Linux", "memory_type": "fact", "confidence": 0.9},
            "session": "s",
        },
        label="remember",
        open_schemas={("arguments",): TOOL_ARGUMENTS["remember"]},
        key_fields=(("session",),),
    ),
    Write(
        "POST",
        "/tools/call",
        {"name": "recall", "arguments": {"query": "Elixir", "memory_type": "fact", "limit": 3}},
        label="recall",
        open_schemas={("arguments",): TOOL_ARGUMENTS["recall"]},
    ),
    Write(
        "POST",
        "/tools/call",
        {"name": "forget", "arguments": {"memory_id": Ref("memory"), "reason": "outdated"}},
        label="forget",
        open_schemas={("arguments",): TOOL_ARGUMENTS["forget"]},
        id_fields=(("arguments", "memory_id"),),
    ),
    Write(
        "POST",
        "/sessions/{key}/subtasks",
        {"title": "Fix the tests", "status": "in_progress", "dependencies": [Ref("subtask")]},
        status=201,
        id_fields=(("dependencies", "[]"),),
    ),
    Write("PATCH", "/sessions/{key}/subtasks/{subtask_id}", {"title": "Fix it", "status": "done"}),
    # An export with every field (tests/test_export.py). Its ids are the source database's:
    # `bigint`, like every id.
    Write(
        "POST",
        "/import",
        COMPLETE_DOCUMENT,
        status=201,
        key_fields=(
            ("sessions", 0, "key"),
            ("sessions", 0, "context_items", 0, "key"),
            ("sessions", 0, "memories", 1, "ams", "working_memory"),
        ),
        id_fields=(
            ("sessions", "[]", "turns", "[]", "calls", "[]", "id"),
            ("sessions", "[]", "turns", "[]", "calls", "[]", "finding"),
            ("sessions", "[]", "findings", "[]", "id"),
            ("sessions", "[]", "findings", "[]", "tool_call"),
            ("sessions", "[]", "subtasks", "[]", "id"),
            ("sessions", "[]", "subtasks", "[]", "dependencies", "[]"),
            ("sessions", "[]", "memories", "[]", "id"),
            ("sessions", "[]", "memories", "[]", "superseded_by"),
            ("sessions", "[]", "memories", "[]", "history", "[]", "after", "superseded_by"),
            ("memories", "[]", "id"),
        ),
    ),
    Write("DELETE", "/sessions/{key}/subtasks/{subtask_id}", status=204),
]


# --- the objects each case starts from ----------------------------------------------------


@pytest.fixture
def world(api: ApiClient) -> dict[str, int]:
    """A live session `s` with a turn, a context item `item`, a finding, a subtask, an
    active memory and an archived one; answers the ids the rows refer to."""

    def ok(response, status=(200, 201)) -> dict:
        assert response.status_code in status, response.content
        return response.json() if response.content else {}

    ok(
        api.post(
            f"{BASE}/sessions/s/turns", turn(("user", "Find the TODOs"), ("assistant", "On it"))
        )
    )
    ok(api.put(f"{BASE}/sessions/s/context-items/item", {"value": "lib/app.ex"}))
    finding = ok(
        api.post(f"{BASE}/sessions/s/findings", {"tool": "grep", "query": "x", "fact": "none"})
    )
    memory = ok(api.post(f"{BASE}/memories", {"content": "The parser splits on dots"}))
    archived = ok(api.post(f"{BASE}/memories", {"content": "Use tabs"}))
    ok(api.delete(f"{BASE}/memories/{archived['memory']['id']}"), status=(204,))
    subtask = ok(api.post(f"{BASE}/sessions/s/subtasks", {"title": "Read the lexer"}))
    return {
        "memory": memory["memory"]["id"],
        "archived": archived["memory"]["id"],
        "subtask": subtask["id"],
        "finding": finding["finding"]["id"],
    }


def resolve(value: Any, ids: dict[str, int]) -> Any:
    if isinstance(value, Ref):
        return ids[value.name]
    if isinstance(value, dict):
        return {k: resolve(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, ids) for v in value]
    return value


def snapshot() -> dict[str, list[tuple]]:
    """Every row the API can write (an API key's `last_used_at` moves on every request).
    Plain SQL: the ORM would make this the slowest part of the module."""
    rows = {}
    with connection.cursor() as cursor:
        for model in apps.get_app_config("core").get_models():
            if model is not ApiKey:
                cursor.execute(
                    f"SELECT * FROM {connection.ops.quote_name(model._meta.db_table)} ORDER BY 1"
                )
                rows[model.__name__] = cursor.fetchall()
    return rows


# --- walking a body beside its schema -----------------------------------------------------


def deref(schema: dict) -> dict:
    while "$ref" in schema:
        schema = COMPONENTS[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def alternatives(schema: dict) -> list[dict]:
    schema = deref(schema)
    if "anyOf" in schema or "oneOf" in schema:
        return [a for s in schema.get("anyOf", schema.get("oneOf")) for a in alternatives(s)]
    return [schema]


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | Ref):
        return "integer"
    return {float: "number", str: "string", dict: "object", list: "array"}.get(type(value), "null")


def allowed(schema: dict | None) -> set[str] | None:
    """The JSON types a schema takes (None: anything)."""
    if schema is None:
        return None
    types: set[str] = set()
    for alt in alternatives(schema):
        if "type" not in alt:
            return None
        types.add(alt["type"])
    if "number" in types:
        types.add("integer")
    return types


def pick(schema: dict | None, value: Any) -> dict | None:
    """The alternative of `schema` that `value` is (None: an open value)."""
    if schema is None:
        return None
    for alt in alternatives(schema):
        if "type" not in alt:
            return None
        if alt["type"] == json_type(value) or (
            alt["type"] == "number" and json_type(value) == "integer"
        ):
            return alt
    raise AssertionError(f"the valid body's {value!r} does not fit its schema {schema}")


@dataclass(frozen=True)
class Node:
    path: tuple  # body path, list indexes as ints
    value: Any
    schema: dict | None  # the alternative the valid value is; None: open (any JSON)
    types: set[str] | None  # what the field takes; None: anything


def walk(value: Any, schema: dict | None, path: tuple, row: Write) -> Iterator[Node]:
    if path in row.open_schemas:
        schema = row.open_schemas[path]
    alt = pick(schema, value)
    yield Node(path, value, alt, allowed(schema))
    if isinstance(value, dict):
        props = (alt or {}).get("properties", {})
        extra = (alt or {}).get("additionalProperties", True)
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            yield from walk(item, sub, (*path, key), row)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (alt or {}).get("items"), (*path, index), row)


# --- bad variants -------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """One bad request derived from a row's valid one."""

    id: str
    statuses: tuple[int, ...] = (422,)
    loc: tuple | None = None  # the body path the error's `loc` must name
    change: tuple | None = None  # (body path, new value)
    delete: tuple | None = None  # body path
    raw: str | None = None  # the whole body, as sent
    params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)


WRONG_TYPES = {
    "string": "5",
    "integer": 5,
    "number": 5.5,
    "boolean": True,
    "object": {},
    "array": [],
    "null": None,
}
NOT_JSON_NUMBERS = {"NaN": float("nan"), "Infinity": float("inf"), "1e400": Token("1e400")}
NUL = "a\u0000b"
SURROGATE = "a\ud800b"
BAD_NAMES = {
    ".": ".",
    "..": "..",
    "NUL": "a\x00b",
    "BEL": "a\x07b",
    "DEL": "a\x7fb",
    "U+0085": "a\x85b",
    "U+2028": "a\u2028b",
    "U+2029": "a\u2029b",
    "U+200B": "a\u200bb",
    "U+FEFF": "\ufeffa",
    "U+202E": "a\u202eb",
    "201 chars": "k" * 201,
}


def dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


def is_id_field(row: Write, path: tuple) -> bool:
    generic = tuple("[]" if isinstance(p, int) else p for p in path)
    return generic in row.id_fields


def field_variants(row: Write, node: Node) -> Iterator[Bad]:
    path, value, alt, types = node.path, node.value, node.schema, node.types
    name = dotted(path)

    def bad(what: str, new: Any) -> Bad:
        return Bad(f"{name}={what}", loc=path, change=(path, new))

    if types is not None and path:
        for kind, sample in WRONG_TYPES.items():
            if kind not in types:
                yield bad(f"type:{kind}", sample)
    if isinstance(value, str):
        yield bad("NUL", NUL)
        yield bad("lone-surrogate", SURROGATE)
        if alt and "enum" in alt:
            yield bad("not-in-enum", "bogus")
        if alt and "maxLength" in alt:
            yield bad(f"{alt['maxLength'] + 1}-chars", "x" * (alt["maxLength"] + 1))
        if alt and alt.get("minLength", 0) >= 1:
            yield bad("empty", "")
        if alt and alt.get("format") == "date-time":
            yield bad("not-a-time", "yesterday")
        if path in row.key_fields:
            for what, key in BAD_NAMES.items():
                if what != "201 chars":  # the maxLength variant above
                    yield bad(f"key:{what}", key)
    elif json_type(value) == "integer" and alt is not None:
        if is_id_field(row, path):
            yield bad("2^63", MAX_BIGINT + 1)
        else:
            yield bad("2^31", MAX_INT + 1)
            if alt.get("maximum", MAX_INT) < MAX_INT:
                yield bad("maximum+1", alt["maximum"] + 1)
        if alt.get("minimum", -1) >= 0:
            yield bad("-1", -1)
        if alt.get("minimum", 0) > 0:
            yield bad("minimum-1", alt["minimum"] - 1)
    elif isinstance(value, float) and alt is not None:
        if "minimum" in alt:
            yield bad("minimum-0.1", round(alt["minimum"] - 0.1, 6))
        if "maximum" in alt:
            yield bad("maximum+0.5", alt["maximum"] + 0.5)
        yield bad("NaN", float("nan"))
        yield bad("Infinity", float("inf"))
        yield bad("-Infinity", float("-inf"))
        yield bad("1e400", Token("1e400"))
    elif isinstance(value, dict):
        if alt is None or alt.get("additionalProperties", True) is not False:
            # An open object: its keys are text too.
            yield Bad(f"{name}=NUL-in-key", loc=path, change=(path, {**value, "k\u0000": 1}))
            yield Bad(f"{name}=surrogate-in-key", loc=path, change=(path, {**value, "k\ud800": 1}))
            # Not JSON numbers, though Python's parser takes them: no JSON column holds them.
            for what, number in NOT_JSON_NUMBERS.items():
                yield Bad(f"{name}={what}-inside", loc=path, change=(path, {**value, "n": number}))
        else:
            yield Bad(
                f"{name}=unknown-field",
                loc=(*path, "bogus_field"),
                change=(path, {**value, "bogus_field": 1}),
            )
            for required in alt.get("required", []):
                if required in value:
                    yield Bad(
                        f"{name}.{required}=missing",
                        loc=(*path, required),
                        delete=(*path, required),
                    )
    elif isinstance(value, list) and alt is not None:
        if alt.get("minItems", 0) >= 1:
            yield bad("empty-list", [])
        if "maxItems" in alt and value:
            yield bad(f"{alt['maxItems'] + 1}-items", value[:1] * (alt["maxItems"] + 1))


def body_schema(row: Write) -> dict | None:
    operation = SCHEMA["paths"][BASE + row.path][row.method.lower()]
    body = operation.get("requestBody")
    return body["content"]["application/json"]["schema"] if body else None


def variants(row: Write) -> list[Bad]:
    found: list[Bad] = []
    limit = settings.MEMORYAPP_MAX_BODY_BYTES
    for what, raw in {"null": "null", "list": "[]", "number": "5", "string": '"x"'}.items():
        found.append(Bad(f"body={what}", raw=raw))
    # Malformed: the 400 it is everywhere, or for an operation that takes no body the 422
    # saying so (it refuses any body before reading it).
    malformed = (400,) if row.body is not None else (400, 422)
    found.append(Bad("body=malformed-JSON", statuses=malformed, raw='{"a": '))
    found.append(Bad("body=too-large", statuses=(413,), raw=json.dumps({"pad": "x" * limit})))
    # Valid JSON nested deeper than a recursive parser goes: refused, not a crash.
    found.append(
        Bad(
            "body=nested-5000-deep",
            statuses=(400, 422),
            raw='{"x": ' + "[" * 5000 + "]" * 5000 + "}",
        )
    )
    if row.body is None:
        # The operation takes no fields, so any field is unknown (`{"scope": ...}` sent to
        # a DELETE is not silently dropped).
        found.append(Bad("body=unknown-field", raw='{"bogus_field": 1}'))
    else:
        for node in walk(row.body, body_schema(row), (), row):
            found.extend(field_variants(row, node))
    operation = SCHEMA["paths"][BASE + row.path][row.method.lower()]
    for parameter in operation.get("parameters", []):
        name, where = parameter["name"], parameter["in"]
        if where == "path" and name in ("key", "name"):
            for what, bad_name in BAD_NAMES.items():
                found.append(Bad(f"path:{name}={what}", params={name: bad_name}))
            found.append(Bad(f"path:{name}=slash", statuses=(404,), params={name: "a/b"}))
        elif where == "path":
            found.append(Bad(f"path:{name}=not-a-number", params={name: "abc"}))
            found.append(Bad(f"path:{name}=1.5", params={name: "1.5"}))
            for what, number in {"-1": -1, "2^63": MAX_BIGINT + 1, "10^30": 10**30}.items():
                found.append(
                    Bad(f"path:{name}={what}", statuses=(404, 422), params={name: str(number)})
                )
        elif where == "query":
            found.append(Bad(f"query:{name}=bogus", query={name: "bogus"}))
            found.append(Bad(f"query:{name}=NUL", query={name: "all\x00"}))
    ids = [b.id for b in found]
    assert len(ids) == len(set(ids)), f"{row.id}: duplicate variant ids"
    return found


# --- sending ------------------------------------------------------------------------------


def url(
    row: Write, ids: dict[str, int], params: dict | None = None, query: dict | None = None
) -> str:
    values = {**PARAMS, **row.params, **(params or {})}
    path = row.path
    for name, value in values.items():
        path = path.replace("{" + name + "}", quote(str(resolve(value, ids)), safe=""))
    query = {**row.query, **(query or {})}
    return BASE + path + (f"?{urlencode(query)}" if query else "")


def send(api: ApiClient, method: str, path: str, body: str | None):
    extra = {"data": body, "content_type": "application/json"} if body is not None else {}
    return api.client.generic(method, path, headers=api._headers(None), **extra)


def encode(body: Any) -> str:
    # ensure_ascii writes a lone surrogate as the escape \ud800 (valid JSON that holds one);
    # allow_nan writes NaN and Infinity as the bare tokens Python's parser takes.
    tokens: list[str] = []

    def placeholder(value: Any) -> str:
        if not isinstance(value, Token):
            raise TypeError(value)
        tokens.append(value.text)
        return f"@token{len(tokens) - 1}@"

    text = json.dumps(body, ensure_ascii=True, allow_nan=True, default=placeholder)
    for index, token in enumerate(tokens):
        text = text.replace(f'"@token{index}@"', token)
    return text


def apply(bad: Bad, body: Any, ids: dict[str, int]) -> Any:
    body = copy.deepcopy(body)
    target = bad.change[0] if bad.change else bad.delete
    new = resolve(bad.change[1], ids) if bad.change else None
    if not target:
        return new
    parent = body
    for part in target[:-1]:
        parent = parent[part]
    if bad.change:
        parent[target[-1]] = new
    else:
        del parent[target[-1]]
    return body


def names_field(loc: list, path: tuple) -> bool:
    """`loc` is django-ninja's: "body", the view's parameter name, then the field's path
    (union members add their own names after it)."""
    if not loc or loc[0] != "body":
        return False
    n = len(path)
    return list(loc[1 : 1 + n]) == list(path) or list(loc[2 : 2 + n]) == list(path)


# --- the tests ----------------------------------------------------------------------------


def test_every_write_operation_has_a_row():
    operations = {
        f"{method.upper()} {path.removeprefix(BASE)}"
        for path, item in SCHEMA["paths"].items()
        for method in item
        if method in ("post", "put", "patch", "delete")
    }
    rows = {f"{row.method} {row.path}" for row in WRITES}
    assert operations - rows == set(), "write operations without a row in WRITES"
    assert rows - operations == set(), "rows for operations the schema does not have"


def schema_fields(schema: dict, prefix: tuple, seen: set) -> Iterator[tuple]:
    for alt in alternatives(schema):
        if alt.get("title") in seen:
            continue
        for name, sub in alt.get("properties", {}).items():
            yield (*prefix, name)
            yield from schema_fields(sub, (*prefix, name), seen | {alt.get("title")})
        if "items" in alt:
            yield from schema_fields(alt["items"], (*prefix, "[]"), seen)


def test_every_body_field_is_in_a_valid_body():
    """A field no valid body holds would get no bad variants: each must be in a row."""
    missing = []
    for row in WRITES:
        schema = body_schema(row)
        if schema is None:
            continue
        fields = set(schema_fields(schema, (), set()))
        for path, open_schema in row.open_schemas.items():
            fields |= {(*path, *f) for f in schema_fields(open_schema, (), set())}
        covered = {
            tuple("[]" if isinstance(p, int) else p for p in node.path)
            for node in walk(row.body, schema, (), row)
        }
        for other in WRITES:  # rows of one operation share the work
            if other is not row and (other.method, other.path) == (row.method, row.path):
                covered |= {
                    tuple("[]" if isinstance(p, int) else p for p in node.path)
                    for node in walk(other.body, schema, (), other)
                }
        missing += [f"{row.id}: {dotted(f)}" for f in sorted(fields - covered)]
    assert missing == []


def send_case(api: ApiClient, row: Write, bad: Bad | None, ids: dict[str, int]) -> str | None:
    """Send `bad` (None: the valid request); answer what is wrong with the answer, if any."""
    valid = None if row.body is None else resolve(row.body, ids)
    if bad is None:
        body = None if valid is None else encode(valid)
    elif bad.raw is not None:
        body = bad.raw
    elif bad.change or bad.delete:
        body = encode(apply(bad, valid, ids))
    else:
        body = None if valid is None else encode(valid)
    target = url(row, ids, bad and bad.params, bad and bad.query)
    before = snapshot()
    response = send(api, row.method, target, body)
    shown = body if body is None or len(body) < 300 else body[:300] + "..."
    where = (
        f"{row.method} {target} {shown}\n    -> {response.status_code} {response.content[:400]!r}"
    )
    if bad is None:
        return None if response.status_code == row.status else f"valid request refused: {where}"
    problems = []
    if response.status_code not in bad.statuses:
        problems.append(f"status {response.status_code}, not {'/'.join(map(str, bad.statuses))}")
    try:
        after = snapshot()
    except DatabaseError as exc:  # PostgreSQL: the request's failure aborted the transaction
        after = None
        problems.append(f"rows unreadable after the request ({exc.__class__.__name__})")
    if after is not None and after != before:
        problems.append(f"rows changed in {[n for n in before if before[n] != after[n]]}")
    if not (response.content and response["Content-Type"].startswith("application/json")):
        problems.append("not a JSON body")
    else:
        detail = response.json().get("detail")
        if not detail:
            problems.append("no detail")
        elif bad.loc is not None and 400 <= response.status_code < 500:
            if not (
                isinstance(detail, list)
                and any(
                    names_field(e.get("loc", []), bad.loc) for e in detail if isinstance(e, dict)
                )
            ):
                problems.append(f"no loc names {dotted(bad.loc)}")
    return f"{bad.id}: {'; '.join(problems)}\n    {where}" if problems else None


@pytest.mark.parametrize("row", WRITES, ids=lambda row: row.id)
def test_bad_input_is_refused_and_changes_nothing(api, world, row):
    """The valid request is accepted; each bad variant of it is refused with a JSON 4xx
    that names the field, and leaves every row as it was. Each variant runs in a
    savepoint rolled back after it, so one that wrongly succeeds cannot hide the next."""
    api = ApiClient(Client(raise_request_exception=False), api.key)  # a crash is a 500 here
    with transaction.atomic():
        problem = send_case(api, row, None, world)
        transaction.set_rollback(True)
    assert problem is None, problem
    failures = []
    bads = variants(row)
    for bad in bads:
        with transaction.atomic():
            problem = send_case(api, row, bad, world)
            transaction.set_rollback(True)
        if problem:
            failures.append(problem)
    assert failures == [], (
        f"{len(failures)} of {len(bads)} bad variants of {row.id} were not refused as due:\n"
        + "\n".join(failures)
    )


@pytest.mark.parametrize(
    "timestamp",
    [
        "0001-01-01T00:00:00+01:00",  # in UTC, before the year 1
        "0001-01-01T00:00:00Z",
        "2025-01-01T00:00:00+23:59",  # RFC 3339 allows it; PostgreSQL offsets stop at 15:59
        "2025-01-01T00:00:00-23:59",
        "9999-12-31T23:59:59-01:00",  # in UTC, after the year 9999
    ],
)
def test_an_edge_timestamp_is_stored_or_refused(api, timestamp):
    """Timestamps the schema takes but Python's or the database's ranges may not: each is
    stored (201) or refused with a 422 naming it, never a crash."""
    api = ApiClient(Client(raise_request_exception=False), api.key)
    before = snapshot()
    response = api.post(f"{BASE}/sessions/s/turns", turn(("user", "hi"), timestamp=timestamp))
    assert response.status_code in (201, 422), response.content
    if response.status_code == 422:
        assert any(names_field(e["loc"], ("timestamp",)) for e in response.json()["detail"])
        assert snapshot() == before
