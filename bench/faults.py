"""Faults: the mixed workload of bench/load.py while Redis, the worker and PostgreSQL fail.

Starts its own throwaway PostgreSQL cluster (initdb into a temporary directory, a free
port) and its own Redis (nothing kept on disk, a free port), never the machine's, then
gunicorn, one Celery worker and Celery beat on them, and the clients of bench/load.py
(appends with an Idempotency-Key, retried with the same key on 503 and on connection
errors; history, context, memory writes and recalls, findings checks, dashboard live
polls). After a warm-up, one fault at a time:

1. Redis is stopped for --redis-down seconds and started again, empty (queued jobs gone);
2. the Celery worker, its pool included, is killed with SIGKILL and a new one started;
3. PostgreSQL is restarted: `pg_ctl stop -m fast`, --db-down seconds down, `pg_ctl start`.

After each recovery the clients carry on until every extraction job left unfinished at
the recovery is done (at most --wait seconds), then the next fault comes; at the end the
clients stop and it waits (at most --drain seconds) for every job. It then counts the
turns: answered (201 to the client), stored (turn rows), extracted (job done), duplicated
(one turn's text stored twice) and lost (answered 201, not stored); lists every 5xx and
connection error by phase and operation; samples the extraction queue's length in Redis
every second; and says, from each job's `finished_at`, how long after each recovery the
jobs it left were done and when any job was done again. It exits 1 when a turn is lost
or duplicated, a job is not done (or extraction not going again) within 60 s of a
recovery, or a fault was answered with a 5xx that is not a 503 (a JSON 503 from the API:
README, "503 with Retry-After when the database is unreachable"; "Broker down: ingest
still answers 201").

    .venv/bin/python bench/faults.py --clients 4

(`.venv/bin/python -m bench.faults` is the same.) Needs PostgreSQL's server binaries
(the newest /usr/lib/postgresql/*/bin, or PG_BIN) and redis-server; run as root, the
cluster runs as the `postgres` user. Everything it starts is stopped and the cluster's
data removed at the end; the logs (gunicorn, worker, beat, PostgreSQL, Redis) stay in the
directory it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import ensure_database, free_port, server_env, start_gunicorn  # noqa: E402
from bench.load import (  # noqa: E402
    MARKER,
    OBSERVER_OPERATIONS,
    Recorder,
    Sample,
    SimulatedAgent,
    http_client,
    prefill,
    run_workload,
    setup_fixture,
    start_worker,
    stop_process_group,
)

# What the issue asks of recovery: every job done within this long of a service's return.
RECOVERY_DEADLINE_SECONDS = 60.0
DASHBOARD_OP = "dashboard live poll"


def pg_bin() -> Path:
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    if not found:
        raise SystemExit("no PostgreSQL binaries in /usr/lib/postgresql/*/bin: set PG_BIN")
    return Path(found[-1])


class Cluster:
    """A throwaway PostgreSQL cluster in a temporary directory, on a free port."""

    def __init__(self, root: Path, logs: Path) -> None:
        self.dir = root / "postgres"
        self.data = self.dir / "data"
        self.port = free_port()
        self.bin = pg_bin()
        self.log = logs / "postgres.log"
        self.ctl_log = logs / "pg_ctl.log"
        # initdb refuses to run as root: the cluster belongs to the postgres user then.
        self.owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.running = False

    def _run(self, *args: str) -> None:
        with open(self.ctl_log, "ab") as out:
            subprocess.run([*self.owner, *args], check=True, stdout=out, stderr=out, cwd="/")

    def init(self) -> None:
        self.dir.mkdir()
        self.log.touch()
        if self.owner:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(self.log, "postgres", "postgres")
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.dir} -c max_connections=100"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-t", "60", "-o", options, "start",
        )  # fmt: skip
        self.running = True

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        self.running = False

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"


class Redis:
    """A throwaway redis-server on a free port that keeps nothing on disk."""

    def __init__(self, root: Path, logs: Path) -> None:
        self.root = root
        self.port = free_port()
        self.log = logs / "redis.log"
        self.process: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.root)],
                stdout=out, stderr=out, start_new_session=True,
            )  # fmt: skip
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        for _ in range(100):
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("redis-server did not come up")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def start_beat(env: dict, root: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "memoryapp", "beat", "--loglevel", "info",
             "--schedule", str(root / "beat-schedule")],
            cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip


def sql(url: str, query: str, params: tuple = ()) -> list[tuple] | None:
    """Rows of one query on a fresh connection; None while the database is unreachable."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute(query, params).fetchall()
    except psycopg.OperationalError:
        return None


