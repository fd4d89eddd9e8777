"""Any other tool: JSON answers summarised, text cut to one line.

JSON outputs are unwrapped from the envelopes API tools use (`{"error", "response"}` with
the response itself JSON or a Python literal, as ToolBench's APIs answer;
`{"data": …}`, `{"result": …}`) and summarised: status, size, and the key fields of the
answer (`10 items; first: name=Hotel Lux, price=120`), never a raw string cut mid-way. An
envelope's error makes the finding unsuccessful. Anything else becomes its first line(s),
bounded.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure
from memoryapp.lib.extraction.text import one_line, plural

OTHER_LIMIT = 240
PARSE_LIMIT = 500_000
WRAPPERS = ("data", "result", "results", "response", "body", "payload", "output", "content")
KEY_FIELDS = (
    "name", "title", "id", "symbol", "type", "status", "price", "value", "amount", "date",
    "time", "score", "rating", "url", "city", "country", "text", "description", "message",
)  # fmt: skip
STATUS_FIELDS = ("status", "success", "ok", "code", "status_code", "statusCode")
_FAILURE_WORDS = re.compile(
    r"\b(?:error|invalid|disabled|not subscribed|unauthori[sz]ed|forbidden|not found|"
    r"does not exist|exceeded|rate limit|quota|timed? ?out|failed|blocked)\b",
    re.IGNORECASE,
)


def parse_value(text: str) -> Any:
    """JSON, else a Python literal (ToolBench answers are often `str(dict)`), else None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{" or len(stripped) > PARSE_LIMIT:
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _show(value: Any, limit: int = 40) -> str:
    if isinstance(value, str):
        return one_line(value, limit)
    return json.dumps(value) if _scalar(value) else type(value).__name__


def _key_fields(item: dict, count: int = 3) -> str:
    chosen = [k for k in KEY_FIELDS if k in item and _scalar(item[k]) and item[k] not in ("", None)]
    chosen += [k for k, v in item.items() if k not in chosen and _scalar(v) and v not in ("", None)]
    return ", ".join(f"{k}={_show(item[k])}" for k in chosen[:count])


def describe_value(value: Any) -> str:
    """A short text for a JSON value: its size and key fields."""
    if isinstance(value, list):
        if not value:
            return "empty list"
        first = value[0]
        if isinstance(first, dict):
            return f"{plural(len(value), 'item')}; first: {_key_fields(first)}"
        shown = ", ".join(_show(v, 30) for v in value[:4])
        return f"{plural(len(value), 'item')}: {shown}" + (", …" if len(value) > 4 else "")
    if isinstance(value, dict):
        if not value:
            return "empty object"
        parts = []
        scalars = _key_fields(value, 4)
        if scalars:
            parts.append(scalars)
        for key, inner in value.items():
            if isinstance(inner, list):
                parts.append(f"{key}: {plural(len(inner), 'item')}")
            elif isinstance(inner, dict) and len(parts) < 4:
                parts.append(f"{key}: {{{_key_fields(inner, 2)}}}")
            if len(parts) >= 5:
                break
        return "; ".join(parts) or f"{len(value)} fields"
    return _show(value, OTHER_LIMIT)


def unwrap(value: Any) -> tuple[Any, str | None]:
    """(the answer inside common envelopes, the envelope's error if it reports one)."""
    for _ in range(4):
        if isinstance(value, str):
            parsed = parse_value(value)
            if parsed is None:
                return value, None
            value = parsed
        if not isinstance(value, dict):
            return value, None
        error = value.get("error") or value.get("errors")
        if error and not (isinstance(error, dict | list) and not any(error)):
            return value, one_line(_show(error, 200) if not isinstance(error, str) else error, 200)
        if value.get("success") is False or value.get("ok") is False:
            return value, one_line(str(value.get("message") or value.get("msg") or "failed"), 200)
        inner = [k for k in value if k in WRAPPERS]
        rest = [
            k for k in value if k not in WRAPPERS and k not in ("error", "errors", *STATUS_FIELDS)
        ]
        if len(inner) == 1 and not rest:
            value = value[inner[0]]
            continue
        if set(value) <= {"message", "msg", "detail", "error"} and isinstance(
            value.get("message") or value.get("msg") or value.get("detail"), str
        ):
            message = value.get("message") or value.get("msg") or value.get("detail")
            if _FAILURE_WORDS.search(message):
                return value, one_line(message, 200)
        return value, None
    return value, None


def summarize_json(text: str) -> Fact | None:
    value = parse_value(text)
    if value is None:
        return None
    answer, error = unwrap(value)
    if error:
        return Fact(f"error: {error}", False, details={"error": True})
    status = ""
    if isinstance(value, dict):
        for field in STATUS_FIELDS:
            if field in value and _scalar(value[field]) and value[field] not in ("", None):
                status = f"{field} {_show(value[field])}; "
                break
    return Fact(
        one_line(status + describe_value(answer), OTHER_LIMIT), True, details={"json": True}
    )


def extract(call: ToolCallData) -> Fact:
    text = call.clean
    if failed(call):
        return failure(call)
    if fact := summarize_json(text):
        return fact
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return Fact(one_line(" / ".join(lines[:3]), OTHER_LIMIT) or "no output", True, call.file_path)
