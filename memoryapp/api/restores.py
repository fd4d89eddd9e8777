"""This process's copy of each restored session's written messages, so that a restore
reads only the messages appended since the last one (PostgreSQL).

A restore read with its API key (api/auth._find_key, `GET …/history` of a session read
all at once) used to read every message in the key's statement: for 85 messages of 560
characters that read was half of the statement's 1.2 ms in process. With a copy of the
session's messages numbered up to N, the statement reads those after N and checks, in the
same snapshot, that the session's messages numbered up to N are still the copy's rows as
the copy read them: by the transaction that wrote each row's version (PostgreSQL's
`xmin`, ROW_VERSION_SQL), in seq order. Any change since is told so, whoever made it and
however: an edit or removal in place (an UPDATE writes a new version of the row, under
its own transaction), a message deleted (one fewer), one inserted again under its seq (a
cleared conversation refilled, the admin, a row written again under its own id: another
transaction's row), a session made again under the same key (another session id). A
copy also names the server's incarnation (INCARNATION_SQL), since a transaction's id
names one transaction only within it; and it is made and used only by a statement
outside any transaction (autocommit, as a server runs requests), so that every row it
holds was committed by another transaction.

When they differ the restore is answered the usual way, from a read after the key, and
the copy is dropped. A copy is only a copy: nothing is ever answered from it that the
same statement did not find still stored as it was.

Bounded by the bytes it takes, about (MEMORYAPP_RESTORE_COPY_BYTES per process, size_of):
the copies used longest ago go first, a session bigger than a quarter of the bound is
not copied, nor an empty one, and one that grew past what a restore reads with its key
is dropped. Copies are keyed by the API key's hash and the session's key (the statement
finds the session's row through them), and shared by a process's threads. The messages
are the answer's own dicts (answers.history_messages): no caller may change them
(tests/test_restore_copies.py holds a restore's answer to a copy untouched).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from django.conf import settings

# What tells one version of a message's row (of table alias m) from any other row's and
# any other version of it, between transactions: the transaction that wrote it (xmin; a
# frozen row keeps it, as VACUUM FULL and CLUSTER do). Read as its text, compared as
# PostgreSQL's own xid (a cast to a number cost the check about as much again). Within
# the transaction that wrote them a row's versions share it, and `cmin` does not tell
# them apart reliably (it is the row's raw command id field, which a deleter's command
# overwrites): a copy is neither kept nor used inside a transaction (auth._find_key).
ROW_VERSION_SQL = "m.xmin"
ROW_VERSION_WIDTH = 1

# The server's own life and its transaction ids' epoch: an xmin names one transaction
# only while both stay. A server restarted or replaced (a failover to a standby, a
# recovery to a point in time, a crash that lost commits made with synchronous_commit
# off) may hand out a lost transaction's id again, and 2**32 transactions later every
# id comes round again: a copy names the incarnation it was read in, and a statement in
# another reads the messages whole.
INCARNATION_SQL = (
    "CAST(pg_postmaster_start_time() AS text) || ' ' || "
    "CAST(txid_snapshot_xmin(txid_current_snapshot()) >> 32 AS text)"
)


@dataclass(frozen=True)
class Copy:
    """The written messages of session `session_id` numbered up to their count, read in
    the server's `incarnation` (INCARNATION_SQL), and the versions of their rows
    (ROW_VERSION_SQL's, in seq order) as the elements of a PostgreSQL array's text,
    `xmin,xmin…`: see versions_text."""

    session_id: int
    incarnation: str
    messages: tuple[dict[str, Any], ...]
    versions: str
    size: int  # bytes, about: size_of

    def params(self) -> tuple[list, str]:
        """The key statement's parameters that name this copy (auth._KeyStatement): its
        session, incarnation and count, and its rows' versions as an array's text (a
        text parameter, of one type whatever the numbers, for the prepared statement)."""
        return [self.session_id, self.incarnation, len(self.messages)], "{" + self.versions + "}"


# What a restore without a copy sends in their place: no session has id 0.
NO_COPY: tuple[list, str] = ([0, "", 0], "{}")


def versions_text(rows: list[tuple], at: int, before: str = "") -> str:
    """The versions of these rows (ROW_VERSION_SQL's column at `at` in each), after those
    of `before`, as Copy.versions writes them."""
    written = ",".join([str(r[at]) for r in rows])
    return f"{before},{written}" if before and written else before or written


# What a message costs a copy besides its texts: its dict, keys and numbers, its time's
# text, its id; and a parsed JSON value (tool calls, revisions) several times its text.
MESSAGE_BYTES = 1024
JSON_TIMES = 4


def size_of(rows: list[tuple]) -> int:
    """About how many bytes the copy of these rows (answers.HISTORY_MESSAGE_SQL's columns)
    takes: each message's content (a character, one byte or more), its JSON texts
    parsed (tool calls, revisions: JSON_TIMES their length) and MESSAGE_BYTES."""
    size = 0
    for r in rows:
        size += MESSAGE_BYTES + len(r[2]) + JSON_TIMES * (len(r[7] or "") + len(r[10] or ""))
    return size


class Copies:
    def __init__(self) -> None:
        self._copies: OrderedDict[tuple[str, str], Copy] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key_hash: str, session_key: str) -> Copy | None:
        """The copy for this key's session, if any (its place is kept by `keep` once it
        is used: a copy the restore cannot use grows no younger)."""
        with self._lock:
            return self._copies.get((key_hash, session_key))

    def keep(self, key_hash: str, session_key: str, copy: Copy) -> None:
        limit = settings.MEMORYAPP_RESTORE_COPY_BYTES
        with self._lock:
            self._drop((key_hash, session_key))
            if copy.size * 4 > limit:
                return
            self._copies[(key_hash, session_key)] = copy
            self._size += copy.size
            while self._size > limit:
                self._drop(next(iter(self._copies)))

    def drop(self, key_hash: str, session_key: str) -> None:
        with self._lock:
            self._drop((key_hash, session_key))

    def clear(self) -> None:
        with self._lock:
            self._copies.clear()
            self._size = 0

    def _drop(self, at: tuple[str, str]) -> None:
        old = self._copies.pop(at, None)
        if old is not None:
            self._size -= old.size

    def __len__(self) -> int:
        return len(self._copies)


COPIES = Copies()