@dataclasses.dataclass
class Phase:
    name: str
    start: float
    end: float = 0.0


@dataclasses.dataclass
class Fault:
    name: str
    began: float  # wall clock: the service went away
    recovered: float  # wall clock: it was back
    unfinished: list[int] = dataclasses.field(default_factory=list)  # job ids at recovery
    unfinished_text: str = ""  # the same, counted by status
    done_within_wait: bool = False
    done_after: float | None = None  # from recovery until the last of those was done
    not_done: int = 0  # of those, still not done at the very end
    swept: int = 0  # of those, dispatched again by the sweep
    broker: str = ""  # what Redis held when the fault began
    resumed_after: float | None = None  # from recovery until any job was done again
    notes: list[str] = dataclasses.field(default_factory=list)
    median_after: float | None = None


class Timeline:
    def __init__(self) -> None:
        self.phases: list[Phase] = []

    def mark(self, name: str) -> None:
        now = time.time()
        if self.phases:
            self.phases[-1].end = now
        self.phases.append(Phase(name, now))

    def close(self) -> None:
        self.phases[-1].end = time.time()

    def phase_of(self, wall: float) -> str:
        for phase in self.phases:
            if phase.start <= wall < (phase.end or float("inf")):
                return phase.name
        return self.phases[-1].name


UNFINISHED = (
    "SELECT id, status FROM core_extractionjob "
    "WHERE created_at <= to_timestamp(%s) AND status IN ('pending', 'queued')"
)
DONE_SINCE = "SELECT 1 FROM core_extractionjob WHERE finished_at >= to_timestamp(%s) LIMIT 1"
STILL_UNFINISHED = (
    "SELECT count(*) FROM core_extractionjob WHERE id = ANY(%s) AND status IN ('pending', 'queued')"
)


async def wait_for_jobs(
    url: str, fault: Fault, cap: float, earlier: set[int], resume: bool = True
) -> None:
    """Note the jobs not done at the recovery (created by then, pending or queued; not
    those an earlier fault left, which count there), then wait, at most `cap` seconds
    after the recovery, until they are all done (or failed) and, with `resume`, some job
    has been done since the recovery (the worker is extracting again). When each was
    done comes from its finished_at at the end (finish_times)."""
    rows = None
    while rows is None and time.time() - fault.recovered < cap:
        rows = await asyncio.to_thread(sql, url, UNFINISHED, (fault.recovered,))
        if rows is None:
            await asyncio.sleep(1)
    if rows is None:
        return
    rows = [(job_id, status) for job_id, status in rows if job_id not in earlier]
    earlier.update(job_id for job_id, _ in rows)
    fault.unfinished = [job_id for job_id, _ in rows]
    by_status = Counter(status for _, status in rows)
    fault.unfinished_text = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "none"
    while time.time() - fault.recovered < cap:
        left = await asyncio.to_thread(sql, url, STILL_UNFINISHED, (fault.unfinished,))
        if left is not None and left[0][0] == 0:
            fault.done_within_wait = True
            if not resume:
                return
            since = await asyncio.to_thread(sql, url, DONE_SINCE, (fault.recovered,))
            if since:
                return
        await asyncio.sleep(1)


def finish_times(url: str, fault: Fault) -> None:
    """When the jobs a recovery left were done, from their finished_at (even after the
    wait), how many of them the sweep dispatched again, and when extraction resumed."""
    rows = sql(
        url,
        "SELECT extract(epoch FROM min(finished_at)) FROM core_extractionjob "
        "WHERE finished_at >= to_timestamp(%s)",
        (fault.recovered,),
    )
    if rows and rows[0][0] is not None:
        fault.resumed_after = float(rows[0][0]) - fault.recovered
    if not fault.unfinished:
        fault.done_after = 0.0 if fault.unfinished_text else None
        return
    rows = sql(
        url,
        "SELECT extract(epoch FROM finished_at), status, "
        "queued_at > created_at + interval '2 seconds' "
        "FROM core_extractionjob WHERE id = ANY(%s)",
        (fault.unfinished,),
    )
    after = [float(finished) - fault.recovered for finished, status, _ in rows if status == "done"]
    fault.not_done = len(rows) - len(after)
    fault.swept = sum(swept for _, _, swept in rows)
    if after:
        fault.median_after = statistics.median(after)
    if after and not fault.not_done:
        fault.done_after = max(after)


