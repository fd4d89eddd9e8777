"""Fixed-window rate limits over Django's cache: per API key, per client address, for
failed authentications per address, and for failed logins per user name and address.

A window is `seconds` long; the first hit in a window creates its counter (expiring with
the window), later hits increment it. Over the limit, `hit` answers how many seconds until
the window ends (the `Retry-After`). The cache is Redis in production (shared by every
process) and process memory in the embedded setup (one process).

Limits fail open: when the cache cannot be reached (Redis down), requests are counted
against nothing and answered as usual, instead of every request failing with it; after a
failure the cache is not tried again for a few seconds, so an outage costs one failed
connection per process, not one per request.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import NoScriptError

from memoryapp.lib.backoff import Backoff

logger = logging.getLogger(__name__)

CACHE_BACKOFF_SECONDS = 5
_cache_backoff = Backoff(CACHE_BACKOFF_SECONDS)


def _fail_open(default: Any) -> Callable:
    """The wrapped function's answer, or `default` when the cache fails or failed just
    now (no limit applies, nothing is counted)."""

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if _cache_backoff.waiting():
                return default() if callable(default) else default
            try:
                return function(*args, **kwargs)
            except Exception as exc:  # the cache's client raises its own connection errors
                _failed(exc)
                return default() if callable(default) else default

        return guarded

    return decorate


def reset_cache_backoff() -> None:
    _cache_backoff.reset()
    _forget_quiet(None)  # a read in flight keeps nothing it read before the reset


# Counters this process read from Redis and found below their limit, with the moment
# (time.monotonic) until which that answer stands without a round trip. For a request
# that counts nothing in Redis (the key's and the address's limits off) the only thing
# to ask is whether its address is locked out for wrong keys: a round trip on every
# request, about 0.3 ms of each after an agent's pause here, for a counter that moves
# only when a key is wrong. Asked again after MEMORYAPP_LOCKOUT_RECHECK_MS, at once
# after this process counts that counter (a wrong key from the address), and at the
# next window (a counter's name names its window). A lockout counted by another process
# reaches this one within that time. Bounded: emptied when full.
# A read sent before this process counts (in another thread) must not write its answer
# after that count: every count moves _counts_seen, before it is sent and once it is
# answered, and a read writes its answer only when _counts_seen is still what it was
# when the read was sent (both under _quiet_lock).
_quiet: dict[str, float] = {}
_QUIET_LIMIT = 10_000
_quiet_lock = threading.Lock()
_counts_seen = 0


def _forget_quiet(names: list[str] | None) -> None:
    """Forget the kept answers of `names` (None: all of them), and move _counts_seen."""
    global _counts_seen
    with _quiet_lock:
        _counts_seen += 1
        if names is None:
            _quiet.clear()
        for name in names or ():
            _quiet.pop(name, None)


def _remember_quiet(name: str, seen: int, until: float) -> None:
    with _quiet_lock:
        if seen != _counts_seen:
            return
        if len(_quiet) >= _QUIET_LIMIT:
            _quiet.clear()
        _quiet[name] = until


@dataclass(frozen=True)
class Limit:
    count: int  # requests allowed per window; 0 turns the limit off
    seconds: int

    @classmethod
    def parse(cls, text: str) -> Limit:
        """ "600/60": 600 per 60 seconds; "0/60" or "off": no limit."""
        if text.strip().lower() == "off":
            return cls(0, 60)
        count, _, seconds = text.partition("/")
        return cls(int(count), int(seconds or 60))


def _window(limit: Limit, now: float) -> tuple[int, int]:
    start = int(now // limit.seconds) * limit.seconds
    return start, start + limit.seconds - int(now)


def hit(scope: str, who: str, limit: Limit, *, now: float | None = None) -> int | None:
    """Count one request of `who` in `scope`: None when within the limit, else the
    seconds until the window ends (fails open as start_hit_and_check does)."""
    return start_hit_and_check(scope, who, limit, now=now).answer()[1]


Counted = tuple[str, str, Limit]  # (scope, who, limit)


_NOTHING = (None, None, None)


class Pending:
    """A count sent to the cache whose answer is read later (`answer()`, once): the
    request's own work (the key's lookup in the database) runs while the cache answers."""

    def __init__(self, finish: Callable[[], tuple[int | None, int | None, int | None]]):
        self._finish = finish
        self._answer: tuple[int | None, int | None, int | None] | None = None

    @classmethod
    def known(cls, answer: tuple[int | None, int | None, int | None]) -> Pending:
        pending = cls(lambda: answer)
        pending._answer = answer
        return pending

    def answer(self) -> tuple[int | None, int | None, int | None]:
        if self._answer is None:
            # Read once, even when reading fails: the connection is back in its pool.
            self._answer = _NOTHING
            self._answer = self._finish()
        return self._answer


def _failed(exc: Exception) -> None:
    logger.warning("rate limits off for %ss, the cache failed: %s", CACHE_BACKOFF_SECONDS, exc)
    _cache_backoff.failed()


def start_hit_and_check(
    scope: str,
    who: str,
    limit: Limit,
    *,
    check: tuple[str, Limit] | None = None,
    also: Counted | None = None,
    now: float | None = None,
) -> Pending:
    """Count one request of `who` in `scope` and read, in the same round trip to the
    cache, whether `who` is at its limit in the scope `check` names (not counted
    there). `also` is counted in that round trip too, only when the request is not
    refused by `check` or `limit` (the request's API key, by its token's hash, before
    the key is looked up: a refused request creates no counter). Sent now, answered by
    the Pending's `answer()`: with Redis the script is on its way while the caller goes
    on; in process memory it is already answered. The answer: (seconds until the
    blocking window ends or None, seconds until this window ends when over `limit` or
    None, the same for `also`). Fails open as the rest: a cache that fails answers
    nothing is over."""
    now = time.time() if now is None else now
    read = None
    if check is not None and check[1].count > 0:
        read = (_name(check[0], who, check[1], now), check[1].count)
    wanted = [(scope, who, limit, False)] + ([(*also, True)] if also is not None else [])
    counted = [
        (_name(s, w, lim, now), lim.seconds + 1, lim.count, conditional)
        for s, w, lim, conditional in wanted
        if lim.count > 0
    ]
    if (read is None and not counted) or _cache_backoff.waiting():
        return Pending.known(_NOTHING)
    counted_names = [name for name, *_ in counted]
    if counted_names:
        _forget_quiet(counted_names)
    # Only a read (nothing counted) may be answered by this process's earlier one.
    recheck = settings.MEMORYAPP_LOCKOUT_RECHECK_MS / 1000 if not counted else 0
    sent_at, seen = time.monotonic(), _counts_seen
    if recheck > 0 and _quiet.get(read[0], 0.0) > sent_at:
        return Pending.known(_NOTHING)
    try:
        store = _counters()
        finish = store.start_read_and_count(read, counted)
    except Exception as exc:  # the cache's client raises its own connection errors
        _failed(exc)
        return Pending.known(_NOTHING)

    def answer() -> tuple[int | None, int | None, int | None]:
        try:
            read_value, counts = finish()
        except Exception as exc:
            _failed(exc)
            return _NOTHING
        finally:
            if counted_names:
                _forget_quiet(counted_names)
        refused_by = None
        if read is not None and read_value >= read[1]:
            refused_by = max(1, _window(check[1], now)[1])
        elif recheck > 0 and isinstance(store, _RedisCounters):
            _remember_quiet(read[0], seen, sent_at + recheck)
        overs: list[int | None] = []
        for _, _, lim, _ in wanted:
            over = None
            if lim.count > 0 and counts.pop(0) > lim.count:
                over = max(1, _window(lim, now)[1])
            overs.append(over)
        return refused_by, overs[0], (overs[1] if also is not None else None)

    return Pending(answer)


def _name(scope: str, who: str, limit: Limit, now: float) -> str:
    return f"rl:{scope}:{who}:{_window(limit, now)[0]}"


def _count(key: str, *, timeout: int) -> int:
    """Add one to a counter that expires `timeout` seconds after its first count."""
    if cache.add(key, 1, timeout=timeout):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=timeout)
        return 1


# read_and_count's arguments: the counter read with its limit, and the counters counted,
# each (name, timeout, limit, conditional): a conditional one is counted only while the
# read is below its limit and every counter before it within its own (else its count is 0).
Read = tuple[str, int] | None
Counters = list[tuple[str, int, int, bool]]


class _CacheCounters:
    """Counters in any Django cache (process memory in the embedded setup): an add,
    then an increment."""

    def read_and_count(self, read: Read, counted: Counters) -> tuple[int, list[int]]:
        value = int(cache.get(read[0], 0)) if read else 0
        within = read is None or value < read[1]
        counts = []
        for name, timeout, limit, conditional in counted:
            n = 0
            if within or not conditional:
                n = _count(name, timeout=timeout)
                within = within and n <= limit
            counts.append(n)
        return value, counts

    def start_read_and_count(
        self, read: Read, counted: Counters
    ) -> Callable[[], tuple[int, list[int]]]:
        """In process memory there is no round trip to overlap: counted now."""
        answer = self.read_and_count(read, counted)
        return lambda: answer


# _CacheCounters.read_and_count in Redis, as one script: KEYS the counter read ('' for
# none) then the counters; ARGV the read's limit, then each counter's timeout, limit and
# conditional (1/0). SET NX EX then INCR (not EXPIRE NX: Redis 6 has no EXPIRE NX).
_READ_AND_COUNT = """
local read = 0
if KEYS[1] ~= '' then read = tonumber(redis.call('GET', KEYS[1]) or '0') end
local within = KEYS[1] == '' or read < tonumber(ARGV[1])
local out = {read}
for i = 2, #KEYS do
  local base = 3 * (i - 2) + 1
  local n = 0
  if within or ARGV[base + 3] == '0' then
    redis.call('SET', KEYS[i], 0, 'EX', ARGV[base + 1], 'NX')
    n = redis.call('INCR', KEYS[i])
    within = within and n <= tonumber(ARGV[base + 2])
  end
  out[#out + 1] = n
end
return out
"""


class _RedisCounters:
    """Counters in Redis, one round trip per request (a script, sent by its digest once
    Redis has it). One client for the process, made once (Django's cache makes one per
    command). The values are plain integers, which the cache's own get() reads back."""

    def __init__(self) -> None:
        self.client = cache._cache.get_client(None, write=True)
        self.script = self.client.register_script(_READ_AND_COUNT)

    def start_read_and_count(
        self, read: Read, counted: Counters
    ) -> Callable[[], tuple[int, list[int]]]:
        """Send the script on a connection of the client's pool and answer a function
        that reads its reply and puts the connection back (call it exactly once): the
        caller's own round trips run while Redis answers. A script Redis does not have
        (a restart, SCRIPT FLUSH) is sent whole, and Redis keeps it."""
        keys = [cache.make_and_validate_key(read[0]) if read else ""]
        args: list[int] = [read[1] if read else 0]
        for name, timeout, limit, conditional in counted:
            keys.append(cache.make_and_validate_key(name))
            args += [timeout, limit, int(conditional)]
        pool = self.client.connection_pool
        connection = pool.get_connection()
        try:
            connection.send_command("EVALSHA", self.script.sha, len(keys), *keys, *args)
        except BaseException:
            connection.disconnect()
            pool.release(connection)
            raise

        def finish() -> tuple[int, list[int]]:
            try:
                try:
                    reply = connection.read_response()
                except NoScriptError:
                    connection.send_command("EVAL", self.script.script, len(keys), *keys, *args)
                    reply = connection.read_response()
            except BaseException:
                connection.disconnect()  # a reply half read must not reach the next user
                raise
            finally:
                pool.release(connection)
            value, *counts = reply
            return int(value), [int(n) for n in counts]

        return finish


_counter_store: _CacheCounters | _RedisCounters | None = None


def _counters() -> _CacheCounters | _RedisCounters:
    global _counter_store
    if _counter_store is None:
        from django.core.cache import caches
        from django.core.cache.backends.redis import RedisCache

        redis = isinstance(caches["default"], RedisCache)
        _counter_store = _RedisCounters() if redis else _CacheCounters()
    return _counter_store


@_fail_open(False)
def one_round_trip() -> bool:
    """Whether the counters live in another process (Redis), where counting more in one
    request's round trip saves a round trip."""
    return isinstance(_counters(), _RedisCounters)


@_fail_open(None)
def blocked(scope: str, who: str, limit: Limit, *, now: float | None = None) -> int | None:
    """Like `hit` without counting: is `who` over the limit in this window?"""
    if limit.count <= 0:
        return None
    now = time.time() if now is None else now
    start, left = _window(limit, now)
    count = cache.get(f"rl:{scope}:{who}:{start}", 0)
    return None if count < limit.count else max(1, left)


@_fail_open(None)
def reset(scope: str, who: str, limit: Limit, *, now: float | None = None) -> None:
    now = time.time() if now is None else now
    start, _ = _window(limit, now)
    cache.delete(f"rl:{scope}:{who}:{start}")


@_fail_open(None)
def note_refusal(key_id: int, *, now: float | None = None) -> None:
    """Count a 429 answered to an API key, per hour, for the dashboard."""
    hour = int((time.time() if now is None else now) // 3600)
    _count(f"rl:refused:{key_id}:{hour}", timeout=2 * 3600)


def recent_refusals(key_ids: list[int], *, now: float | None = None) -> dict[int, int]:
    """429s answered to each key in this hour and the one before."""
    hour = int((time.time() if now is None else now) // 3600)
    names = {f"rl:refused:{k}:{h}": k for k in key_ids for h in (hour, hour - 1)}
    found = _get_many(list(names))
    counts: dict[int, int] = {k: 0 for k in key_ids}
    for name, value in found.items():
        counts[names[name]] += int(value)
    return counts


_get_many = _fail_open(dict)(lambda names: cache.get_many(names))
