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
    "time", "score", "rating", "change", "points", "total", "count", "phone", "display_phone",
    "url", "city", "country", "text", "description", "message",
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


# Fields that only decorate an answer: left out of a summary.
NOISE_FIELDS = re.compile(r"(?i)^(?:icon|image|img|logo|thumb|avatar|color|colour)\w*$|url$|_?id$")
NAME_FIELDS = ("name", "title", "symbol", "label", "headline", "team", "city")


def _filled(value: Any) -> bool:
    return value not in ("", None, [], {})


def _key_fields(item: dict, count: int = 4) -> str:
    """The fields a person would read first: names, then numbers and short texts."""
    keys = [k for k in KEY_FIELDS if k in item and _scalar(item[k]) and _filled(item[k])]
    numbers = _number_fields(item, keys)
    rest = [
        k
        for k, v in item.items()
        if k not in keys and k not in numbers and _scalar(v) and _filled(v)
    ]
    chosen = _ids_last(keys + numbers + rest)
    return ", ".join(f"{k}={_show(item[k])}" for k in chosen[:count])


def _number_fields(item: dict, keys: list[str]) -> list[str]:
    """The fields, other than `keys`, that hold a number or a numeric text."""
    return [
        k for k, v in item.items()
        if k not in keys and isinstance(v, int | float) and not isinstance(v, bool)
        or (isinstance(v, str) and re.fullmatch(r"-?\d+(?:\.\d+)?", v or "") and k not in keys)
    ]  # fmt: skip


def _ids_last(fields: list[str]) -> list[str]:
    """The fields without decoration (icons, urls, foreign ids), an `id` or `uuid` last."""
    chosen = [k for k in fields if not NOISE_FIELDS.search(k) or k in ("id", "uuid")]
    return [k for k in chosen if k not in ("id", "uuid")] + [
        k for k in chosen if k in ("id", "uuid")
    ]


def _name(item: Any) -> str:
    if isinstance(item, dict):
        name = next((item[k] for k in NAME_FIELDS if isinstance(item.get(k), str) and item[k]), "")
        if not name:  # named by what it holds: a match by its two teams
            inner = [
                v[k] for v in item.values() if isinstance(v, dict)
                for k in NAME_FIELDS[:2] if isinstance(v.get(k), str) and v[k]
            ][:2]  # fmt: skip
            name = " / ".join(inner)
        number = next(
            (f"{k} {_show(v)}" for k, v in item.items()
             if isinstance(v, int | float) and not isinstance(v, bool) and k not in ("id", "rank")),
            "",
        )  # fmt: skip
        if name:
            return one_line(name, 50) + (f" ({number})" if number else "")
        return _key_fields(item, 2)
    return _show(item, 30)


def _descend(value: Any) -> tuple[Any, str]:
    """Into single-key objects and single-item lists: `{"data": {"coin": {...}}}` is the
    coin. Answers the inner value and the path taken."""
    path: list[str] = []
    for _ in range(6):
        if isinstance(value, dict):
            filled = {k: v for k, v in value.items() if _filled(v)}
            containers = [k for k, v in filled.items() if isinstance(v, dict | list)]
            scalars = [k for k, v in filled.items() if _scalar(v)]
            if len(containers) == 1 and all(
                k in ("status", "success", "ok", "message", "msg", "code") or k in STATUS_FIELDS
                for k in scalars
            ):
                path.append(containers[0])
                value = filled[containers[0]]
                continue
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
            value = value[0]
            continue
        break
    return value, ".".join(path)


def _list_part(key: str, items: list) -> str:
    if len(items) == 1 and isinstance(items[0], dict):
        nested = [(k, v) for k, v in items[0].items() if isinstance(v, list) and v]
        if nested:  # {"standings": [{"type": "TOTAL", "table": [...]}]}: the table
            key, items = f"{key}.{nested[0][0]}", nested[0][1]
    if len(items) == 1 and isinstance(items[0], dict):  # one item: its fields, ids too
        return f"{key}: 1 item ({_key_fields(items[0], 5)})"
    names = ", ".join(_name(v) for v in items[:3]) + (", …" if len(items) > 3 else "")
    return f"{key}: {plural(len(items), 'item')} ({names})"


