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
                logger.warning(
                    "rate limits off for %ss, the cache failed: %s", CACHE_BACKOFF_SECONDS, exc
                )
                _cache_backoff.failed()
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


@_fail_open((None, None, None))
def hit_and_check(
    scope: str,
    who: str,
    limit: Limit,
    *,
    check: tuple[str, Limit] | None = None,
    also: Counted | None = None,
    now: float | None = None,
) -> tuple[int | None, int | None, int | None]:
    """Count one request of `who` in `scope` and read, in the same round trip to the
    cache, whether `who` is at its limit in the scope `check` names (not counted
    there); `also` is counted in that round trip too (the request's API key, by its
    hash, before the key is looked up). Answers (seconds until the blocking window ends
    or None, seconds until this window ends when over `limit` or None, the same for
    `also`)."""
    now = time.time() if now is None else now
    read = None
    if check is not None and check[1].count > 0:
        read = _name(check[0], who, check[1], now)
    wanted = [(scope, who, limit)] + ([also] if also is not None else [])
    counted = [(_name(s, w, lim, now), lim.seconds + 1) for s, w, lim in wanted if lim.count > 0]
    if read is None and not counted:
        return None, None, None
    read_value, counts = _counters().read_and_count(read, counted)
    refused_by = None
    if read is not None and read_value >= check[1].count:
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


class _CacheCounters:
    """Counters in any Django cache (process memory in the embedded setup): an add,
    then an increment."""

    def read_and_count(self, read: str | None, counted: list[tuple[str, int]]):
        value = int(cache.get(read, 0)) if read else 0
        return value, [_count(name, timeout=timeout) for name, timeout in counted]


class _RedisCounters:
    """Counters in Redis, one round trip per request: GET of the counter read, and for
    each counter counted SET NX with the window's expiry then INCR (SET NX EX, not
    EXPIRE NX: Redis 6 has no EXPIRE NX). One client for the process, made once
    (Django's cache makes one per command). The values are plain integers, which the
    cache's own get() reads back."""

    def __init__(self) -> None:
        self.client = cache._cache.get_client(None, write=True)

    def read_and_count(self, read: str | None, counted: list[tuple[str, int]]):
        pipe = self.client.pipeline(transaction=False)
        if read:
            pipe.get(cache.make_and_validate_key(read))
        for name, timeout in counted:
            key = cache.make_and_validate_key(name)
            pipe.set(key, 0, ex=timeout, nx=True)
            pipe.incr(key)
        results = pipe.execute()
        value = int(results[0] or 0) if read else 0
        increments = results[1:] if read else results
        return value, [int(n) for n in increments[1::2]]


_counter_store: _CacheCounters | _RedisCounters | None = None


def _counters() -> _CacheCounters | _RedisCounters:
    global _counter_store
    if _counter_store is None:
        from django.core.cache import caches
        from django.core.cache.backends.redis import RedisCache

        redis = isinstance(caches["default"], RedisCache)
        _counter_store = _RedisCounters() if redis else _CacheCounters()
    return _counter_store


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
