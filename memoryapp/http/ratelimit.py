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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

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
    seconds until the window ends (fails open as hit_and_check does)."""
    return hit_and_check(scope, who, limit, now=now)[1]


Counted = tuple[str, str, Limit]  # (scope, who, limit)

# hit_and_check's answer: (refused by `check`, over `limit`, `also` over its limit), each
# the seconds until its window ends, or None.
Answer = tuple[int | None, int | None, int | None]
_NOTHING: Answer = (None, None, None)


def _failed(exc: Exception) -> None:
    logger.warning("rate limits off for %ss, the cache failed: %s", CACHE_BACKOFF_SECONDS, exc)
    _cache_backoff.failed()


def hit_and_check(
    scope: str,
    who: str,
    limit: Limit,
    *,
    check: tuple[str, Limit] | None = None,
    also: Counted | None = None,
    now: float | None = None,
) -> Answer:
    """Count one request of `who` in `scope` and read, in the same round trip to the
    cache, whether `who` is at its limit in the scope `check` names (not counted
    there). `also` is counted in that round trip too, only when the request is not
    refused by `check` or `limit` (the request's API key, by its token's hash, before
    the key is looked up: a refused request creates no counter). The answer: (seconds
    until the blocking window ends or None, seconds until this window ends when over
    `limit` or None, the same for `also`). Fails open: a cache that fails answers that
    nothing is over."""
    now = time.time() if now is None else now
    read = None
    if check is not None and check[1].count > 0:
        read = (_name(check[0], who, check[1], now), check[1].count)
    wanted = [(scope, who, limit)] + ([also] if also is not None else [])
    counted = [
        (_name(s, w, lim, now), lim.seconds + 1, lim.count, i > 0)
        for i, (s, w, lim) in enumerate(wanted)
        if lim.count > 0
    ]
    if (read is None and not counted) or _cache_backoff.waiting():
        return _NOTHING
    try:
        read_value, counts = _counters().read_and_count(read, counted)
    except Exception as exc:  # the cache's client raises its own connection errors
        _failed(exc)
        return _NOTHING
    refused_by = None
    if read is not None and read_value >= read[1]:
        refused_by = max(1, _window(check[1], now)[1])
    overs: list[int | None] = []
    for _, _, lim in wanted:
        over = None
        if lim.count > 0 and counts.pop(0) > lim.count:
            over = max(1, _window(lim, now)[1])
        overs.append(over)
    return refused_by, overs[0], (overs[1] if also is not None else None)


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
    """Counters in Redis, one round trip per request: a script, which redis-py sends by
    its digest and sends whole when Redis does not have it (a restart, SCRIPT FLUSH).
    One client for the process, made once (Django's cache makes one per command). The
    values are plain integers, which the cache's own get() reads back."""

    def __init__(self) -> None:
        self.client = cache._cache.get_client(None, write=True)
        self.script = self.client.register_script(_READ_AND_COUNT)

    def read_and_count(self, read: Read, counted: Counters) -> tuple[int, list[int]]:
        keys = [cache.make_and_validate_key(read[0]) if read else ""]
        args: list[int] = [read[1] if read else 0]
        for name, timeout, limit, conditional in counted:
            keys.append(cache.make_and_validate_key(name))
            args += [timeout, limit, int(conditional)]
        value, *counts = self.script(keys=keys, args=args)
        return int(value), [int(n) for n in counts]


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
