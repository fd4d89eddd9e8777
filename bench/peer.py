"""memoryapp beside Redis Agent Memory Server (the peer), in one run on this machine.

The peer is installed by `../shared/peer/setup_peer.sh` (under /tmp/peer) and started here
when it is not running (and stopped at the end, unless --keep-peer). memoryapp runs as in
production: gunicorn (2 workers x 4 threads by default) on PostgreSQL, one Celery worker on
Redis doing the extraction of every turn.

1. One client, sessions of 20 and 2,000 stored messages of real-size text: append one
   two-message turn (the peer through its own client's `append_messages_to_working_memory`,
   memoryapp through its own, agents.client's `AsyncMemoryClient.append_turn`: `POST
   /turns`) and restore the whole history (the peer's `get_working_memory`, memoryapp's
   `history`: `GET /history` with limits that keep everything),
   interleaved A B A B so that drift hits both, after 5 untimed rounds and once both
   sides are idle (neither still working off the fill). memoryapp's
   default pruned restore (the agent's 100 messages) is timed too, and memoryapp's
   floor: its cheapest authenticated request (`GET /agent`: the key's lookup, one row),
   each right after the peer's restore as memoryapp's restore is timed. Prints p50 per
   operation, the ratio, and the floor beside a third of the peer's figures (what a
   ratio of 3 would need). Then memoryapp's append and restore again through a bare
   `httpx.AsyncClient` (httpx's own transport), on a session of its own growing as
   the first, each call right after the peer's restore.
2. 8 concurrent clients, each appending to its own session for a fixed time: the peer,
   memoryapp, the peer again, each run once both servers (and memoryapp's worker) are
   idle again, so that neither side's leftover work lands in the other's run. Prints
   turns per second, p50 and p99.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memoryapp_bench \\
    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/peer.py

The peer's client (agent-memory-client 0.14.0) is in memoryapp's `test` extra. The
database is created when missing and migrated; the bench agent is deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    MEMORYAPP_PATTERNS,
    cpu_check,
    percentile,
    postgres_url,
    production_server,
)
from bench.common import settle as common_settle  # noqa: E402

PEER_DIR = Path(os.environ.get("PEER_DIR", "/tmp/peer"))
# The text of the peer's own side-by-side script (../shared/peer/side_by_side.py).
TEXT = (
    "The function parses the configuration file and returns a dict of settings; "
    "errors are reported with the line number. "
) * 3
# Limits that keep a whole session (the peer's get_working_memory answers everything).
WHOLE = {"max_messages": 10000, "max_tokens": 10_000_000}
# Untimed rounds per size before the timed ones.
WARM_UP = 5


def messages(n: int, tag: str) -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag} {i} {TEXT}"}
        for i in range(n)
    ]


def peer_up(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def ensure_peer(url: str) -> tuple[bool, bool]:
    """(whether the peer answers at `url`, whether this run started it from PEER_DIR);
    not up (after saying why) when it is not installed."""
    if peer_up(url):
        return True, False
    start = PEER_DIR / "start_peer.sh"
    if not start.exists():
        print(
            f"the peer is not installed: run ../shared/peer/setup_peer.sh (it builds {PEER_DIR})",
            file=sys.stderr,
        )
        return False, False
    subprocess.run([str(start)], check=False, stdout=subprocess.DEVNULL)
    return peer_up(url), True


def stop_peer() -> None:
    """Stop the peer this run started (its Redis and its server), as stop_peer.sh does."""
    subprocess.run([str(PEER_DIR / "stop_peer.sh")], check=False, stdout=subprocess.DEVNULL)


class Sides:
    """Both systems' clients: the peer through agent-memory-client, memoryapp through
    agents.client (and a bare httpx client for its fill and the comparison)."""

    def __init__(self, peer_url: str, base_url: str, api_key: str, connections: int):
        from agent_memory_client import MemoryAPIClient, MemoryClientConfig

        from agents.client import AsyncMemoryClient

        self.peer = MemoryAPIClient(
            MemoryClientConfig(base_url=peer_url, default_namespace="bench", timeout=120)
        )
        self.mem = AsyncMemoryClient(base_url, api_key, timeout=120, retries=0)
        self.http = httpx.AsyncClient(
            base_url=base_url + "/api/v1",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=120,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    async def close(self) -> None:
        await self.peer.close()
        await self.mem.aclose()
        await self.http.aclose()

    async def fill_peer(self, sid: str, n: int) -> None:
        from agent_memory_client.models import MemoryMessage, WorkingMemory

        memory = WorkingMemory(
            session_id=sid,
            namespace="bench",
            messages=[MemoryMessage(**m) for m in messages(n, sid)],
        )
        await self.peer.put_working_memory(sid, memory, context_window_max=10_000_000)

    async def fill_mem(self, sid: str, n: int) -> None:
        batch = messages(n, sid)
        for start in range(0, n, 200):
            answer = await self.http.post(
                f"/sessions/{sid}/turns", json={"messages": batch[start : start + 200]}
            )
            answer.raise_for_status()

    async def append_peer(self, sid: str, turn: list[dict]) -> None:
        from agent_memory_client.models import MemoryMessage

        await self.peer.append_messages_to_working_memory(
            sid, [MemoryMessage(**m) for m in turn], context_window_max=10_000_000
        )

    async def append_mem(self, sid: str, turn: list[dict]) -> None:
        await self.mem.append_turn(sid, turn)

    async def append_http(self, sid: str, turn: list[dict]) -> None:
        answer = await self.http.post(f"/sessions/{sid}/turns", json={"messages": turn})
        answer.raise_for_status()

    async def restore_peer(self, sid: str) -> int:
        memory = await self.peer.get_working_memory(sid, context_window_max=10_000_000)
        return len(memory.messages)

    async def floor_mem(self) -> None:
        await self.mem.agent()

    async def restore_mem(self, sid: str, limits: dict | None = None) -> int:
        history = await self.mem.history(sid, **(WHOLE if limits is None else limits))
        return len(history["messages"])

    async def restore_http(self, sid: str) -> int:
        answer = await self.http.get(f"/sessions/{sid}/history", params=WHOLE)
        answer.raise_for_status()
        return len(answer.json()["messages"])


async def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    result = await call
    return time.perf_counter() - started, result


async def one_client(sides: Sides, sizes: list[int], reps: int, run: str) -> list[dict]:
    rows = []
    turn = messages(2, "new")
    for n in sizes:
        sp, sm, sh = f"peer-{run}-{n}", f"mem-{run}-{n}", f"http-{run}-{n}"
        await sides.fill_peer(sp, n)
        await sides.fill_mem(sm, n)
        await sides.fill_mem(sh, n)
        times: dict[str, list[float]] = {
            "peer append": [],
            "mem append": [],
            "peer restore": [],
            "mem restore": [],
            "mem pruned": [],
            "mem floor": [],
            "http append": [],
            "http restore": [],
        }
        returned = {}
        # Untimed first rounds: both servers' threads open their connections and warm up.
        for _ in range(WARM_UP):
            await sides.append_peer(sp, turn)
            await sides.append_mem(sm, turn)
            await sides.restore_peer(sp)
            await sides.restore_mem(sm)
            await sides.restore_mem(sm, {})
            await sides.append_http(sh, turn)
            await sides.restore_http(sh)
        # Timed from idle: neither side still working off the fill (memoryapp's worker
        # extracts the fill's turns of 200 messages and rolls their summary).
        await settle()
        for _ in range(reps):
            seconds, _ = await timed(sides.append_peer(sp, turn))
            times["peer append"].append(seconds)
            seconds, _ = await timed(sides.append_mem(sm, turn))
            times["mem append"].append(seconds)
            seconds, returned["peer"] = await timed(sides.restore_peer(sp))
            times["peer restore"].append(seconds)
            seconds, returned["mem"] = await timed(sides.restore_mem(sm))
            times["mem restore"].append(seconds)
            seconds, returned["pruned"] = await timed(sides.restore_mem(sm, {}))
            times["mem pruned"].append(seconds)
        # The floor, timed where memoryapp's restore is: right after the peer's restore.
        for _ in range(reps):
            await sides.restore_peer(sp)
            seconds, _ = await timed(sides.floor_mem())
            times["mem floor"].append(seconds)
        # memoryapp through a bare httpx client, on its own session growing as `sm` did.
        for _ in range(reps):
            await sides.restore_peer(sp)
            seconds, _ = await timed(sides.append_http(sh, turn))
            times["http append"].append(seconds)
            await sides.restore_peer(sp)
            seconds, returned["http"] = await timed(sides.restore_http(sh))
            times["http restore"].append(seconds)
        p50 = {op: statistics.median(values) * 1000 for op, values in times.items()}
        rows.append({"size": n, "p50": p50, "returned": returned})
    return rows


# Whose background work could still run after a side's load: the peer's server and its
# own store, memoryapp's server and worker (matched against each process's command line).
BUSY_PATTERNS = ("agent_memory_server", str(PEER_DIR), *MEMORYAPP_PATTERNS)


async def settle(limit: float = 60.0) -> float:
    """Wait until neither side is still working off an earlier run (the peer indexes
    what it was sent after answering; memoryapp's worker extracts), so that one side's
    leftover work does not land in the other's measurement (bench.common.settle)."""
    return await common_settle(BUSY_PATTERNS, limit)


async def load(sides: Sides, side: str, clients: int, size: int, seconds: float, run: str):
    """`clients` concurrent appenders, each to its own session of `size` messages."""
    sids = [f"{side}-load-{run}-{i}" for i in range(clients)]
    fill = sides.fill_peer if side == "peer" else sides.fill_mem
    append = sides.append_peer if side == "peer" else sides.append_mem
    await asyncio.gather(*(fill(sid, size) for sid in sids))
    turn = messages(2, "new")
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def client(sid: str) -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                await append(sid, turn)
            except Exception:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)

    began = time.monotonic()
    await asyncio.gather(*(client(sid) for sid in sids))
    wall = time.monotonic() - began
    return {
        "side": side,
        "size": size,
        "per_s": len(latencies) / wall,
        "p50": statistics.median(latencies) * 1000 if latencies else float("nan"),
        "p99": percentile(latencies, 0.99) * 1000 if latencies else float("nan"),
        "errors": errors,
    }