def describe_value(value: Any) -> str:
    """A short text for a JSON value: its size and the fields that carry the answer, the
    answer's own fields first, then its lists, then what is nested further."""
    value, _ = _descend(value)
    if isinstance(value, list):
        if not value:
            return "empty list"
        names = ", ".join(_name(v) for v in value[:4])
        return f"{plural(len(value), 'item')}: {names}" + (", …" if len(value) > 4 else "")
    if not isinstance(value, dict):
        return _show(value, OTHER_LIMIT)
    filled = {k: v for k, v in value.items() if _filled(v)}
    if not filled:
        return "empty object"
    parts = [scalars] if (scalars := _key_fields(filled, 5)) else []
    parts += [_list_part(k, v) for k, v in filled.items() if isinstance(v, list)]
    parts += [
        f"{k}: {fields}"
        for k, v in filled.items()
        if isinstance(v, dict) and not NOISE_FIELDS.search(k) and (fields := _key_fields(v, 3))
    ]
    return "; ".join(parts[:5]) or f"{len(value)} fields"


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
        if (error := _envelope_error(value)) is not None:
            return value, error
        inner = [k for k in value if k in WRAPPERS]
        rest = [
            k for k in value if k not in WRAPPERS and k not in ("error", "errors", *STATUS_FIELDS)
        ]
        if len(inner) == 1 and not rest:
            value = value[inner[0]]
            continue
        return value, _failure_message(value)
    return value, None


def _envelope_error(value: dict) -> str | None:
    """The error an envelope reports (`error`, `errors`, `success: false`, `ok: false`)."""
    error = value.get("error") or value.get("errors")
    if error and not (isinstance(error, dict | list) and not any(error)):
        return one_line(_show(error, 200) if not isinstance(error, str) else error, 200)
    if value.get("success") is False or value.get("ok") is False:
        return one_line(str(value.get("message") or value.get("msg") or "failed"), 200)
    return None


def _failure_message(value: dict) -> str | None:
    """A lone message (`{"message": "Invalid API key"}`) when its words say it failed."""
    if set(value) <= {"message", "msg", "detail", "error"} and isinstance(
        value.get("message") or value.get("msg") or value.get("detail"), str
    ):
        message = value.get("message") or value.get("msg") or value.get("detail")
        if _FAILURE_WORDS.search(message):
            return one_line(message, 200)
    return None


def summarize_json(text: str) -> Fact | None:
    value = parse_value(text)
    if value is None:
        return None
    answer, error = unwrap(value)
    if isinstance(answer, str) and answer.lstrip()[:1] in ("{", "[") and (part := _partial(answer)):
        return Fact(
            one_line(f"{part} (answer cut short)", OTHER_LIMIT), True, details={"json": True}
        )
    if error:
        inner = value.get("response") if isinstance(value, dict) else None
        said, _ = unwrap(inner) if inner else (None, None)
        message = said.get("message") if isinstance(said, dict) else None
        if isinstance(message, str) and message and message not in error:
            error = f"{error.rstrip('.')} — {one_line(message, 120)}"
        return Fact(f"error: {one_line(error, 220)}", False, details={"error": True})
    status = ""
    if isinstance(value, dict):
        for field in STATUS_FIELDS:
            if field in value and _scalar(value[field]) and value[field] not in ("", None):
                status = f"{field} {_show(value[field])}; "
                break
    return Fact(
        one_line(status + describe_value(answer), OTHER_LIMIT), True, details={"json": True}
    )


_PAIR = re.compile(
    r"""['"](\w+)['"]:\s*(?:'([^'\n]{0,80})'|"([^"\n]{0,80})"|(-?\d+(?:\.\d+)?)|(true|false|True|False))"""
)
ANSWER_FIELDS = ("final_answer", "answer", "message", "result", "text", "summary")


def _partial(text: str) -> str:
    """What can be read of a JSON answer that was cut short: its first scalar fields."""
    body = text
    if parse_value(text) is None:
        inner = re.search(r'"response":\s*"(.*)', text, re.DOTALL)
        body = inner.group(1) if inner else text
    pairs = []
    for match in _PAIR.finditer(body[:3000]):
        key, found = match.group(1), next(g for g in match.groups()[1:] if g is not None)
        if not NOISE_FIELDS.search(key) and key not in ("error",) and (key, found) not in pairs:
            pairs.append((key, found))
        if len(pairs) >= 5:
            break
    return ", ".join(f"{k}={one_line(v, 40)}" for k, v in pairs)


def extract(call: ToolCallData) -> Fact:
    text = call.clean
    fact = summarize_json(text)
    if failed(call):
        if fact is not None and not fact.success:
            return fact  # the envelope's own error, not the raw JSON
        return failure(call)
    if fact is not None:
        return fact
    if text.lstrip()[:1] in ("{", "[") and (partial := _partial(text)):
        return Fact(
            one_line(f"{partial} (answer cut short)", OTHER_LIMIT), True, details={"json": True}
        )
    if not text.strip():
        args = call.args or {}
        answer = next(
            (args[f] for f in ANSWER_FIELDS if isinstance(args.get(f), str) and args[f].strip()), ""
        )
        if answer:
            kind = str(args.get("return_type") or "")
            verb = "gave up" if "give_up" in kind else "answered"
            return Fact(one_line(f"{verb}: {answer}", OTHER_LIMIT), True)
        if "give_up" in str(args.get("return_type") or ""):
            return Fact("gave up", True)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return Fact(one_line(" / ".join(lines[:3]), OTHER_LIMIT) or "no output", True, call.file_path)
