"""`agents.client.MemoryClient` of this process's own API, for the client commands: the
client over memoryapp/api/inprocess.py's transport, with a key issued for the run."""

from __future__ import annotations

from typing import Any

from agents.client import MemoryClient
from memoryapp.api import inprocess


def client(raw_key: str, **options: Any) -> MemoryClient:
    """A client of this process's API with `raw_key` (options: MemoryClient's)."""
    connection = inprocess.connection()
    return MemoryClient(
        connection.url,
        raw_key,
        transport=connection.transport,
        headers=connection.headers,
        **options,
    )