def queue_length(client) -> int | None:
    """Messages waiting in the extraction queue (kombu keeps one Redis list per priority)."""
    import redis

    names = ["memoryapp"] + [f"memoryapp\x06\x16{p}" for p in (3, 6, 9)]
    try:
        return sum(client.llen(name) for name in names)
    except redis.RedisError:
        return None


def broker_state(port: int) -> tuple[int | None, int | None]:
    """(messages waiting in the queue, messages delivered to a worker and not acknowledged
    yet: kombu keeps those in the `unacked` hash until the task is done)."""
    import redis

    client = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1)
    try:
        return queue_length(client), client.hlen("unacked")
    except redis.RedisError:
        return None, None


def broker_text(state: tuple[int | None, int | None]) -> str:
    queued, unacked = state
    return f"{queued} waiting, {unacked} held by the worker"


async def watch_queue(port: int, samples: list[tuple[float, int | None]], stop: asyncio.Event):
    import redis

    client = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1)
    while not stop.is_set():
        samples.append((time.time(), await asyncio.to_thread(queue_length, client)))
        await asyncio.sleep(1)


def note_worker_exit(worker: subprocess.Popen, fault: Fault) -> None:
    code = worker.poll()
    if code is not None:
        fault.notes.append(
            f"the Celery worker (pid {worker.pid}) had exited by itself, code {code}: "
            "worker.log says why"
        )


async def supervise(args, env, root: Path, logs: Path, box: dict, restarts: list[str]):
    """Restart the worker or beat when it exits by itself, one second later, as a process
    manager (systemd `Restart=always`, a Procfile runner) does in production: Celery's
    worker can exit when Redis drops while it holds messages (kombu's "Unrecoverable
    error ... 'NoneType' object has no attribute 'hostname'"). Each restart is reported.
    The deliberate kill of the worker fault sets box["killing"] and restarts it itself."""
    while True:
        await asyncio.sleep(1)
        for name in ("worker", "beat"):
            process = box.get(name)
            if process is None or process.poll() is None or box.get("killing"):
                continue
            restarts.append(
                f"{name} (pid {process.pid}) exited by itself, code {process.returncode}, "
                f"at {time.strftime('%H:%M:%S')}; restarted"
            )
            if name == "worker":
                box[name] = start_worker(env, args.concurrency, logs / "worker.log", "info")
            else:
                box[name] = start_beat(env, root, logs / "beat.log")


async def scenario(args, fixture, env, cluster: Cluster, redis: Redis, logs: Path, box: dict):
    recorder, timeline, faults = Recorder(), Timeline(), []
    queue: list[tuple[float, int | None]] = []
    seen: set[int] = set()  # jobs a fault left unfinished: each counts for the first only
    url = cluster.url("memoryapp")
    async with http_client(args.clients + args.observers) as http:
        agents = [SimulatedAgent(fixture, http, i, seed=i) for i in range(args.clients)]
        observers = [
            SimulatedAgent(fixture, http, i % args.clients, seed=1000 + i,
                           operations=OBSERVER_OPERATIONS)
            for i in range(args.observers)
        ]  # fmt: skip
        restarts: list[str] = []
        supervisor = asyncio.create_task(supervise(args, env, logs.parent, logs, box, restarts))
        timeline.mark("prefill")
        await prefill(agents, recorder)
        # Start from a steady state: the worker is up and has caught up with the prefill.
        ready = Fault("prefill", time.time(), time.time())
        await wait_for_jobs(url, ready, args.drain, set(), resume=False)
        if not ready.done_within_wait:
            raise RuntimeError(f"the worker did not extract the prefill's turns: {logs}")
        stop, stop_watching = asyncio.Event(), asyncio.Event()
        watcher = asyncio.create_task(watch_queue(redis.port, queue, stop_watching))
        timeline.mark("before the faults")
        clients = asyncio.create_task(run_workload(agents + observers, recorder, stop))
        await asyncio.sleep(args.warmup)

        timeline.mark("Redis down")
        fault = Fault(f"Redis stopped {args.redis_down:.0f} s, started empty", time.time(), 0)
        fault.broker = broker_text(broker_state(redis.port))
        await asyncio.to_thread(redis.stop)
        await asyncio.sleep(args.redis_down)
        await asyncio.to_thread(redis.start)
        fault.recovered = time.time()
        timeline.mark("after Redis")
        await wait_for_jobs(url, fault, args.wait, seen)
        note_worker_exit(box["worker"], fault)
        faults.append(fault)

        # Kill the worker while it holds a job (delivered, not acknowledged), as a crash
        # in the middle of an extraction would.
        for _ in range(150):
            if (broker_state(redis.port)[1] or 0) > 0:
                break
            await asyncio.sleep(0.1)
        timeline.mark("worker killed")
        fault = Fault(f"worker SIGKILLed, new one {args.worker_gap:.0f} s later", time.time(), 0)
        fault.broker = broker_text(broker_state(redis.port))
        note_worker_exit(box["worker"], fault)
        box["killing"] = True
        await asyncio.to_thread(stop_process_group, box["worker"], signal.SIGKILL)
        await asyncio.sleep(args.worker_gap)
        box["worker"] = start_worker(env, args.concurrency, logs / "worker.log", "info")
        box["killing"] = False
        fault.recovered = time.time()
        timeline.mark("after the worker")
        await wait_for_jobs(url, fault, args.wait, seen)
        faults.append(fault)

        timeline.mark("PostgreSQL down")
        fault = Fault(f"PostgreSQL stop -m fast, {args.db_down:.0f} s down, start", time.time(), 0)
        fault.broker = broker_text(broker_state(redis.port))
        await asyncio.to_thread(cluster.stop)
        await asyncio.sleep(args.db_down)
        await asyncio.to_thread(cluster.start)
        fault.recovered = time.time()
        timeline.mark("after PostgreSQL")
        await wait_for_jobs(url, fault, args.wait, seen)
        note_worker_exit(box["worker"], fault)
        faults.append(fault)

        timeline.mark("clients finishing")
        stop.set()
        await clients
        timeline.mark("drain")
        final = Fault("clients stopped: every job", time.time(), time.time())
        await wait_for_jobs(url, final, args.drain, set(), resume=False)
        stop_watching.set()
        await watcher
        supervisor.cancel()
        timeline.close()
    print("process restarts (as a process manager would):", "; ".join(restarts) or "none")
    for fault in [*faults, final]:
        finish_times(url, fault)
    return recorder, timeline, faults, final, queue


