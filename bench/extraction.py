"""The extraction worker's cost per turn: what each turn's job costs the Celery worker
that runs it (CPU of the worker's processes), what Celery itself costs per job (the
same jobs delivered again, which the worker finds done and skips), and, in this
process, a job's CPU, wall time and statements.

On PostgreSQL with Redis, as in production: one worker as the other benchmarks start it
(prefork, concurrency 1). Turns are appended through the API in this process (Django's
test client: the real append, its job published to Redis after the answer), two kinds,
each to its own session: two messages (as bench/peer.py appends them) and two messages
with a tool call. Each session grows to `--turns` turns (past the default restore's 100
messages: the worker also rolls the summary ahead, as it does for a long session).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memoryapp_bench \\
    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/extraction.py [--turns 300]

The bench agent is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    TEXTS,
    bench_agent,
    cpu_check,
    cpu_seconds,
    postgres_url,
    server_env,
    start_worker,
)

WORKER = ("celery -A memoryapp",)
KINDS = {
    "two messages": lambda i: {
        "messages": [
            {"role": "user", "content": f"{TEXTS[0]} (step {i})"},
            {"role": "assistant", "content": f"{TEXTS[2]} (step {i})"},
        ]
    },
    "two messages, a tool call": lambda i: {
        "messages": [
            {"role": "user", "content": f"{TEXTS[0]} (step {i})"},
            {"role": "assistant", "content": f"{TEXTS[2]} (step {i})"},
        ],
        "tool_calls": [
            {"tool": "bash", "query": "pytest -q tests/test_parser.py", "output": TEXTS[3]}
        ],
    },
}


def wait_idle(limit: float = 60.0) -> None:
    """Until the worker uses under a twentieth of a core over half a second."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        before = cpu_seconds(WORKER)
        time.sleep(0.5)
        if cpu_seconds(WORKER) - before < 0.025:
            return


def wait_done(job_ids: list[int], limit: float = 120.0) -> None:
    from memoryapp.core.models import ExtractionJob

    began = time.monotonic()
    while ExtractionJob.objects.filter(pk__in=job_ids, status="done").count() < len(job_ids):
        if time.monotonic() - began > limit:
            raise RuntimeError("the worker did not finish the jobs")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    if postgres_url("bench/extraction.py") is None:
        return 2
    if not os.environ.get("REDIS_URL"):
        print("bench/extraction.py measures the Celery worker: set REDIS_URL", file=sys.stderr)
        return 2
    env = server_env()
    env["ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    os.environ.update(env)
    agent, key = bench_agent("bench-extraction")
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from memoryapp import celery_app
    from memoryapp.core import workers
    from memoryapp.core.models import ExtractionJob
    from memoryapp.core.tasks import extract_turn

    client = Client()
    headers = {"Authorization": f"Bearer {key}"}

    def append(session: str, body: dict) -> int:
        answer = client.post(
            f"/api/v1/sessions/{session}/turns",
            json.dumps(body),
            content_type="application/json",
            headers=headers,
        )
        assert answer.status_code == 201, answer.content
        return (
            ExtractionJob.objects.filter(session__key=session, session__agent=agent).latest("id").pk
        )

    print(cpu_check())
    worker = start_worker(env)
    rows = []
    try:
        time.sleep(3)
        wait_idle()
        for kind, make in KINDS.items():
            session = f"extraction-{secrets.token_hex(4)}"
            warm = [append(session, make(i)) for i in range(10)]
            wait_done(warm)
            wait_idle()
            before = cpu_seconds(WORKER)
            jobs = []
            for i in range(10, 10 + args.turns):
                jobs.append(append(session, make(i)))
                time.sleep(0.005)
            wait_done(jobs)
            wait_idle()
            per_job = (cpu_seconds(WORKER) - before) / len(jobs)
            # The same jobs delivered again: the worker finds each done and skips it.
            before = cpu_seconds(WORKER)
            for job_id in jobs:
                extract_turn.apply_async((job_id,), retry=False)
                time.sleep(0.002)
            time.sleep(1)
            wait_idle()
            skipped = (cpu_seconds(WORKER) - before) / len(jobs)
            rows.append([kind, per_job, skipped, session, make])
    finally:
        worker.terminate()
        worker.wait(timeout=30)

    # In this process, the worker stopped: the jobs of 50 more turns of each session.
    for row in rows:
        kind, _, _, session, make = row
        jobs = [append(session, make(10 + args.turns + i)) for i in range(51)]
        with CaptureQueriesContext(connection) as queries:
            assert workers.run_extraction(jobs[0]) == "done"
        cpu, wall = time.process_time(), time.perf_counter()
        for job_id in jobs[1:]:
            assert workers.run_extraction(job_id) == "done"
        cpu = (time.process_time() - cpu) / 50
        wall = (time.perf_counter() - wall) / 50
        row[3:] = [cpu, wall, len(queries.captured_queries)]
    celery_app.control.purge()  # the jobs sent while no worker ran (run above)
    print(cpu_check())
    agent.delete()

    print(
        f"\nOne Celery worker (prefork, concurrency 1), {args.turns} turns per row, each "
        "session grown past the default restore; CPU of the worker's processes per job, "
        "and per job delivered again and skipped (Celery's own cost and the job's lock); "
        "then in this process, 50 jobs per row.\n"
    )
    print(
        "| turn | worker CPU per job ms | worker CPU per skipped job ms "
        "| in process CPU ms | in process wall ms | statements |"
    )
    print("|:--|---:|---:|---:|---:|---:|")
    for kind, per_job, skipped, cpu, wall, statements in rows:
        print(
            f"| {kind} | {per_job * 1000:.2f} | {skipped * 1000:.2f} | {cpu * 1000:.2f} "
            f"| {wall * 1000:.2f} | {statements} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
