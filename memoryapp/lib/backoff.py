"""A service that just failed is not tried again for a few seconds (per process), so an
outage costs one failed connection, not one per request. Used for the broker (extraction
dispatch) and the cache (rate limits)."""

from __future__ import annotations

import threading
import time


class Backoff:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until = 0.0
        self._lock = threading.Lock()

    def waiting(self) -> bool:
        """Whether the service failed less than `seconds` ago: skip it."""
        return time.monotonic() < self._until

    def failed(self) -> None:
        with self._lock:
            self._until = time.monotonic() + self.seconds

    def reset(self) -> None:
        with self._lock:
            self._until = 0.0
