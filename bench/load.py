"""Mixed load: many agents and dashboard viewers at once against a real server.

Starts gunicorn (4 workers x 4 threads) on PostgreSQL and one Celery worker on Redis, as
in production, then runs concurrent clients for a fixed time on loopback. Each client is
an agent with its own session (pre-filled with 10 turns) doing what agents and the people
watching them do, picked at random by weight: append a turn (two messages and two tool
calls, with an Idempotency-Key, retried with the same key on 503 or a connection error),
restore the pruned history, assemble the context, remember a fact, recall memories, ask
"already known?" before a tool call, and poll the dashboard's live view of its session
(logged in, as the page's htmx poller does, following the URL each answer gives). Prints
throughput, p50/p99 latency of answered requests per operation, the errors per operation
and status, and how far extraction got.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memoryapp_bench \\
    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/load.py --seconds 20 --clients 16

(`.venv/bin/python -m bench.load ...` is the same.) The database is created when missing
and migrated; the bench agent, its sessions and the dashboard user are deleted afterwards.
The workload itself (`Fixture`, `run_workload`, `Recorder`) is shared with bench/faults.py.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import html
import json
import os
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import TEXTS, percentile, postgres_url, server_env, start_gunicorn  # noqa: E402

# Operation names as printed, with the weight each has in a client's random choice.
OPERATIONS = {
    "append turn": 30,
    "history": 12,
    "context": 12,
    "remember": 8,
    "recall": 10,
    "findings check": 16,
    "dashboard live poll": 12,
}
# A person or a tool watching an agent's session: reads only, never an append.
OBSERVER_OPERATIONS = {
    op: weight for op, weight in OPERATIONS.items() if op not in ("append turn", "remember")
}
PREFILL_TURNS = 10
# A 503 says Retry-After 5; the clients retry after about a second instead (jittered),
# so that a fault's end shows in the figures when it happens.
RETRY_PAUSE_SECONDS = 1.0
# An append is given up (and counted unanswered) after retrying this long.
APPEND_GIVE_UP_SECONDS = 120.0
REQUEST_TIMEOUT_SECONDS = 30.0

MARKER = re.compile(r"^\[(m:[^\]]+)\]")
LIVE_URL = re.compile(r'id="live" hx-get="([^"]+)"')

USER_TEXT = (
    "The test `tests/test_parser.py::test_dots` fails with AssertionError: expected 3 "
    "tokens, got 4. Please find the cause in the lexer and fix it."
)
ASSISTANT_TEXT = (
    "The lexer splits on dots inside quoted names. Let's run the failing test again and "
    "read the tokenizer before editing it.\n\n```\npytest -q tests/test_parser.py\n```"
)
SOURCE = (
    "import re\nfrom typing import Iterator\n\n\ndef tokenize(text: str) -> Iterator[str]:\n"
    '    for part in re.split(r"\\.", text):\n        yield part\n\n\n'
    "def parse_header(line: str) -> dict[str, str]:\n    name, _, value = line.partition(':')\n"
    "    return {name.strip(): value.strip()}\n"
)
FACTS = [
    "The project's tests run with pytest -q from the repository root.",
    "The lexer lives in src/parser.py and splits names on dots.",
    "Quoted names may contain dots; the tokenizer must keep them whole.",
    "CI runs ruff check and ruff format --check before the tests.",
    "The header parser returns one dict per line.",
]
RECALL_QUERIES = ["pytest", "lexer dots", "tokenizer quoted names", "ruff format", "header"]


@dataclasses.dataclass
class Fixture:
    """What the clients need: the server, the agent's key, a logged-in dashboard cookie."""

    base_url: str
    agent_name: str
    api_key: str
    cookie: str  # "sessionid=..." for a user with a membership on the agent
    run: str  # marks this run's sessions and turns


@dataclasses.dataclass
class Sample:
    """One HTTP request: what was asked, what came back, when."""

    op: str
    status: int | str  # the HTTP status, or the transport error's name
    started: float  # wall clock (time.time), to place the request in a fault's window
    finished: float
    seconds: float
    json_body: bool  # the answer was a JSON document
    detail: str = ""  # the start of an error answer's body


@dataclasses.dataclass
class AppendOutcome:
    """One logical append (all its attempts): did the agent get its 201?"""

    marker: str
    idempotency_key: str
    started: float
    answered: bool = False
    final_status: int | str | None = None
    attempts: int = 0
    replayed: bool = False


class Recorder:
    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.appends: list[AppendOutcome] = []