async def compare(args, base_url: str, api_key: str) -> None:
    run = secrets.token_hex(3)
    sides = Sides(args.peer, base_url, api_key, args.clients + 2)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        rows = await one_client(sides, sizes, args.reps, run)
        print(f"One client, {args.reps} repetitions per row, interleaved peer / memoryapp.")
        print()
        print("| stored messages | operation | peer p50 ms | memoryapp p50 ms | peer / memoryapp |")
        print("|---:|:--|---:|---:|---:|")
        for row in rows:
            p = row["p50"]
            for op, name in (("append", "append one turn"), ("restore", "restore history")):
                ratio = p[f"peer {op}"] / p[f"mem {op}"]
                print(
                    f"| {row['size']:,} | {name} | {p[f'peer {op}']:.1f} | "
                    f"{p[f'mem {op}']:.1f} | {ratio:.2f} |"
                )
        print()
        print("memoryapp's default pruned restore (the agent's max_messages, token budget):")
        print()
        print("| stored messages | messages returned | p50 ms |")
        print("|---:|---:|---:|")
        for row in rows:
            pruned = row["p50"]["mem pruned"]
            print(f"| {row['size']:,} | {row['returned']['pruned']} | {pruned:.1f} |")
        print()
        print(
            "memoryapp's floor (GET /agent: authentication and one row, after the peer's "
            "restore) beside a third of the peer's p50:"
        )
        print()
        print("| stored messages | memoryapp floor p50 ms | peer append / 3 | peer restore / 3 |")
        print("|---:|---:|---:|---:|")
        for row in rows:
            p = row["p50"]
            print(
                f"| {row['size']:,} | {p['mem floor']:.1f} | {p['peer append'] / 3:.1f} | "
                f"{p['peer restore'] / 3:.1f} |"
            )
        print()
        print(
            "memoryapp through a bare httpx.AsyncClient (httpx's own transport, not "
            "agents.client's), each call after the peer's restore:"
        )
        print()
        print("| stored messages | append p50 ms | peer / it | restore p50 ms | peer / it |")
        print("|---:|---:|---:|---:|---:|")
        for row in rows:
            p = row["p50"]
            print(
                f"| {row['size']:,} | {p['http append']:.1f} | "
                f"{p['peer append'] / p['http append']:.2f} | {p['http restore']:.1f} | "
                f"{p['peer restore'] / p['http restore']:.2f} |"
            )
        for row in rows:
            got = row["returned"]
            if got["peer"] != got["mem"]:
                print(f"warning: at {row['size']} the peer returned {got['peer']} messages, "
                      f"memoryapp {got['mem']}", file=sys.stderr)  # fmt: skip
        print()
        print(
            f"{args.clients} concurrent clients appending for {args.seconds:.0f} s each: "
            "the peer, memoryapp, the peer again."
        )
        print()
        print("| system | stored messages | clients | turns/s | p50 ms | p99 ms | errors |")
        print("|:--|---:|---:|---:|---:|---:|---:|")
        for size in sizes:
            for side in ("peer", "memoryapp", "peer"):
                waited = await settle()
                if waited >= 59:
                    print(f"warning: still busy after {waited:.0f} s of waiting", file=sys.stderr)
                r = await load(sides, side, args.clients, size, args.seconds, run + side[0] + "x")
                run += "1"
                print(
                    f"| {r['side']} | {size:,} | {args.clients} | {r['per_s']:.0f} | "
                    f"{r['p50']:.1f} | {r['p99']:.1f} | {r['errors']} |",
                    flush=True,
                )
    finally:
        await sides.close()


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp beside Redis Agent Memory Server")
    parser.add_argument("--peer", default="http://127.0.0.1:8390", help="the peer's URL")
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--sizes", default="20,2000")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="per load run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument(
        "--keep-peer", action="store_true", help="leave running a peer this run started"
    )
    args = parser.parse_args()

    if postgres_url("bench/peer.py") is None:
        return 2
    up, started = ensure_peer(args.peer)
    try:
        return run(args) if up else 2
    finally:
        if started and not args.keep_peer:
            stop_peer()


def run(args) -> int:
    with production_server("bench-peer", args.workers, args.threads) as (base_url, key, where):
        print(
            f"memoryapp: gunicorn {args.workers} workers x {args.threads} threads, PostgreSQL, "
            f"{where}; peer: {args.peer}; {os.cpu_count()} cores"
        )
        print(cpu_check())
        print()
        asyncio.run(compare(args, base_url, key))
        print()
        print(cpu_check())
    return 0


if __name__ == "__main__":
    sys.exit(main())
