"""Is this information already known? Matching a tool call against stored findings.

Queries are normalized before comparing: case folded, quotes and backticks removed,
whitespace collapsed, and path forms unified (`./src/a.ts`, `src//a.ts`, `src\\a.ts`
and `src/a.ts/` all become `src/a.ts`).

Two queries for the same tool (tool names compare case-insensitively) match when:
- their normalized forms are equal; or
- neither looks like a path, and the Jaccard similarity of their word sets is at least
  `NEAR_DUPLICATE_THRESHOLD` (0.5): `VectorStore` and `VectorStore interface` share one of
  two words and match; `user auth flow` and `payment flow` share one of four and do not.
Paths never match approximately: `src/a.ts` and `src/b.ts` are different files.
"""

from __future__ import annotations

import re

NEAR_DUPLICATE_THRESHOLD = 0.5

_QUOTES = re.compile(r"[\"'`\u2018\u2019\u201c\u201d]")
_WORD = re.compile(r"[0-9a-z]+")
_PATHLIKE = re.compile(r"(^|\s)(\.{0,2}/|[\w.\-]+/[\w.\-/]*|[\w\-]+\.[a-z0-9]{1,6}$)")


def normalize_tool(tool: str) -> str:
    return tool.strip().casefold()


def _normalize_path(token: str) -> str:
    path = token.replace("\\", "/")
    path = re.sub(r"/{2,}", "/", path)
    while path.startswith("./"):
        path = path[2:]
    if len(path) > 1:
        path = path.rstrip("/")
    return path


def normalize_query(query: str) -> str:
    text = _QUOTES.sub("", query).casefold()
    return " ".join(_normalize_path(token) for token in text.split())


def looks_like_path(normalized: str) -> bool:
    return bool(_PATHLIKE.search(normalized))


def words(normalized: str) -> set[str]:
    return set(_WORD.findall(normalized))


def similarity(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return 1.0 if a == b else 0.0
    return len(wa & wb) / len(wa | wb)


def queries_match(a: str, b: str) -> bool:
    na, nb = normalize_query(a), normalize_query(b)
    if na == nb:
        return True
    if looks_like_path(na) or looks_like_path(nb):
        return False
    return similarity(na, nb) >= NEAR_DUPLICATE_THRESHOLD