class SimulatedAgent:
    """One client: an agent working in its own session, and a person watching it."""

    def __init__(
        self,
        fixture: Fixture,
        http: httpx.AsyncClient,
        index: int,
        seed: int,
        operations: dict[str, int] = OPERATIONS,
    ):
        self.fixture = fixture
        self.http = http
        self.index = index
        self.random = random.Random(seed)
        self.operations = operations
        self.key = f"load-{fixture.run}-{index}"
        self.turns = 0
        self.last_seq = 0
        self.live_url = (
            f"/agents/{fixture.agent_name}/sessions/{self.key}/live/?after_seq=0&after_finding=0"
        )
        self.auth = {"Authorization": f"Bearer {fixture.api_key}"}

    async def _send(
        self, recorder: Recorder, op: str, method: str, url: str, **kwargs
    ) -> httpx.Response | None:
        started, t0 = time.time(), time.perf_counter()
        try:
            response = await self.http.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            recorder.samples.append(
                Sample(op, type(exc).__name__, started, time.time(),
                       time.perf_counter() - t0, False, str(exc)[:200])
            )  # fmt: skip
            return None
        elapsed = time.perf_counter() - t0
        is_json = response.headers.get("content-type", "").startswith("application/json")
        if is_json:
            try:
                response.json()
            except ValueError:
                is_json = False
        detail = "" if response.status_code < 400 else response.text[:300]
        recorder.samples.append(
            Sample(op, response.status_code, started, time.time(), elapsed, is_json, detail)
        )
        return response

    def _api(self, path: str) -> str:
        return f"{self.fixture.base_url}/api/v1{path}"

    async def append_turn(self, recorder: Recorder, give_up_after: float) -> None:
        self.turns += 1
        n = self.turns
        marker = f"m:{self.fixture.run}:{self.index}:{n}"
        body = {
            "messages": [
                {"role": "user", "content": f"[{marker}] {USER_TEXT} {TEXTS[n % 4]}"},
                {"role": "assistant", "content": ASSISTANT_TEXT},
            ],
            "tool_calls": [
                {
                    "tool": "bash",
                    "query": f"pytest -q tests/test_parser_{n % 7}.py",
                    "output": "F...........\nFAILED tests/test_parser.py::test_dots - "
                    "AssertionError: expected 3 tokens, got 4\n1 failed, 12 passed in 0.84s",
                    "success": False,
                },
                {
                    "tool": "Read",
                    "query": {"file_path": f"src/parser_{n % 11}.py"},
                    "output": SOURCE,
                    "file_path": f"src/parser_{n % 11}.py",
                },
            ],
            "usage": {"input_tokens": 812 + 40 * n, "output_tokens": 64},
            "model": "bench-model",
        }
        # The same bytes on every retry: the server compares a hash of the body.
        content = json.dumps(body).encode()
        outcome = AppendOutcome(marker, uuid.uuid4().hex, time.time())
        recorder.appends.append(outcome)
        headers = {
            **self.auth,
            "Idempotency-Key": outcome.idempotency_key,
            "Content-Type": "application/json",
        }
        deadline = time.monotonic() + give_up_after
        while True:
            outcome.attempts += 1
            response = await self._send(
                recorder, "append turn", "POST", self._api(f"/sessions/{self.key}/turns"),
                content=content, headers=headers,
            )  # fmt: skip
            outcome.final_status = (
                response.status_code if response is not None else recorder.samples[-1].status
            )
            if response is not None and response.status_code == 201:
                outcome.answered = True
                outcome.replayed = response.headers.get("Idempotent-Replayed") == "true"
                self.last_seq = response.json()["last_seq"]
                return
            retryable = response is None or response.status_code == 503
            if not retryable or time.monotonic() >= deadline:
                return
            pause = RETRY_PAUSE_SECONDS
            if response is not None and response.headers.get("Retry-After", "").isdigit():
                pause = min(pause, int(response.headers["Retry-After"]))
            await asyncio.sleep(pause * (0.5 + self.random.random()))

    async def history(self, recorder: Recorder) -> None:
        await self._send(
            recorder, "history", "GET", self._api(f"/sessions/{self.key}/history"),
            params={"max_messages": 40}, headers=self.auth,
        )  # fmt: skip

    async def context(self, recorder: Recorder) -> None:
        await self._send(
            recorder, "context", "GET", self._api(f"/sessions/{self.key}/context"),
            params={"query_hint": "lexer dots"}, headers=self.auth,
        )  # fmt: skip

    async def remember(self, recorder: Recorder) -> None:
        # The same facts come back: most writes strengthen a memory (200), some create.
        fact = self.random.choice(FACTS)
        body = {"content": f"{fact} (agent {self.index})", "confidence": 0.6, "session": self.key}
        await self._send(
            recorder, "remember", "POST", self._api("/memories"), json=body, headers=self.auth
        )

    async def recall(self, recorder: Recorder) -> None:
        query = self.random.choice(RECALL_QUERIES)
        await self._send(
            recorder, "recall", "GET", self._api("/memories"),
            params={"query": query, "limit": 10}, headers=self.auth,
        )  # fmt: skip

    async def findings_check(self, recorder: Recorder) -> None:
        # Half of them calls the agent made before (known), half new ones.
        n = self.random.randrange(14)
        await self._send(
            recorder, "findings check", "GET",
            self._api(f"/sessions/{self.key}/findings/check"),
            params={"tool": "bash", "query": f"pytest -q tests/test_parser_{n}.py"},
            headers=self.auth,
        )  # fmt: skip

    async def live_poll(self, recorder: Recorder) -> None:
        response = await self._send(
            recorder, "dashboard live poll", "GET", self.fixture.base_url + self.live_url,
            headers={"Cookie": self.fixture.cookie, "HX-Request": "true"},
        )  # fmt: skip
        if response is not None and response.status_code == 200:
            found = LIVE_URL.search(response.text)
            if found:
                self.live_url = html.unescape(found.group(1))

    async def step(self, recorder: Recorder) -> None:
        ops = self.operations
        op = self.random.choices(list(ops), weights=list(ops.values()))[0]
        if op == "append turn":
            await self.append_turn(recorder, APPEND_GIVE_UP_SECONDS)
        elif op == "history":
            await self.history(recorder)
        elif op == "context":
            await self.context(recorder)
        elif op == "remember":
            await self.remember(recorder)
        elif op == "recall":
            await self.recall(recorder)
        elif op == "findings check":
            await self.findings_check(recorder)
        else:
            await self.live_poll(recorder)


