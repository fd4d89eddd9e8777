"""The API's one pagination scheme: `?cursor=&limit=` in, `next_cursor` out.

A cursor is opaque to clients: base64url of a small JSON list, `[list, *position]`, where
`list` names the listing it belongs to and the position is the last row's sort key
(a keyset: rows written meanwhile never shift a page, nothing is skipped or repeated).
Ranked full-text results have no stable key to resume from, so their position is the
number of hits already served. Anything that does not decode to the right shape for the
listing asked (edited, truncated, from another listing) is a 422 that changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from datetime import datetime
from typing import Any

from ninja import Query
from ninja.errors import HttpError

from memoryapp.core.limits import MAX_INT

MAX_PAGE = 200
MAX_CURSOR_CHARS = 400

# What a position may hold, by the type its listing declares.
_Kind = type[int] | type[float] | type[datetime]


def encode(listing: str, *position: int | float | datetime) -> str:
    values = [v.isoformat() if isinstance(v, datetime) else v for v in position]
    raw = json.dumps([listing, *values], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str | None, listing: str, *kinds: _Kind) -> tuple | None:
    """The position `cursor` holds for `listing`, typed as `kinds`; None for no cursor."""
    if not cursor:
        return None
    try:
        if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
            raise ValueError("too long or not ASCII")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        if not (isinstance(data, list) and data):
            raise ValueError("wrong shape")
        if data[0] != listing:
            raise HttpError(422, f"cursor belongs to another listing, not {listing}")
        if len(data) != 1 + len(kinds):
            raise ValueError("wrong shape")
        return tuple(_typed(value, kind) for value, kind in zip(data[1:], kinds, strict=True))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, RecursionError):
        raise HttpError(422, "cursor is not valid: pass back a next_cursor unchanged") from None


def _typed(value: Any, kind: _Kind) -> int | float | datetime:
    if kind is int:
        if type(value) is not int or not 0 <= value <= MAX_INT:
            raise ValueError(value)
        return value
    if kind is float:
        if type(value) not in (int, float) or not math.isfinite(value):
            raise ValueError(value)
        return float(value)
    if not isinstance(value, str) or len(value) > 40:
        raise ValueError(value)
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(value)
    return moment


def limit(default: int) -> Any:
    """The `limit` query parameter: never silently capped, a caller asking for more than
    the maximum gets a 422 that names it."""
    return Query(default, ge=1, le=MAX_PAGE, description=f"rows per page, 1 to {MAX_PAGE}")


def cursor() -> Any:
    return Query(
        None,
        max_length=MAX_CURSOR_CHARS,
        description="opaque: the `next_cursor` of the page before, passed back unchanged",
    )