def count_turns(url: str, recorder: Recorder) -> dict:
    contents = sql(url, "SELECT content FROM core_message WHERE role = 'user'")
    stored = Counter()
    for (content,) in contents:
        found = MARKER.match(content)
        if found:
            stored[found.group(1)] += 1
    answered = {a.marker for a in recorder.appends if a.answered}
    (turns,) = sql(url, "SELECT count(*) FROM core_turn")[0]
    (messages,) = sql(url, "SELECT count(*) FROM core_message")[0]
    jobs = dict(sql(url, "SELECT status, count(*) FROM core_extractionjob GROUP BY status"))
    (without_job,) = sql(
        url,
        "SELECT count(*) FROM core_turn t LEFT JOIN core_extractionjob j ON j.turn_id = t.id "
        "WHERE j.id IS NULL",
    )[0]
    (swept,) = sql(
        url,
        "SELECT count(*) FROM core_extractionjob "
        "WHERE queued_at > created_at + interval '2 seconds'",
    )[0]
    return {
        "tried": len(recorder.appends),
        "answered": len(answered),
        "replayed": sum(a.replayed for a in recorder.appends),
        "retried": sum(a.attempts > 1 for a in recorder.appends),
        "turns": turns,
        "messages": messages,
        "duplicated": sorted(m for m, n in stored.items() if n > 1),
        "lost": sorted(answered - set(stored)),
        "stored unanswered": sorted(set(stored) - answered),
        "jobs": jobs,
        "without job": without_job,
        "swept": swept,
    }


def is_5xx_or_no_answer(sample: Sample) -> bool:
    return not isinstance(sample.status, int) or sample.status >= 500


def overlaps(sample: Sample, fault: Fault) -> bool:
    return sample.started < fault.recovered and sample.finished > fault.began


def after_text(fault: Fault) -> str:
    if fault.done_after is not None:
        return f"{fault.done_after:.1f} s"
    return f"never: {fault.not_done} not done at the end" if fault.not_done else "–"


def within_deadline(fault: Fault) -> bool:
    return fault.done_after is not None and fault.done_after <= RECOVERY_DEADLINE_SECONDS


