"""Dashboard render times for sessions of 1,000, 10,000 and 100,000 stored messages.

On PostgreSQL. Fills one session per size through the ingest path (turns of 1,000
messages, with tool calls, findings and context items), then times the server rendering
(Django's test client, in-process: no network, no browser) of the main pages: agents
overview, agent page, session page, a page of pruned messages, one live poll, memories.

After filling, the summary of pruned history is brought current, as the extraction worker
keeps it with a broker (otherwise each of the first views rolls it 5,000 messages further,
about 60 ms each), and the tables are vacuumed and analyzed, as autovacuum would do on a
server (this machine's PostgreSQL runs with autovacuum off): without statistics the
planner takes a 100,000-message session for a few rows and reads all of it for the newest
hundred, and each run's deleted rows stay in the tables for the next run to scan.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memoryapp_bench \\
        .venv/bin/python bench/dashboard.py [--runs 20] [--sizes 1000,100000] [--pages session]
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
    vacuum_analyze,
)


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp dashboard render benchmark")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument(
        "--pages", default="", help="only these pages, comma-separated (e.g. session,live poll)"
    )
    args = parser.parse_args()
    wanted = {p.strip() for p in args.pages.split(",") if p.strip()}
    if postgres_url("bench/dashboard.py") is None:
        return 2
    # As a production server runs (DEBUG off: no query log, no template debugging), with
    # the test client's host name; extraction in process.
    os.environ.update(server_env())
    os.environ.pop("REDIS_URL", None)
    os.environ["ALLOWED_HOSTS"] = "testserver"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from memoryapp.core.conversation import MessageInput, ToolCallInput, TurnInput, append_turn
    from memoryapp.core.models import Agent, ContextItem, Finding, Memory, Session
    from memoryapp.core.summaries import roll_summary_ahead
    from memoryapp.dashboard.models import Membership

    call_command("migrate", verbosity=0)
    agent = Agent.objects.create(name=f"bench-dash-{secrets.token_hex(4)}")
    user = get_user_model().objects.create_user(f"bench-{secrets.token_hex(4)}")
    Membership.objects.create(user=user, agent=agent, role="editor")
    client = Client()
    client.force_login(user)
    try:
        for i in range(30):
            Memory.objects.create(
                agent=agent,
                content=f"Convention {i}: tokens are immutable.",
                confidence=0.5 + i / 70,
            )
        print(f"{args.runs} renders per page; server-side only (Django test client); PostgreSQL")
        print(cpu_check())
        print()
        print("| stored messages | page | p50 ms | p99 ms | queries |")
        print("|---:|:---|---:|---:|---:|")
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        for size in (int(s) for s in args.sizes.split(",")):
            key = f"dash-{size}"
            for start in range(0, size, 1000):
                count = min(1000, size - start)
                messages = [
                    MessageInput(
                        "user" if (start + j) % 2 == 0 else "assistant", TEXTS[(start + j) % 4]
                    )
                    for j in range(count)
                ]
                calls = [ToolCallInput("grep", f"symbol{start}", "src/a.py:1: x", True)]
                append_turn(agent, key, TurnInput(messages, tool_calls=calls))
            session = Session.objects.get(agent=agent, key=key)
            # With a broker the extraction worker rolls the summary of pruned history
            # forward after each turn; in process nothing does, and the first twenty views
            # of the page would each roll it 5,000 messages further. Bring it current.
            while True:
                through = session.summary_through_seq
                roll_summary_ahead(session)
                session.refresh_from_db()
                if session.summary_through_seq == through:
                    break
            for i in range(10):
                ContextItem.objects.create(session=session, key=f"item_{i}", value=f"value {i}")
            for i in range(30):
                Finding.objects.create(
                    session=session, tool="grep", query=f"q{i}", fact=f"{i} matches", step=i + 1
                )
            vacuum_analyze()
            base = f"/agents/{agent.name}"
            pages = [
                ("agents overview", "/"),
                ("agent", f"{base}/"),
                ("session", f"{base}/sessions/{key}/"),
                ("pruned messages", f"{base}/sessions/{key}/older/?before={size // 2}"),
                ("live poll", f"{base}/sessions/{key}/live/?after_seq={size - 5}&after_finding=0"),
                ("memories", f"{base}/memories/"),
            ]
            for label, path in pages:
                if wanted and label not in wanted:
                    continue
                headers = {"HX-Request": "true"} if label == "live poll" else {}
                assert client.get(path, headers=headers).status_code == 200, path
                timings = []
                for _ in range(args.runs):
                    started = time.perf_counter()
                    client.get(path, headers=headers)
                    timings.append(time.perf_counter() - started)
                with CaptureQueriesContext(connection) as captured:
                    client.get(path, headers=headers)
                print(
                    f"| {size:,} | {label} | {statistics.median(timings) * 1000:.1f} | "
                    f"{percentile(timings, 0.99) * 1000:.1f} | {len(captured)} |",
                    flush=True,
                )
        print()
        print(cpu_check())
    finally:
        Session.objects.filter(agent=agent).delete()
        agent.delete()
        user.delete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
