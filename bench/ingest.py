"""Ingest benchmark: concurrent clients appending turns to a real server on PostgreSQL.

Starts gunicorn (not the dev server) on PostgreSQL, creates an agent, and for sessions
of 20 and of 2,000 stored messages runs 1, 8 and 32 concurrent clients, each appending
turns of 2 messages (user + assistant, real text) to its own session for a fixed time.
Prints turns/s, messages/s and p50/p99 latency per scenario as a markdown table, after
an untimed 3-second warm-up of 32 clients. Each scenario is timed once its sessions are
filled and the server and worker are idle (bench.common.settle).
With REDIS_URL set (production), each turn's extraction job goes to Redis and one Celery
worker process runs it beside the server, as in production.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memoryapp_bench \\
    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/ingest.py [--seconds 10]

The database is created when missing and migrated; the bench agent and its sessions
are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    cpu_check,
    percentile,
    postgres_url,
    production_server,
    settle,
)

USER_TEXT = (
    "We're currently solving the following issue within our repository. The test "
    "`tests/missing_colon.py` fails with SyntaxError: invalid syntax on line 4. "
    "Please find the cause and fix it."
)
ASSISTANT_TEXT = (
    "The `SyntaxError` in `missing_colon.py` is likely due to a missing colon at the end "
    "of the function definition line. Let's open the file and add it.\n\n```\nopen "
    "tests/missing_colon.py\n```"
)


async def prefill(client: httpx.AsyncClient, key: str, size: int) -> None:
    per_turn = 100
    for start in range(0, size, per_turn):
        count = min(per_turn, size - start)
        messages = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": USER_TEXT}
            for i in range(count)
        ]
        response = await client.post(f"/sessions/{key}/turns", json={"messages": messages})
        response.raise_for_status()


async def scenario(base_url: str, api_key: str, clients: int, size: int, seconds: float):
    headers = {"Authorization": f"Bearer {api_key}"}
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(
        base_url=base_url + "/api/v1", headers=headers, timeout=60, limits=limits
    ) as client:
        run = secrets.token_hex(4)
        keys = [f"bench-{size}-{clients}-{run}-{i}" for i in range(clients)]
        await asyncio.gather(*(prefill(client, key, size) for key in keys))
        # The worker extracts the prefill's turns, and the scenario before left it a
        # backlog (8 and 32 clients append faster than one worker extracts): each
        # scenario starts with it idle, so that it measures itself.
        await settle()
        latencies: list[float] = []
        errors = 0
        deadline = time.perf_counter() + seconds

        async def worker(key: str) -> None:
            nonlocal errors
            body = {
                "messages": [
                    {"role": "user", "content": USER_TEXT},
                    {"role": "assistant", "content": ASSISTANT_TEXT},
                ],
                "usage": {"input_tokens": 812, "output_tokens": 64},
            }
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    response = await client.post(f"/sessions/{key}/turns", json=body)
                except httpx.TransportError:
                    # gunicorn closed a kept-alive connection as a request went out on it
                    # (seen with 32 clients on 2 saturated cores): an error, not a crash.
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - started)
                if response.status_code != 201:
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker(key) for key in keys))
        elapsed = time.perf_counter() - began
    turns = len(latencies)
    return {
        "size": size,
        "clients": clients,
        "turns_per_s": turns / elapsed,
        "messages_per_s": 2 * turns / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "errors": errors,
        "turns": turns,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp ingest benchmark")
    parser.add_argument("--seconds", type=float, default=10.0, help="per scenario")
    parser.add_argument("--workers", type=int, default=(os.cpu_count() or 1) * 2)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    if postgres_url("bench/ingest.py") is None:
        return 2
    with production_server("bench", args.workers, args.threads) as (base_url, api_key, broker):
        print(
            f"gunicorn: {args.workers} workers x {args.threads} threads; {os.cpu_count()} cores; "
            f"{args.seconds:.0f} s per scenario; PostgreSQL; {broker}"
        )
        print(cpu_check())
        print()
        print("| stored messages | clients | turns/s | messages/s | p50 ms | p99 ms | errors |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        # Untimed: every worker process and thread connects and loads what it loads once
        # (the tokenizer, the API's schemas) before the first timed scenario.
        asyncio.run(scenario(base_url, api_key, 32, 20, 3.0))
        for size in (20, 2000):
            for clients in (1, 8, 32):
                r = asyncio.run(scenario(base_url, api_key, clients, size, args.seconds))
                print(
                    f"| {r['size']:,} | {r['clients']} | {r['turns_per_s']:.0f} | "
                    f"{r['messages_per_s']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                    f"{r['errors']} |",
                    flush=True,
                )
        print()
        print(cpu_check())
    return 0


if __name__ == "__main__":
    sys.exit(main())