def report(args, recorder, timeline, faults, final, queue, counts, logs: Path) -> int:
    print(
        f"faults: gunicorn {args.workers} workers x {args.threads} threads; {args.clients} "
        f"agents + {args.observers} observers; 1 Celery worker "
        f"({args.concurrency or os.cpu_count()} processes) + beat; throwaway PostgreSQL "
        f"{pg_bin().parent.name} and Redis; {os.cpu_count()} cores shared by all"
    )
    print()
    print(
        "| phase | s | requests | 2xx | 4xx | 503 | other 5xx | no answer | "
        "appends answered 201 | queue max | queue empty |"
    )
    print("|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for phase in timeline.phases:
        rows = [s for s in recorder.samples if timeline.phase_of(s.started) == phase.name]
        statuses = Counter(
            "no answer"
            if not isinstance(s.status, int)
            else "503"
            if s.status == 503
            else f"{s.status // 100}xx"
            for s in rows
        )
        appends = [a for a in recorder.appends if timeline.phase_of(a.started) == phase.name]
        lengths = [n for t, n in queue if n is not None and timeline.phase_of(t) == phase.name]
        queue_max = f"{max(lengths):,}" if lengths else "–"
        empty = f"{100 * lengths.count(0) / len(lengths):.0f}%" if lengths else "–"
        print(
            f"| {phase.name} | {phase.end - phase.start:.0f} | {len(rows):,} | "
            f"{statuses['2xx']:,} | {statuses['4xx']:,} | {statuses['503']:,} | "
            f"{statuses['5xx']:,} | {statuses['no answer']:,} | "
            f"{sum(a.answered for a in appends):,} of {len(appends):,} | {queue_max} | {empty} |"
        )
    print()
    print("A phase holds the requests and appends that started in it (an append's retries")
    print("count in its phase). Queue: extraction messages waiting in Redis, read every second;")
    print("'empty' is the share of those reads that found none. A phase that ends with a")
    print("fault holds the requests in flight when it began: their 503s are the fault's.")
    print()

    print(
        "| fault | Redis held when it began | jobs not done at recovery | of them, redone by "
        "the sweep | half done after | all done after | within 60 s | a job done again after |"
    )
    print("|:---|:---|:---|---:|---:|---:|:---|---:|")
    for fault in [*faults, final]:
        ok = "yes" if within_deadline(fault) else "NO"
        half = f"{fault.median_after:.1f} s" if fault.median_after is not None else "–"
        resumed = f"{fault.resumed_after:.1f} s" if fault.resumed_after is not None else "never"
        print(
            f"| {fault.name} | {fault.broker or '–'} | {fault.unfinished_text} | {fault.swept} | "
            f"{half} | {after_text(fault)} | {ok} | {resumed} |"
        )
    print()
    print("Times are from the recovery (Redis or PostgreSQL started again, the new worker")
    print("started) to a job's finished_at. A job left by one fault counts for that one only.")
    for fault in faults:
        for note in fault.notes:
            print(f"{fault.name}: {note}")
    print()

    jobs = counts["jobs"]
    print("| turns | count |")
    print("|:---|---:|")
    print(f"| appended by the clients | {counts['tried']:,} |")
    print(
        f"| answered 201 | {counts['answered']:,} ({counts['retried']:,} after a retry, "
        f"{counts['replayed']:,} of them replayed) |"
    )
    print(f"| stored (turn rows) | {counts['turns']:,} ({counts['messages']:,} messages) |")
    print(f"| extracted (job done) | {jobs.get('done', 0):,} |")
    print(f"| duplicated (same turn stored twice) | {len(counts['duplicated']):,} |")
    print(f"| lost (answered 201, not stored) | {len(counts['lost']):,} |")
    print(f"| stored, never answered 201 | {len(counts['stored unanswered']):,} |")
    print(f"| stored without an extraction job | {counts['without job']:,} |")
    others = ", ".join(f"{n} {s}" for s, n in sorted(jobs.items()) if s != "done") or "none"
    print(f"| jobs not done at the end | {others} |")
    print(f"| jobs dispatched again (by the sweep) | {counts['swept']:,} |")
    print()

    bad = [s for s in recorder.samples if is_5xx_or_no_answer(s)]
    if bad:
        print("5xx answers and requests without an answer:")
        print()
        print("| phase | operation | status | JSON | count | first answer |")
        print("|:---|:---|:---|:---|---:|:---|")
        groups = Counter((timeline.phase_of(s.started), s.op, str(s.status), s.json_body)
                         for s in bad)  # fmt: skip
        for (phase, op, status, is_json), n in sorted(
            groups.items(), key=lambda g: ([p.name for p in timeline.phases].index(g[0][0]), g)
        ):
            first = next(
                s for s in bad
                if (timeline.phase_of(s.started), s.op, str(s.status), s.json_body)
                == (phase, op, status, is_json)
            )  # fmt: skip
            detail = " ".join(first.detail.split()).replace("|", "\\|")[:100]
            print(f"| {phase} | {op} | {status} | {'yes' if is_json else 'no'} | {n:,} | "
                  f"{detail} |")  # fmt: skip
        print()

    # Answers during a fault that break the contract: anything 5xx but a 503 (JSON on
    # the API). Requests without an answer are a server that was restarting: not counted.
    def broken(sample: Sample) -> bool:
        if not isinstance(sample.status, int) or sample.status < 500:
            return False
        if sample.op == DASHBOARD_OP:
            return sample.status != 503
        return sample.status != 503 or not sample.json_body

    checks = [
        ("no turn lost (answered 201, not stored)", not counts["lost"], counts["lost"][:5]),
        ("no turn stored twice", not counts["duplicated"], counts["duplicated"][:5]),
        ("every stored turn has its extraction job", counts["without job"] == 0, ""),
    ]
    for fault in faults:
        checks.append(
            (f"jobs done within 60 s of recovery: {fault.name}", within_deadline(fault),
             after_text(fault))
        )  # fmt: skip
        resumed = fault.resumed_after is not None and fault.resumed_after <= 60
        checks.append(
            (f"extraction going again within 60 s of recovery: {fault.name}", resumed,
             f"{fault.resumed_after:.1f} s" if fault.resumed_after is not None else "never")
        )  # fmt: skip
    checks.append(
        (f"every job done within {args.drain:.0f} s of the clients stopping",
         final.done_within_wait, final.unfinished_text)
    )  # fmt: skip
    for fault in faults:
        wrong = Counter(
            (s.op, s.status, "JSON" if s.json_body else "not JSON")
            for s in recorder.samples
            if overlaps(s, fault) and broken(s)
        )
        checks.append(
            (f"only 503s (JSON from the API) while: {fault.name}", not wrong, dict(wrong))
        )
    failed = 0
    for name, ok, evidence in checks:
        failed += not ok
        print(
            f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok or not evidence else f": {evidence}")
        )
    print()
    print(f"logs: {logs}")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp fault-injection benchmark")
    parser.add_argument("--clients", type=int, default=4, help="agents, each its own session")
    parser.add_argument(
        "--observers", type=int, default=2, help="clients that only read and poll the dashboard"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker")
    parser.add_argument(
        "--concurrency", type=int, help="Celery worker processes (default: one per core)"
    )
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before the faults")
    parser.add_argument("--redis-down", type=float, default=20.0)
    parser.add_argument("--worker-gap", type=float, default=2.0, help="kill to new worker, s")
    parser.add_argument("--db-down", type=float, default=15.0)
    parser.add_argument(
        "--wait", type=float, default=90.0, help="longest wait for jobs after a recovery, s"
    )
    parser.add_argument(
        "--drain", type=float, default=180.0, help="longest wait for jobs at the end, s"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="memoryapp-faults-"))
    root.chmod(0o755)  # the cluster's owner must reach its directory
    logs = root / "logs"
    logs.mkdir()
    cluster, redis = Cluster(root, logs), Redis(root, logs)
    box: dict[str, subprocess.Popen] = {}
    try:
        cluster.init()
        cluster.start()
        redis.start()
        env = {
            **server_env(),
            "DATABASE_URL": cluster.url("memoryapp"),
            "REDIS_URL": redis.url,
            "LOG_LEVEL": "WARNING",
        }
        os.environ.update(env)
        ensure_database(env["DATABASE_URL"])
        fixture, _ = setup_fixture()  # the whole cluster is removed afterwards
        from django.db import connection

        connection.close()  # this process's connection would not survive the restart
        box["server"], fixture.base_url = start_gunicorn(
            env, args.workers, args.threads, log=logs / "gunicorn.log"
        )
        box["worker"] = start_worker(env, args.concurrency, logs / "worker.log", "info")
        box["beat"] = start_beat(env, root, logs / "beat.log")
        recorder, timeline, faults, final, queue = asyncio.run(
            scenario(args, fixture, env, cluster, redis, logs, box)
        )
        counts = count_turns(cluster.url("memoryapp"), recorder)
        return report(args, recorder, timeline, faults, final, queue, counts, logs)
    finally:
        if "server" in box:
            box["server"].terminate()
            box["server"].wait(timeout=30)
        for name in ("worker", "beat"):
            if name in box:
                stop_process_group(box[name])
        redis.stop()
        if cluster.running:
            cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
