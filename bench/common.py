"""Shared by the benchmarks: the PostgreSQL database, a real gunicorn server, percentiles."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent

# Real-looking agent text (from the SWE-agent demonstrations' style) for generated history.
TEXTS = [
    "Let's open the file and look at the function that parses the header before editing it.",
    "[File: src/parser.py (412 lines total)] 1: import re 2: from typing import Iterator",
    "The test failed with AssertionError: expected 3 tokens, got 4. The lexer splits on dots.",
    "Running pytest -q tests/test_parser.py: 12 passed, 1 failed in 0.84s",
]


def postgres_url(script: str) -> str | None:
    """DATABASE_URL when it names PostgreSQL, its database created if need be; None, after
    saying why on stderr, when it does not."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print(f"{script} measures PostgreSQL: set DATABASE_URL=postgres://...", file=sys.stderr)
        return None
    ensure_database(url)
    return url


def server_env() -> dict[str, str]:
    """This process's environment, set as a production server runs (DEBUG off)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryapp.settings",
        "DEBUG": "false",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        # Plain HTTP on loopback, on purpose: no redirect to HTTPS, no HSTS.
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "0",
        # Benchmarks send everything from one address with one key: limits too high to be
        # reached, still counted on every request as in production.
        "MEMORYAPP_RATE_LIMIT_KEY": "100000000/60",
        "MEMORYAPP_RATE_LIMIT_ADDRESS": "100000000/60",
    }


def ensure_database(url: str) -> None:
    """Create the benchmark's database when it does not exist yet."""
    import psycopg
    from psycopg import sql

    from memoryapp.lib.env import parse_database_url

    db = parse_database_url(url)
    params = {"host": db["HOST"], "port": db["PORT"] or None, "user": db["USER"] or None}
    if db["PASSWORD"]:
        params["password"] = db["PASSWORD"]
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]])
        if exists.fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))


def vacuum_analyze() -> None:
    """VACUUM ANALYZE the memory tables (every table of memoryapp.core's models) through
    Django's connection, as autovacuum would have by then in production. This machine's
    PostgreSQL runs with autovacuum off and every benchmark deletes its rows when it ends:
    without this, a run measured the dead rows of the runs before it (core_message held
    900,000 dead row versions after a day of runs) and planned with statistics from before
    its own sessions were filled."""
    from django.apps import apps
    from django.db import connection

    models = apps.get_app_config("core").get_models(include_auto_created=True)
    tables = sorted({model._meta.db_table for model in models})
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE " + ", ".join(map(connection.ops.quote_name, tables)))


def cpu_check() -> str:
    """How fast this shared machine ran just then: a fixed pure-Python loop's time. The
    same loop has taken 0.64 s and 1.06 s a minute apart here, and every figure of a run
    moves with it; the benchmarks print it before and after their measurements."""
    started = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return f"CPU check: 10,000,000 additions in {time.perf_counter() - started:.2f} s"


# memoryapp's own processes in a benchmark: the server and its extraction worker (matched
# against each process's command line).
MEMORYAPP_PATTERNS = ("memoryapp.wsgi", "celery -A memoryapp")


def cpu_seconds(patterns: tuple[str, ...]) -> float:
    """CPU seconds used so far by the processes whose command line holds a pattern (Linux's
    /proc; 0 elsewhere)."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if not any(p in command for p in patterns):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total


async def settle(patterns: tuple[str, ...] = MEMORYAPP_PATTERNS, limit: float = 60.0) -> float:
    """Wait until the processes matching `patterns` have finished the work an earlier step
    left them (memoryapp's worker extracts every turn after it is answered): until they
    use under a tenth of a core over a second, at most `limit` seconds. Answers the
    seconds waited."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        before = cpu_seconds(patterns)
        await asyncio.sleep(1.0)
        if cpu_seconds(patterns) - before < 0.1:
            break
    return time.monotonic() - began


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def start_gunicorn(
    env: dict, workers: int, threads: int, log: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """A real server on a free port, answering its health check; (process, base URL).
    With `log`, its output (the app's warnings and tracebacks) goes to that file."""
    port = free_port()
    out = open(log, "ab") if log else None
    try:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "memoryapp.wsgi", "--config", "gunicorn.conf.py",
             "--bind", f"127.0.0.1:{port}",
             "--workers", str(workers), "--threads", str(threads), "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=out, stderr=out,
        )  # fmt: skip
    finally:
        if out:
            out.close()  # the server has its own copy
    base_url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            if httpx.get(base_url + "/api/v1/health", timeout=1).status_code == 200:
                return server, base_url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.terminate()
    raise RuntimeError("gunicorn did not come up")


def start_worker(env: dict) -> subprocess.Popen | None:
    """One Celery worker (concurrency 1) beside the server when REDIS_URL is set, as in
    production; None without a broker (extraction runs in the request)."""
    if not env.get("REDIS_URL"):
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "memoryapp", "worker", "--concurrency", "1",
         "--loglevel", "warning", "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=env,
    )  # fmt: skip


def bench_agent(name: str):
    """Django set up in this process (its environment set by the caller: server_env),
    the database migrated and vacuumed, and an agent named `name-…` with a key: (the
    agent, its API key)."""
    import django

    django.setup()
    from django.core.management import call_command

    from memoryapp.core.models import Agent, ApiKey

    call_command("migrate", verbosity=0)
    vacuum_analyze()
    agent = Agent.objects.create(name=f"{name}-{secrets.token_hex(4)}")
    _, api_key = ApiKey.issue(agent, name="bench")
    return agent, api_key


@contextlib.contextmanager
def production_server(name: str, workers: int, threads: int):
    """memoryapp as in production, for a benchmark: Django set up as the server runs
    (server_env) and migrated, an agent named `name-…` with a key, gunicorn with `workers`
    x `threads` and, with REDIS_URL, one Celery worker. Yields (base URL, API key, where
    extraction runs); afterwards stops both and deletes the agent and its sessions."""
    env = server_env()
    os.environ.update(env)
    agent, api_key = bench_agent(name)
    server, base_url = start_gunicorn(env, workers, threads)
    worker = start_worker(env)
    try:
        yield base_url, api_key, "Redis + 1 Celery worker" if worker else "extraction in-process"
    finally:
        server.terminate()
        server.wait(timeout=30)
        if worker:
            worker.terminate()
            worker.wait(timeout=30)
        agent.delete()
