"""Recall latency at 1,000 and 100,000 memories of one agent, through
`memoryapp.core.recall.rank` (what GET /memories?query=, the recall tool, the AMS search,
the dashboard and /context use), query embedding included.

    .venv/bin/python bench/recall_scale.py [--sizes 1000,100000] [--queries 30]

On the embedded setup (SQLite) unless DATABASE_URL names PostgreSQL. The memories are
sentences of made-up words, three in ten with a word of the queries' topics (a seeded
generator: every run the same; a query's words are each in about 0.6% of them), and
their vectors random unit vectors stored as the embedder stores them: latency does not
depend on what a vector means, and embedding 100,000 memories would take hours here. The
agent is deleted afterwards. Prints p50 and p99 per size, with and without the query's
embedding, and the bytes a vector takes. Not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = (
    "staging database backup deploy release branch upload retry timeout cache queue worker "
    "billing invoice customer email schema migration index token session login password "
    "build test lint format coverage docker kubernetes config secret key bucket region "
    "latency error metric alert dashboard report export import parser lexer compiler"
).split()
QUERIES = [
    "Can I write to staging at the weekend?",
    "which service sends our customer email",
    "how long do uploads retry before they give up",
    "where are the database backups kept",
    "what breaks the lexer",
    "who owns the invoices",
]


# The rest of a memory's words: 5,000 made-up ones, drawn as words are (a few often,
# most rarely), so that a query's word is in a few memories, not in a quarter of them.
OTHER_WORDS = [
    f"{a}{b}{c}{d}"
    for a in "bdfgklmnprstvz"
    for b in ("a", "e", "i", "o", "u", "ai", "ou")
    for c in "bdfgklmnprstvz"
    for d in ("an", "er", "ix", "ol", "um", "ast", "ek")
][:5000]


def _sentence(rng: random.Random) -> str:
    words = rng.choices(OTHER_WORDS, weights=ZIPF, k=rng.randint(8, 16))
    if rng.random() < 0.3:  # a word of the queries' topics in three memories of ten
        words[rng.randrange(len(words))] = rng.choice(WORDS)
    return " ".join(words).capitalize() + "."


ZIPF = [1 / rank for rank in range(1, len(OTHER_WORDS) + 1)]


def _fill(agent, size: int, embedder) -> None:
    import numpy as np
    from django.utils import timezone

    from memoryapp.core.models import Embedding, Memory
    from memoryapp.lib import embedding as vectors

    rng = random.Random(size)
    generator = np.random.default_rng(size)
    dim = len(embedder.query("dimension"))
    batch = 2000
    for start in range(0, size, batch):
        count = min(batch, size - start)
        memories = Memory.objects.bulk_create(
            [
                Memory(agent=agent, content=_sentence(rng), content_key=f"k{start + i}")
                for i in range(count)
            ]
        )
        matrix = generator.standard_normal((count, dim)).astype("float32")
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        now = timezone.now()
        Embedding.objects.bulk_create(
            [
                Embedding(
                    agent=agent,
                    memory=memory,
                    embedder=embedder.name,
                    dim=dim,
                    vector=vectors.to_bytes(row),
                    source_updated_at=memory.updated_at,
                    embedded_at=now,
                )
                for memory, row in zip(memories, matrix, strict=True)
            ]
        )


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def main() -> int:
    parser = argparse.ArgumentParser(description="memoryapp recall latency by size")
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")
    os.environ["MEMORYAPP_EMBED_ON_WRITE"] = "false"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from memoryapp.core import embeddings, recall
    from memoryapp.core.models import Agent

    call_command("migrate", verbosity=0)
    embedder = embeddings.current()
    print(f"database: {connection.vendor}; embedder: {embedder.name}")
    print("| memories | recall p50 / p99 (ms) | of it, the query's embedding p50 (ms) |")
    print("|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        agent = Agent.objects.create(name=f"bench-scale-{secrets.token_hex(4)}")
        try:
            started = time.perf_counter()
            _fill(agent, size, embedder)
            if connection.vendor == "postgresql":  # what autovacuum does after a bulk write
                with connection.cursor() as cursor:
                    cursor.execute("VACUUM ANALYZE core_memory, core_embedding")
            filled = time.perf_counter() - started
            for query in QUERIES:  # warm: the model loaded, the rows in the page cache
                recall.rank(agent, query)
            total, embedding = [], []
            for i in range(args.queries):
                query = QUERIES[i % len(QUERIES)] + f" {i}"
                t0 = time.perf_counter()
                embeddings.query_vector(query)
                t1 = time.perf_counter()
                recall.rank(agent, query)
                t2 = time.perf_counter()
                embedding.append((t1 - t0) * 1000)
                total.append((t2 - t1) * 1000)
            p50, p99 = _percentiles(total)
            print(
                f"| {size:,} | {p50:.1f} / {p99:.1f} | {statistics.median(embedding):.1f} |"
                f"  (filled in {filled:.0f} s)"
            )
        finally:
            agent.delete()
    print(f"bytes per vector: {2 * len(embedder.query('dimension'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
