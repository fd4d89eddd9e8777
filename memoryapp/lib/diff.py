"""What a change of a memory, a finding or a working-context item changed, for its
history: the fields whose values differ between two snapshots, and for prose a word-level
diff. Plain data in, plain data out: the parts are rendered by a template that escapes
each one, so agent text is never marked safe."""

from __future__ import annotations

import difflib
import json
import re
from typing import NamedTuple

_TOKEN = re.compile(r"\s+|[^\s]+")


class Part(NamedTuple):
    """A run of text that is the same in both versions, removed, or inserted."""

    op: str  # "same", "del" or "ins"
    text: str


def is_prose(old: object, new: object) -> bool:
    """Whether two values read best as a word diff: both text, and more than one word."""
    if not isinstance(old, str) or not isinstance(new, str):
        return False
    return len(_TOKEN.findall(old)) > 1 or len(_TOKEN.findall(new)) > 1


def word_diff(old: str, new: str) -> list[Part]:
    """`old` turned into `new`, word by word: joining the "same" and "del" parts gives
    `old`, joining the "same" and "ins" parts gives `new`."""
    before, after = _TOKEN.findall(old), _TOKEN.findall(new)
    parts: list[Part] = []

    def add(op: str, tokens: list[str]) -> None:
        text = "".join(tokens)
        if not text:
            return
        if parts and parts[-1].op == op:
            parts[-1] = Part(op, parts[-1].text + text)
        else:
            parts.append(Part(op, text))

    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            add("same", before[i1:i2])
        else:
            add("del", before[i1:i2])
            add("ins", after[j1:j2])
    return parts


class Change(NamedTuple):
    """One field an event changed, its values as text. `old` is None when the field had
    no value before (an add), `new` when it has none after (a delete); `words` is the
    word diff when both are prose."""

    field: str
    label: str
    old: str | None
    new: str | None
    words: list[Part] | None


def shown(value: object) -> str:
    """A stored value as a person reads it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def changes(
    before: dict | None,
    after: dict | None,
    labels: dict[str, str] | None = None,
    order: tuple[str, ...] = (),
) -> list[Change]:
    """The fields that differ between two snapshots: those named in `order` first, in
    that order, then the others by name (never the snapshots' own key order, which
    PostgreSQL's jsonb does not keep). With no `before` (an add) every field that has a
    value is new; with no `after` (a delete) every such field is gone."""
    labels = labels or {}
    old_values, new_values = before or {}, after or {}
    rank = {field: i for i, field in enumerate(order)}
    fields = sorted(set(old_values) | set(new_values), key=lambda f: (rank.get(f, len(rank)), f))
    found = []
    for field in fields:
        old, new = old_values.get(field), new_values.get(field)
        if before is not None and after is not None:
            if field not in old_values or field not in new_values or old == new:
                continue
        elif old in (None, "") and new in (None, ""):
            continue
        old_text = shown(old) if before is not None else None
        new_text = shown(new) if after is not None else None
        words = (
            word_diff(old_text, new_text)
            if old_text is not None and new_text is not None and is_prose(old, new)
            else None
        )
        label = labels.get(field, field.replace("_", " "))
        found.append(Change(field, label, old_text, new_text, words))
    return found
