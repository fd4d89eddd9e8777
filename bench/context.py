"""Context-assembly latency for sessions of 1,000, 10,000 and 100,000 stored messages.

On PostgreSQL. Each session is filled through the ingest path (`append_turn`, turns of
1,000 messages of real-looking text), with 20 long-term memories, 10 working-context
items and 30 findings; then `assemble_context` (what GET /sessions/{key}/context runs)
is timed over repeated calls, with and without a query hint; then the same sessions'
`GET /sessions/{key}/context` from a real server (gunicorn), as an agent asks for them.
Prints markdown tables.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memoryapp_bench \\
        .venv/bin/python bench/context.py [--runs 50]

The database is created when missing and migrated; the bench agent is deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    TEXTS,
    cpu_check,
    percentile,
    postgres_url,
    server_env,
    start_gunicorn,
    vacuum_analyze,
)


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp context-assembly benchmark")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    if postgres_url("bench/context.py") is None:
        return 2
    os.environ.update(server_env())  # as in production: DEBUG off
    import django

    django.setup()
    from django.core.management import call_command

    from memoryapp.core.context import assemble_context
    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
    from memoryapp.core.models import Agent, ContextItem, Finding, Memory, Session

    call_command("migrate", verbosity=0)
    vacuum_analyze()
    agent = Agent.objects.create(name=f"bench-context-{secrets.token_hex(4)}")
    try:
        for i in range(20):
            Memory.objects.create(
                agent=agent,
                content=f"Convention {i}: the parser module keeps tokens immutable ({i}).",
                confidence=0.5 + i / 40,
            )
        print(
            f"{args.runs} calls per row; agent token_budget {agent.token_budget}, "
            f"max_messages {agent.max_messages}; PostgreSQL"
        )
        print(cpu_check())
        print()
        print(
            "| stored messages | query hint | p50 ms | p99 ms | messages returned | total tokens |"
        )
        print("|---:|:---|---:|---:|---:|---:|")
        sizes = [int(s) for s in args.sizes.split(",")]
        for size in sizes:
            key = f"ctx-{size}"
            for start in range(0, size, 1000):
                count = min(1000, size - start)
                messages = [
                    MessageInput(
                        "user" if (start + j) % 2 == 0 else "assistant",
                        TEXTS[(start + j) % len(TEXTS)],
                    )
                    for j in range(count)
                ]
                append_turn(agent, key, TurnInput(messages))
            session = Session.objects.get(agent=agent, key=key)
            for i in range(10):
                ContextItem.objects.create(session=session, key=f"item_{i}", value=f"value {i}")
            for i in range(30):
                Finding.objects.create(
                    session=session, tool="grep", query=f"symbol{i}", fact=f"{i} matches in src/"
                )
            vacuum_analyze()  # autovacuum's analyze after a fill of this size
            for hint in ("", "parser tokens"):
                # Warm: caches, and the summary of the pruned history, which a first call
                # rolls forward 5,000 messages at a time until it has caught up.
                for _ in range(100):
                    covered = session.summary_through_seq
                    assemble_context(session, query_hint=hint)
                    if session.summary_through_seq == covered:
                        break
                timings = []
                for _ in range(args.runs):
                    started = time.perf_counter()
                    body = assemble_context(session, query_hint=hint)
                    timings.append(time.perf_counter() - started)
                print(
                    f"| {size:,} | {'yes' if hint else 'no'} | "
                    f"{statistics.median(timings) * 1000:.1f} | "
                    f"{percentile(timings, 0.99) * 1000:.1f} | {len(body['conversation'])} | "
                    f"{body['token_counts']['total']:,} |",
                    flush=True,
                )
        print()
        print(over_http(agent, sizes, args.runs))
        print()
        print(cpu_check())
    finally:
        agent.delete()
    return 0


def over_http(agent, sizes: list[int], runs: int) -> str:
    """GET /sessions/{key}/context at the default budget from a real server (gunicorn,
    2 workers x 4 threads), one client: the same sessions, as an agent asks for them."""
    import httpx

    from memoryapp.core.models import ApiKey

    _, raw = ApiKey.issue(agent, name="bench-context")
    env = server_env()
    server, base_url = start_gunicorn(env, 2, 4)
    lines = [
        f"Over HTTP (gunicorn 2 workers x 4 threads, one client, {runs} requests per row):",
        "",
        "| stored messages | query hint | p50 ms | p99 ms |",
        "|---:|:---|---:|---:|",
    ]
    try:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {raw}"}) as http:
            for size in sizes:
                for hint in ("", "parser tokens"):
                    params = {"query_hint": hint} if hint else {}
                    path = f"/api/v1/sessions/ctx-{size}/context"
                    for _ in range(10):
                        http.get(path, params=params).raise_for_status()
                    timings = []
                    for _ in range(runs):
                        started = time.perf_counter()
                        http.get(path, params=params).raise_for_status()
                        timings.append(time.perf_counter() - started)
                    lines.append(
                        f"| {size:,} | {'yes' if hint else 'no'} | "
                        f"{statistics.median(timings) * 1000:.1f} | "
                        f"{percentile(timings, 0.99) * 1000:.1f} |"
                    )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