def http_client(clients: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    return httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS, limits=limits)


async def prefill(agents: list[SimulatedAgent], recorder: Recorder) -> None:
    async def one(agent: SimulatedAgent) -> None:
        for _ in range(PREFILL_TURNS):
            await agent.append_turn(recorder, APPEND_GIVE_UP_SECONDS)

    await asyncio.gather(*(one(a) for a in agents))
    unanswered = [a for a in recorder.appends if not a.answered]
    if unanswered:
        raise RuntimeError(f"prefill failed: {unanswered[0]}")


async def run_workload(
    agents: list[SimulatedAgent], recorder: Recorder, stop: asyncio.Event
) -> None:
    """Every client loops, one request (or one append with its retries) at a time, until
    `stop` is set; a step under way finishes first."""

    async def loop(agent: SimulatedAgent) -> None:
        while not stop.is_set():
            await agent.step(recorder)

    await asyncio.gather(*(loop(a) for a in agents))


def setup_fixture() -> tuple[Fixture, Callable[[], None]]:
    """Migrate, create the bench agent, its key, a dashboard user with a membership and a
    logged-in session; answer the fixture (its base_url set once the server is up) and
    what deletes it all."""
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from memoryapp.core.models import Agent, ApiKey, Session
    from memoryapp.dashboard.models import Membership

    call_command("migrate", verbosity=0)
    run = secrets.token_hex(4)
    agent = Agent.objects.create(name=f"bench-load-{run}")
    _, api_key = ApiKey.issue(agent, name="bench")
    user = get_user_model().objects.create_user(f"bench-load-{run}")
    Membership.objects.create(user=user, agent=agent, role=Membership.Role.VIEWER)
    browser = Client()
    browser.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"

    def teardown() -> None:
        Session.objects.filter(agent=agent).delete()
        agent.delete()
        user.delete()

    return Fixture("", agent.name, api_key, cookie, run), teardown


def start_worker(
    env: dict, concurrency: int | None = None, log: Path | None = None, loglevel: str = "warning"
) -> subprocess.Popen:
    """A Celery worker as the Procfile runs it (`celery -A memoryapp worker`; by default
    one pool process per core), in its own process group, so that the whole worker, pool
    included, can be killed at once."""
    pool = ["--concurrency", str(concurrency)] if concurrency else []
    # Celery prints its banner on stdout: kept out of the figures.
    out = open(log, "ab") if log else None
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "memoryapp", "worker", "--loglevel", loglevel,
             *pool, "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, start_new_session=True,
            stdout=out or subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    finally:
        if out:
            out.close()  # the child has its own copy


