"""Data loads: which file or data set, how many items, and how many of each kind; never
the data itself."""

from __future__ import annotations

import json
from collections import Counter

from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure
from memoryapp.lib.extraction.identity import PATH_FIELDS, first_field

DATA_LOAD_MIN_CHARS = 5000
_KIND_FIELDS = ("type", "kind", "class", "category")


def _kind(item: object) -> str | None:
    if not isinstance(item, dict):
        return None
    value = next((item.get(f) for f in _KIND_FIELDS if item.get(f)), None)
    return str(value) if value is not None else None


def extract(call: ToolCallData) -> Fact:
    path = first_field(call.args, PATH_FIELDS) or call.query.strip()
    if failed(call):
        return failure(call, path)
    output = call.clean
    try:
        data = json.loads(output)
    except ValueError:
        return Fact(f"Loaded {len(output):,} characters from {path or 'data'}", True, path)
    name = data.get("name") if isinstance(data, dict) and isinstance(data.get("name"), str) else ""
    label = " ".join(p for p in (path, name and f"({name})") if p) or "data"
    items = data
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if len(lists) == 1:
            items = next(iter(lists.values()))
        elif lists:
            biggest = sorted(lists.items(), key=lambda kv: -len(kv[1]))[:6]
            counts = ", ".join(f"{len(v):,} {k}" for k, v in biggest)
            return Fact(f"Loaded {label}: {counts}", True, path)
    if isinstance(items, list):
        kinds = Counter(k for item in items if (k := _kind(item)) is not None)
        fact = f"Loaded {label}: {len(items):,} items"
        if kinds:
            fact += " — " + ", ".join(f"{n:,} {k}" for k, n in kinds.most_common(6))
        return Fact(fact, True, path)
    return Fact(f"Loaded {label}: {type(data).__name__} of {len(output):,} characters", True, path)
