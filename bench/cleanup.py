"""TTL cleanup benchmark: our batched cleanup against a naive queryset delete.

On PostgreSQL. Generates expired sessions holding at least 1,000,000 messages (default
1,000 sessions x 1,000 messages, each session with 50 turns, 50 tool calls with pending
outputs, 50 extraction jobs, 10 findings, 5 working-context items, 3 subtasks and a
long-term memory), removes them once with `memoryapp.core.cleanup.run_cleanup` and once,
on identical freshly generated data, with `Session.objects.filter(expired).delete()`
(Django's cascade collector). While each runs, 8 clients append turns to live sessions of
a real gunicorn server; their p99 latency is reported beside the rows/s, and first, for
comparison, the same clients' latency over 10 seconds with no cleanup running, on the same
generated data. The generated rows are checkpointed to disk before anything is timed (a
production database wrote its expired rows long before they expire).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memoryapp_bench \\
        .venv/bin/python bench/cleanup.py [--sessions 1000] [--messages 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile, postgres_url, server_env, start_gunicorn  # noqa: E402

TURNS = 50
IDLE_SECONDS = 10.0


def generate(cursor, agent_id: int, sessions: int, messages: int, tag: str) -> None:
    """Expired sessions and everything under them, written with set-based SQL."""
    per_turn = max(1, messages // TURNS)
    cursor.execute(
        """
        INSERT INTO core_session (agent_id, key, goal, status, metadata, created_at,
            last_activity_at, expires_at, message_count, token_count, input_tokens,
            output_tokens, turn_count, summary, summary_error, summary_through_seq)
        SELECT %s, %s || g, 'bench', 'active', '{}', now(), now() - interval '2 hours',
            now() - interval '1 hour', %s, %s * 20, 0, 0, %s, '', '', 0
        FROM generate_series(1, %s) g
        """,
        [agent_id, f"{tag}-", messages, messages, TURNS, sessions],
    )
    cursor.execute(
        """
        INSERT INTO core_turn (session_id, iteration, message_count, input_tokens,
            output_tokens, tool_call_count, usage_source, model, first_seq, last_seq, timestamp)
        SELECT s.id, t, %s, 800, 60, 1, 'reported', 'bench', (t - 1) * %s + 1, t * %s, now()
        FROM core_session s, generate_series(1, %s) t
        WHERE s.agent_id = %s AND s.key LIKE %s
        """,
        [per_turn, per_turn, per_turn, TURNS, agent_id, f"{tag}-%"],
    )
    cursor.execute(
        """
        INSERT INTO core_message (session_id, turn_id, seq, role, content, name, tool_call_id,
            token_count, created_at, client_id)
        SELECT t.session_id, t.id, t.first_seq + m - 1,
            CASE WHEN m %% 2 = 0 THEN 'assistant' ELSE 'user' END,
            'Let''s open the file and look at the function that parses the header.',
            '', '', 20, now(), ''
        FROM core_turn t JOIN core_session s ON s.id = t.session_id,
            generate_series(1, %s) m
        WHERE s.agent_id = %s AND s.key LIKE %s
        """,
        [per_turn, agent_id, f"{tag}-%"],
    )
    cursor.execute(
        """
        INSERT INTO core_toolcall (turn_id, session_id, tool, query, success, output_size,
            output_excerpt, file_path, created_at, call_id, kind, fact, skipped)
        SELECT t.id, t.session_id, 'grep', 'VectorStore', true, 4000, repeat('x', 200), '', now(),
            'call_' || t.iteration, 'search', '3 matches', false
        FROM core_turn t JOIN core_session s ON s.id = t.session_id
        WHERE s.agent_id = %s AND s.key LIKE %s
        """,
        [agent_id, f"{tag}-%"],
    )
    cursor.execute(
        """
        INSERT INTO core_pendingtooloutput (tool_call_id, output)
        SELECT c.id, repeat('y', 500)
        FROM core_toolcall c JOIN core_session s ON s.id = c.session_id
        WHERE s.agent_id = %s AND s.key LIKE %s
        """,
        [agent_id, f"{tag}-%"],
    )
    cursor.execute(
        """
        INSERT INTO core_extractionjob (turn_id, session_id, status, attempts, last_error,
            findings_added, context_items_set, created_at)
        SELECT t.id, t.session_id, 'done', 1, '', 1, 0, now()
        FROM core_turn t JOIN core_session s ON s.id = t.session_id
        WHERE s.agent_id = %s AND s.key LIKE %s
        """,
        [agent_id, f"{tag}-%"],
    )
    for table, columns, values, count in (
        ("core_finding",
         "tool, query, fact, success, file_path, source, created_at, updated_at, identity, kind",
         "'grep', 'q' || g, '3 matches', true, '', 'extracted', now(), now(), md5('q' || g), "
         "'search'", 10),
        ("core_contextitem", "key, value, source, confidence, created_at, updated_at, evidence",
         "'item_' || g, '\"v\"', 'inferred', 0.6, now(), now(), '[]'", 5),
        ("core_subtask", "title, status, position, created_at, updated_at",
         "'task ' || g, 'pending', g, now(), now()", 3),
    ):  # fmt: skip
        cursor.execute(
            f"""
            INSERT INTO {table} (session_id, {columns})
            SELECT s.id, {values} FROM core_session s, generate_series(1, %s) g
            WHERE s.agent_id = %s AND s.key LIKE %s
            """,
            [count, agent_id, f"{tag}-%"],
        )
    cursor.execute(
        """
        INSERT INTO core_memory (agent_id, session_id, memory_type, content, content_key,
            confidence, status, source, created_at, updated_at, access_count)
        SELECT s.agent_id, s.id, 'fact', 'learned in ' || s.key, md5(s.key), 0.8, 'active',
            'agent', now(), now(), 0
        FROM core_session s WHERE s.agent_id = %s AND s.key LIKE %s
        """,
        [agent_id, f"{tag}-%"],
    )
    cursor.execute("ANALYZE")


def ingest_during(
    base_url: str, api_key: str, stop: threading.Event, latencies: list, errors: list
) -> None:
    async def client(i: int) -> None:
        async with httpx.AsyncClient(
            base_url=base_url + "/api/v1",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=120,
        ) as http:
            body = {
                "messages": [
                    {"role": "user", "content": "Run the tests again."},
                    {"role": "assistant", "content": "All 42 tests pass now."},
                ]
            }
            while not stop.is_set():
                started = time.perf_counter()
                response = await http.post(f"/sessions/live-{i}/turns", json=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 201:
                    errors.append(response.status_code)

    async def main() -> None:
        await asyncio.gather(*(client(i) for i in range(8)))

    asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp TTL cleanup benchmark")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1000, help="per session")
    args = parser.parse_args()
    if postgres_url("bench/cleanup.py") is None:
        return 2
    env = server_env()
    env.pop("REDIS_URL", None)  # extraction runs in-process: the bench measures the database
    os.environ.update(env)
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from memoryapp.core.cleanup import run_cleanup
    from memoryapp.core.models import Agent, ApiKey, Session

    call_command("migrate", verbosity=0)
    agent = Agent.objects.create(name=f"bench-cleanup-{secrets.token_hex(4)}")
    live_agent = Agent.objects.create(name=f"bench-live-{secrets.token_hex(4)}")
    _, api_key = ApiKey.issue(live_agent)
    server, base_url = start_gunicorn(env, workers=2, threads=4)
    try:
        total_messages = args.sessions * args.messages
        print(
            f"{args.sessions:,} expired sessions x {args.messages:,} messages = "
            f"{total_messages:,} messages (+ turns, tool calls, pending outputs, jobs, "
            "findings, context items, subtasks, memories); 8 clients ingesting meanwhile; "
            "PostgreSQL, 2 cores shared by everything"
        )
        print()
        columns = ["method", "seconds", "rows removed", "rows/s", "messages/s"]
        print(
            "| " + " | ".join(columns + ["ingest p50 ms", "ingest p99 ms", "ingest errors"]) + " |"
        )
        print("|:---|---:|---:|---:|---:|---:|---:|---:|")
        for method in ("memoryapp cleanup (batched)", "naive queryset .delete()"):
            tag = secrets.token_hex(3)
            with connection.cursor() as cursor:
                generate(cursor, agent.pk, args.sessions, args.messages, tag)
                # Expired rows in production were written long before; the generator
                # writes them seconds before: flush them to disk now, or the checkpoint
                # PostgreSQL starts after a million inserts writes them during the run.
                cursor.execute("CHECKPOINT")
            if method.startswith("memoryapp"):
                # The same 8 clients with no cleanup running, on the same data: the p99
                # the target compares with.
                with ingesting(base_url, api_key) as (latencies, errors):
                    time.sleep(IDLE_SECONDS)
                print(
                    f"| ingest alone (no cleanup) | {IDLE_SECONDS:.1f} | – | – | – | "
                    f"{statistics.median(latencies) * 1000:.1f} | "
                    f"{percentile(latencies, 0.99) * 1000:.1f} | "
                    f"{len(errors)} of {len(latencies)} |",
                    flush=True,
                )
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT (SELECT count(*) FROM core_message m JOIN core_session s ON "
                    "s.id = m.session_id WHERE s.agent_id = %s)", [agent.pk]
                )  # fmt: skip
                messages_before = cursor.fetchone()[0]
            rows_before = _all_rows(connection, agent.pk)
            with ingesting(base_url, api_key) as (latencies, errors):
                started = time.perf_counter()
                if method.startswith("memoryapp"):
                    run = run_cleanup(triggered_by="bench")
                    assert run is not None and run.status == "done", run and run.error
                else:
                    Session.objects.filter(agent=agent, expires_at__lte=timezone.now()).delete()
                elapsed = time.perf_counter() - started
            rows_after = _all_rows(connection, agent.pk)
            removed = rows_before - rows_after
            assert not Session.objects.filter(agent=agent).exists()
            print(
                f"| {method} | {elapsed:.1f} | {removed:,} | {removed / elapsed:,.0f} | "
                f"{messages_before / elapsed:,.0f} | "
                f"{statistics.median(latencies) * 1000:.1f} | "
                f"{percentile(latencies, 0.99) * 1000:.1f} | {len(errors)} of {len(latencies)} |",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM core_memory WHERE agent_id IN (%s, %s)", [agent.pk, live_agent.pk]
            )
        Session.objects.filter(agent=live_agent).delete()
        agent.delete()
        live_agent.delete()
    return 0


@contextlib.contextmanager
def ingesting(base_url: str, api_key: str):
    """8 clients appending turns for as long as the block runs (counted from a second
    after they start); yields the lists their latencies and errors go to."""
    latencies: list[float] = []
    errors: list[int] = []
    stop = threading.Event()
    load = threading.Thread(target=ingest_during, args=(base_url, api_key, stop, latencies, errors))
    load.start()
    time.sleep(1.0)
    latencies.clear()
    try:
        yield latencies, errors
    finally:
        stop.set()
        load.join()


def _all_rows(connection, agent_id: int) -> int:
    tables = [
        "core_message", "core_turn", "core_toolcall", "core_extractionjob", "core_finding",
        "core_contextitem", "core_subtask",
    ]  # fmt: skip
    total = 0
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(
                f"SELECT count(*) FROM {table} x JOIN core_session s ON s.id = x.session_id "
                "WHERE s.agent_id = %s",
                [agent_id],
            )
            total += cursor.fetchone()[0]
        cursor.execute(
            """
            SELECT count(*) FROM core_pendingtooloutput p
            JOIN core_toolcall c ON c.id = p.tool_call_id
            JOIN core_session s ON s.id = c.session_id WHERE s.agent_id = %s
            """,
            [agent_id],
        )
        total += cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM core_session WHERE agent_id = %s", [agent_id])
        total += cursor.fetchone()[0]
    return total


if __name__ == "__main__":
    sys.exit(main())