def stop_process_group(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def is_success(sample: Sample) -> bool:
    return isinstance(sample.status, int) and 200 <= sample.status < 300


def operation_table(samples: list[Sample], seconds: float) -> list[str]:
    lines = [
        "| operation | requests | per s | p50 ms | p99 ms | errors |",
        "|:---|---:|---:|---:|---:|---:|",
    ]
    for op in [*OPERATIONS, "all"]:
        rows = samples if op == "all" else [s for s in samples if s.op == op]
        ok = [s.seconds for s in rows if is_success(s)]
        errors = len(rows) - len(ok)
        p50 = f"{statistics.median(ok) * 1000:.1f}" if ok else "–"
        p99 = f"{percentile(ok, 0.99) * 1000:.1f}" if ok else "–"
        name = f"**{op}**" if op == "all" else op
        lines.append(
            f"| {name} | {len(rows):,} | {len(rows) / seconds:.1f} | {p50} | {p99} | {errors} |"
        )
    return lines


def error_table(samples: list[Sample]) -> list[str]:
    counts = Counter((s.op, str(s.status)) for s in samples if not is_success(s))
    if not counts:
        return ["errors by operation and status: none"]
    lines = ["| operation | status | count | first answer |", "|:---|:---|---:|:---|"]
    for (op, status), count in sorted(counts.items()):
        first = next(s for s in samples if s.op == op and str(s.status) == status)
        detail = first.detail.replace("|", "\\|").replace("\n", " ")[:120]
        lines.append(f"| {op} | {status} | {count:,} | {detail} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp mixed-load benchmark")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker")
    parser.add_argument(
        "--concurrency", type=int, help="Celery worker processes (default: one per core)"
    )
    parser.add_argument("--drain", type=float, default=60.0, help="wait for extraction, s")
    args = parser.parse_args()

    if postgres_url("bench/load.py") is None:
        return 2
    if not os.environ.get("REDIS_URL"):
        print("bench/load.py runs extraction on Celery: set REDIS_URL=redis://...", file=sys.stderr)
        return 2
    env = server_env()
    os.environ.update(env)
    fixture, teardown = setup_fixture()
    from memoryapp.core.models import ExtractionJob

    jobs = ExtractionJob.objects.filter(session__agent__name=fixture.agent_name)
    server = worker = None
    try:
        server, fixture.base_url = start_gunicorn(env, args.workers, args.threads)
        worker = start_worker(env, args.concurrency)
        recorder = Recorder()

        async def run() -> float:
            async with http_client(args.clients) as http:
                agents = [SimulatedAgent(fixture, http, i, seed=i) for i in range(args.clients)]
                await prefill(agents, recorder)
                recorder.samples.clear()
                recorder.appends.clear()
                stop = asyncio.Event()
                asyncio.get_running_loop().call_later(args.seconds, stop.set)
                began = time.perf_counter()
                await run_workload(agents, recorder, stop)
                return time.perf_counter() - began

        elapsed = asyncio.run(run())
        ended = time.monotonic()
        at_end = jobs.count()
        done_at_end = jobs.filter(status="done").count()
        drained = None
        while time.monotonic() - ended < args.drain:
            if not jobs.exclude(status__in=["done", "failed"]).exists():
                drained = time.monotonic() - ended
                break
            time.sleep(0.5)
        statuses = Counter(jobs.values_list("status", flat=True))

        print(
            f"gunicorn: {args.workers} workers x {args.threads} threads; PostgreSQL; Redis + 1 "
            f"Celery worker ({args.concurrency or os.cpu_count()} processes); "
            f"{args.clients} clients; {elapsed:.1f} s; {os.cpu_count()} cores shared by all"
        )
        print()
        print("\n".join(operation_table(recorder.samples, elapsed)))
        print()
        print("p50/p99 over answered (2xx) requests; errors are every other answer.")
        print()
        print("\n".join(error_table(recorder.samples)))
        print()
        appended = len([a for a in recorder.appends if a.answered])
        retried = sum(a.attempts > 1 for a in recorder.appends)
        print(
            f"appends: {appended:,} of {len(recorder.appends):,} answered 201 "
            f"({retried} needed a retry)"
        )
        drain_text = (
            f"all done {drained:.1f} s after the clients stopped"
            if drained is not None
            else f"not all done {args.drain:.0f} s after the clients stopped"
        )
        print(
            f"extraction: {at_end:,} jobs (prefill included); {done_at_end:,} done when the "
            f"clients stopped, {drain_text}; final {dict(statuses)}"
        )
        return 0
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if worker is not None:
            stop_process_group(worker)
        teardown()


if __name__ == "__main__":
    sys.exit(main())
