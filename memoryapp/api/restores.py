"""This process's copy of each restored session's written messages, so that a restore
reads only the messages appended since the last one (PostgreSQL).

A restore read with its API key (api/auth._find_key, `GET …/history` of a session read
all at once) used to read every message in the key's statement: for 85 messages of 560
characters that read was half of the statement's 1.2 ms in process. With a copy of the
session's messages numbered up to N, the statement reads those after N and checks that the
copy is still what is stored, in the same snapshot:

- an edit in place (UPDATE of a message row, by anyone) raises the session's
  `messages_version`, PostgreSQL's own count kept by a trigger (core migration 0014): the
  version must be the copy's;
- a message deleted, or inserted again under a seq up to N (a cleared conversation
  refilled, the admin), changes the count of the session's messages numbered up to N or
  their largest id (ids only grow): both must be the copy's;
- a session deleted and made again under the same key is another row (its id, and its
  creation time, against a test database whose ids start again).

When the check fails the restore is answered the usual way, from a read after the key,
and the copy is dropped. A copy is only a copy: nothing is ever answered from it that
the same statement did not find still stored.

Bounded by the characters of content and JSON text it holds (MEMORYAPP_RESTORE_COPY_CHARS
per process); the copies used longest ago go first, and a session bigger than a quarter
of the bound is not copied. Copies are keyed by the API key's hash and the session's key
(the statement finds the session's row through them), and shared by a process's threads.
The messages are the answer's own dicts (answers.history_messages): no caller may change
them (tests/test_restore_copies.py holds a restore's answer to a copy untouched).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class Copy:
    """The written messages numbered up to `count` (that many) of session `session_id` (created at
    `created_at`), as they were stored at `version`; `top` is their largest id."""

    session_id: int
    created_at: datetime
    version: int
    count: int
    top: int
    messages: tuple[dict[str, Any], ...]
    chars: int

    def params(self) -> list:
        """The key statement's parameters that name this copy (auth._KeyStatement)."""
        return [self.session_id, self.version, self.count]


# What a restore without a copy sends in their place: no session has id 0.
NO_COPY = [0, 0, 0]


def chars_of(messages: list[dict[str, Any]]) -> int:
    """What a copy of `messages` is counted as: their contents' characters, and a little
    for each message's other fields."""
    return sum(len(m["content"]) + 200 for m in messages)


class Copies:
    def __init__(self) -> None:
        self._copies: OrderedDict[tuple[str, str], Copy] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, key_hash: str, session_key: str) -> Copy | None:
        with self._lock:
            found = self._copies.get((key_hash, session_key))
            if found is not None:
                self._copies.move_to_end((key_hash, session_key))
            return found

    def keep(self, key_hash: str, session_key: str, copy: Copy) -> None:
        limit = settings.MEMORYAPP_RESTORE_COPY_CHARS
        with self._lock:
            self._drop((key_hash, session_key))
            if copy.chars * 4 > limit:
                return
            self._copies[(key_hash, session_key)] = copy
            self._chars += copy.chars
            while self._chars > limit:
                self._drop(next(iter(self._copies)))

    def drop(self, key_hash: str, session_key: str) -> None:
        with self._lock:
            self._drop((key_hash, session_key))

    def clear(self) -> None:
        with self._lock:
            self._copies.clear()
            self._chars = 0

    def _drop(self, at: tuple[str, str]) -> None:
        old = self._copies.pop(at, None)
        if old is not None:
            self._chars -= old.chars

    def __len__(self) -> int:
        return len(self._copies)


COPIES = Copies()
