"""Earlier findings that cover a tool call without being its answer: "already known?" says
`known` only for the same call exactly (never a false "known"), and names these beside it
as `related`, each with why:
- a search whose pattern the new one contains, or that contains the new one's
  (`fs:search "VectorStore interface"` after `fs:search "VectorStore"`);
- the same file read at another range, or edited;
- a query of the same kind that shares at least RELATED_WORDS of its content words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memoryapp.lib import relevance
from memoryapp.lib.extraction import kinds

RELATED_WORDS = 2
MAX_RELATED = 5


@dataclass(frozen=True)
class Call:
    """What the rule reads of a call or a finding: its kind, its query as shown (the
    finding's `query`), and the file it acts on."""

    kind: str
    query: str
    file_path: str = ""


@dataclass(frozen=True)
class Related:
    index: int  # in the earlier findings given
    why: str


def related(new: Call, earlier: Sequence[Call], limit: int = MAX_RELATED) -> list[Related]:
    """Of `earlier` (newest first, none of them the call itself), those that cover `new`,
    at most `limit`, in that order."""
    asked = relevance.Query.of(new.query)
    found: list[Related] = []
    for index, old in enumerate(earlier):
        why = _why(new, old, asked)
        if why:
            found.append(Related(index, why))
            if len(found) >= limit:
                break
    return found


def _why(new: Call, old: Call, asked: relevance.Query) -> str:
    if new.file_path and old.file_path == new.file_path and kinds.READ in (new.kind, old.kind):
        if old.kind == kinds.EDIT:
            return "the same file, edited"
        if old.kind == kinds.READ:
            return f"the same file, read as {old.query}" if old.query else "the same file"
    if old.kind != new.kind:
        return ""
    if new.kind == kinds.SEARCH:
        here, there = new.query.casefold().strip(), old.query.casefold().strip()
        if there and there != here and there in here:
            return f"an earlier search for {old.query}, which this one's pattern contains"
        if here and there != here and here in there:
            return f"an earlier search for {old.query}, which contains this one's pattern"
    shared = asked.matched(old.query)
    if len(shared) >= RELATED_WORDS:
        return "a similar query: " + ", ".join(shared)
    return ""
