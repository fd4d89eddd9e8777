"""Long-term memories as Redis Agent Memory Server's client sees them: memoryapp's
memories (the agent's, active ones), each with its record (ams/models.py) when the client
wrote it. Every change goes through Memory's own methods (remember, revise, archive,
restore), so the dashboard's history of a memory has it; deleting and forgetting archive
(restorable on the dashboard), as memoryapp's own API does.

Search is full-text (memoryapp's), not by embeddings: `text` ranks the memories that
match any of its words, and `dist` is 0 for the best match and grows towards 1 as the rank
falls (1 - rank / best rank); without `text`, every memory the filters keep, newest first,
at distance 0."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone
from ninja.errors import HttpError

from memoryapp.ams import forgetting
from memoryapp.ams.models import MemoryRecord, RecordTag
from memoryapp.ams.schemas import (
    MEMORY_ID_PREFIX,
    DateFilterIn,
    EditRecordIn,
    PolicyIn,
    RecordIn,
    SearchIn,
    TagFilterIn,
    TypeFilterIn,
)
from memoryapp.core import recall
from memoryapp.core.limits import MAX_INT
from memoryapp.core.models import SELF, Agent, Memory, Session

# What a record's memory is in memoryapp's terms: every client memory is a fact, held
# with the confidence memoryapp's API gives one by default.
MEMORY_TYPE = Memory.Type.FACT
CONFIDENCE = 0.8
# How a memory without a record reads to the client.
DEFAULT_AMS_TYPE = MemoryRecord.Type.SEMANTIC


def record_of(memory: Memory) -> MemoryRecord | None:
    try:
        return memory.ams_record
    except MemoryRecord.DoesNotExist:
        return None


def ams_id(memory: Memory) -> str:
    record = record_of(memory)
    return record.record_id if record else f"{MEMORY_ID_PREFIX}{memory.pk}"


def _tags(record: MemoryRecord | None, kind: str) -> list[str] | None:
    if record is None:
        return None
    return [tag.value for tag in record.tags.all() if tag.kind == kind]


def record_dict(memory: Memory) -> dict[str, Any]:
    """A memory as the client's MemoryRecord (select_related("ams_record", "session")
    and prefetch_related("ams_record__tags") for lists)."""
    record = record_of(memory)
    session_key = record.session_key if record and record.session_key else None
    if session_key is None and memory.session_id:
        session_key = memory.session.key
    created = record.created_at if record else memory.created_at
    return {
        "id": ams_id(memory),
        "text": memory.content,
        "session_id": session_key,
        "user_id": (record.user_id or None) if record else None,
        "namespace": (record.namespace or None) if record else None,
        "last_accessed": memory.last_accessed_at or created,
        "created_at": created,
        "updated_at": memory.updated_at,
        "topics": _tags(record, RecordTag.Kind.TOPIC),
        "entities": _tags(record, RecordTag.Kind.ENTITY),
        "memory_hash": memory.content_key,
        "discrete_memory_extracted": "t",
        "memory_type": record.memory_type if record else DEFAULT_AMS_TYPE,
        "persisted_at": memory.created_at,
        "extracted_from": record.extracted_from if record else None,
        "event_date": record.event_date if record else None,
    }


def memories(agent: Agent) -> QuerySet[Memory]:
    """The agent's active memories with what the client filters on, whether or not the
    client wrote them (a memory without a record is `semantic`, in no namespace)."""
    return (
        Memory.objects.for_agent(agent)
        .active()
        .select_related("ams_record", "session")
        .prefetch_related("ams_record__tags")
        .annotate(
            ams_namespace=Coalesce("ams_record__namespace", Value("")),
            ams_user_id=Coalesce("ams_record__user_id", Value("")),
            ams_session=Coalesce(
                NullIf("ams_record__session_key", Value("")), "session__key", Value("")
            ),
            ams_type=Coalesce("ams_record__memory_type", Value(DEFAULT_AMS_TYPE)),
            ams_created=Coalesce("ams_record__created_at", "created_at"),
            ams_accessed=Coalesce("last_accessed_at", "ams_record__created_at", "created_at"),
            ams_event=F("ams_record__event_date"),
        )
    )


def _memoryapp_pk(value: str) -> int | None:
    """The memory an id of memoryapp's names (`memoryapp-memory-12`), if it is one.
    ASCII digits only: `²` and `①` are digits to str.isdigit() and not to int()."""
    digits = value.removeprefix(MEMORY_ID_PREFIX)
    if digits == value or not (digits.isascii() and digits.isdigit()) or int(digits) > MAX_INT:
        return None
    return int(digits)


def find(agent: Agent, record_id: str, *, lock: bool = False) -> Memory | None:
    """The active memory the client's id names, or None (an archived one was deleted).
    `lock`: locked for the caller's transaction."""
    memory_id = (
        MemoryRecord.objects.for_agent(agent)
        .filter(record_id=record_id)
        .values_list("memory_id", flat=True)
        .first()
    )
    if memory_id is None:
        memory_id = _memoryapp_pk(record_id)
    if memory_id is None:
        return None
    found = Memory.objects.for_agent(agent).select_related("ams_record", "session")
    if lock:
        found = found.select_for_update(of=SELF)
    return found.filter(pk=memory_id, status=Memory.Status.ACTIVE).first()


# --- writing --------------------------------------------------------------------------


def _set_tags(record: MemoryRecord, kind: str, values: list[str] | None) -> None:
    wanted = list(dict.fromkeys(values or []))
    current = [tag.value for tag in record.tags.all() if tag.kind == kind]
    if current == wanted:
        return
    record.tags.filter(kind=kind).delete()
    RecordTag.objects.bulk_create(RecordTag(record=record, kind=kind, value=v) for v in wanted)


def _set(record: MemoryRecord, changed: list[str], **values: Any) -> None:
    for name, value in values.items():
        if getattr(record, name) != value:
            setattr(record, name, value)
            changed.append(name)


def _store(record: MemoryRecord, changed: list[str]) -> None:
    """Save a new record, or the fields of an existing one that changed. Two requests
    creating one id at once: the second is a 409 (its transaction changes nothing)."""
    if record.pk is None:
        try:
            with transaction.atomic():
                record.save()
        except IntegrityError:
            raise HttpError(
                409, f"memory {record.record_id!r} was being written at the same time; retry"
            ) from None
    elif changed:
        record.save(update_fields=changed)


class SessionsByKey(dict):
    """The agent's live sessions by key, each looked up once (a record names its session
    by key; the memory links to it when it exists)."""

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self.agent = agent

    def __missing__(self, key: str) -> Session | None:
        found = Session.objects.for_agent(self.agent).active().filter(key=key).first()
        self[key] = found
        return found


def save_records(
    agent: Agent,
    records: list[RecordIn],
    *,
    actor: str,
    deduplicate: bool = True,
    working_memory: Session | None = None,
) -> list[MemoryRecord]:
    """Create each record, or change the one with its id as little as it takes (the same
    record sent again changes nothing). A new record whose text the agent already
    remembers under another id is that memory (deduplicate, as Redis's server does): it
    is not stored twice. Call inside a transaction."""
    sessions = SessionsByKey(agent)
    return [
        _save_record(agent, rec, actor, deduplicate, working_memory, sessions) for rec in records
    ]


def _existing_record(agent: Agent, record_id: str) -> MemoryRecord | None:
    record = (
        MemoryRecord.objects.for_agent(agent)
        .select_for_update(of=SELF)
        .filter(record_id=record_id)
        .first()
    )
    if record is not None:
        return record
    pk = _memoryapp_pk(record_id)
    if pk is None:
        if record_id.startswith(MEMORY_ID_PREFIX):
            raise HttpError(422, f"ids starting with {MEMORY_ID_PREFIX!r} are memoryapp's")
        return None
    memory = Memory.objects.for_agent(agent).filter(pk=pk).first()
    if memory is None:
        raise HttpError(422, f"{record_id!r} names no memory of this agent")
    return record_of(memory) or MemoryRecord(agent=agent, memory=memory, record_id=record_id)


def _current(memory: Memory, actor: str) -> Memory:
    """The memory locked, made active again when it was deleted (archived)."""
    memory = Memory.objects.select_for_update().get(pk=memory.pk)
    if memory.status == Memory.Status.SUPERSEDED:
        memory = memory.live_replacement() or memory
    if memory.status == Memory.Status.ARCHIVED:
        memory.restore(actor)
    return memory


def _remembered(agent: Agent, text: str) -> MemoryRecord | None:
    """The record of an active memory holding the same fact, if the client wrote one."""
    known = (
        Memory.objects.for_agent(agent)
        .active()
        .filter(content_key=Memory.content_key_for(text), memory_type=MEMORY_TYPE)
        .select_related("ams_record")
        .first()
    )
    return record_of(known) if known is not None else None


def _save_record(
    agent: Agent,
    rec: RecordIn,
    actor: str,
    deduplicate: bool,
    working_memory: Session | None,
    sessions: SessionsByKey,
) -> MemoryRecord:
    record = _existing_record(agent, rec.id)
    if record is None:
        known = _remembered(agent, rec.text) if deduplicate else None
        if known is not None:
            # Already remembered under another id: that record stands, unchanged.
            return _list_in(known, working_memory)
        memory, _ = Memory.remember(
            agent,
            rec.text,
            memory_type=MEMORY_TYPE,
            confidence=CONFIDENCE,
            actor=actor,
            session=sessions[rec.session_id] if rec.session_id else working_memory,
            merge=deduplicate,
        )
        record = MemoryRecord(
            agent=agent,
            memory=memory,
            record_id=rec.id,
            created_at=rec.created_at or timezone.now(),
        )
    else:
        memory = _current(record.memory, actor)
        if memory.content != rec.text:
            memory = memory.revise(actor=actor, content=rec.text)
    changed: list[str] = []
    _set(
        record,
        changed,
        memory=memory,
        memory_type=rec.memory_type,
        namespace=rec.namespace or "",
        user_id=rec.user_id or "",
        session_key=_session_key(rec, working_memory),
        event_date=rec.event_date,
        extracted_from=rec.extracted_from,
    )
    _store(record, changed)
    _set_tags(record, RecordTag.Kind.TOPIC, rec.topics)
    _set_tags(record, RecordTag.Kind.ENTITY, rec.entities)
    return _list_in(record, working_memory)


def _session_key(rec: RecordIn, working_memory: Session | None) -> str:
    """The session a record names; one a working memory lists belongs to that session
    unless it says otherwise (as Redis's server promotes them)."""
    if rec.session_id:
        return rec.session_id
    return working_memory.key if working_memory is not None else ""


def _list_in(record: MemoryRecord, working_memory: Session | None) -> MemoryRecord:
    if working_memory is not None and record.working_memory_id != working_memory.pk:
        record.working_memory = working_memory
        record.save(update_fields=["working_memory"])
    return record


def edit(agent: Agent, memory: Memory, changes: EditRecordIn, actor: str) -> Memory:
    """Change the fields given (memory locked by `find`). New text replaces the fact
    (Memory.revise): the client's id moves to the replacement. Call inside a transaction."""
    record = record_of(memory) or MemoryRecord(
        agent=agent, memory=memory, record_id=f"{MEMORY_ID_PREFIX}{memory.pk}"
    )
    if changes.text is not None and changes.text != memory.content:
        memory = memory.revise(actor=actor, content=changes.text)
    changed: list[str] = []
    given = {
        "memory_type": changes.memory_type,
        "namespace": changes.namespace,
        "user_id": changes.user_id,
        "session_key": changes.session_id,
        "event_date": changes.event_date,
    }
    _set(
        record,
        changed,
        memory=memory,
        **{name: value for name, value in given.items() if value is not None},
    )
    _store(record, changed)
    if changes.topics is not None:
        _set_tags(record, RecordTag.Kind.TOPIC, changes.topics)
    if changes.entities is not None:
        _set_tags(record, RecordTag.Kind.ENTITY, changes.entities)
    return memory


def delete(agent: Agent, record_ids: list[str], actor: str) -> int:
    """Archive the memories these ids name (restorable on the dashboard); unknown ids
    are skipped. How many were deleted. Call inside a transaction."""
    deleted = 0
    for record_id in dict.fromkeys(record_ids):
        memory = find(agent, record_id, lock=True)
        if memory is not None and memory.archive(actor):
            deleted += 1
    return deleted


# --- reading: filters and search --------------------------------------------------------


def _has_tag(kind: str, values: list[str]) -> Exists:
    return Exists(
        RecordTag.objects.filter(record=OuterRef("ams_record"), kind=kind, value__in=values)
    )


def _tag_filter(kind: str, spec: TagFilterIn) -> Q:
    """Topics or entities: any of, all of, none of (either spelling)."""
    q = Q()
    if spec.eq is not None:
        q &= Q(_has_tag(kind, [spec.eq]))
    for one in (spec.ne, spec.not_eq):
        if one is not None:
            q &= ~Q(_has_tag(kind, [one]))
    for many in (spec.any, spec.in_):
        if many is not None:
            q &= Q(_has_tag(kind, many))
    for value in spec.all or []:
        q &= Q(_has_tag(kind, [value]))
    for many in (spec.none, spec.not_in):
        if many is not None:
            q &= ~Q(_has_tag(kind, many))
    return q


def _value_filter(field: str, spec: TagFilterIn | TypeFilterIn) -> Q:
    """A field with one value (session, namespace, user, memory type)."""
    q = Q()
    if spec.eq is not None:
        q &= Q(**{field: spec.eq})
    for one in (spec.ne, spec.not_eq):
        if one is not None:
            q &= ~Q(**{field: one})
    for many in (spec.any, spec.in_):
        if many is not None:
            q &= Q(**{f"{field}__in": many})
    for value in spec.all or []:
        q &= Q(**{field: value})
    for many in (spec.none, spec.not_in):
        if many is not None:
            q &= ~Q(**{f"{field}__in": many})
    return q


_DATE_LOOKUPS = {"eq": "exact", "gt": "gt", "gte": "gte", "lt": "lt", "lte": "lte"}


def _date_filter(field: str, spec: DateFilterIn) -> Q:
    q = Q()
    for name, lookup in _DATE_LOOKUPS.items():
        value = getattr(spec, name)
        if value is not None:
            q &= Q(**{f"{field}__{lookup}": value})
    if spec.ne is not None:
        q &= ~Q(**{field: spec.ne})
    if spec.between is not None:
        q &= Q(**{f"{field}__range": sorted(spec.between)})
    return q


def filters(search: SearchIn) -> Q:
    q = Q()
    for name, field in (
        ("session_id", "ams_session"),
        ("namespace", "ams_namespace"),
        ("user_id", "ams_user_id"),
        ("memory_type", "ams_type"),
    ):
        spec = getattr(search, name)
        if spec is not None:
            q &= _value_filter(field, spec)
    for name, kind in (("topics", RecordTag.Kind.TOPIC), ("entities", RecordTag.Kind.ENTITY)):
        spec = getattr(search, name)
        if spec is not None:
            q &= _tag_filter(kind, spec)
    for name, field in (
        ("created_at", "ams_created"),
        ("last_accessed", "ams_accessed"),
        ("event_date", "ams_event"),
    ):
        spec = getattr(search, name)
        if spec is not None:
            q &= _date_filter(field, spec)
    return q


def search(agent: Agent, search: SearchIn) -> dict[str, Any]:
    """A page of the memories the filters keep, ranked by `text` when given; the ones
    served count as read (last accessed now)."""
    MemoryRecord.objects.follow_replacements(agent)
    found = memories(agent).filter(filters(search))
    text = (search.text or "").strip()
    if text:
        # Hybrid recall (memoryapp.core.recall); the distance is the cosine distance of
        # the memory's vector, or for a match by words alone how far its fused score is
        # below the best.
        ranked = recall.rank(agent, text, status="all", within=found)
        matching = {m.id for m in ranked}
        by_id = {m.id: m for m in found.filter(id__in=matching)}
        best = max((m.why.score for m in ranked), default=0.0)
        scored = [
            (
                by_id[m.id],
                round(1 - m.why.similarity, 4)
                if m.why.similarity is not None
                else (round(1 - m.why.score / best, 4) if best > 0 else 1.0),
            )
            for m in ranked
            if m.id in by_id
        ]
        if search.distance_threshold is not None:
            scored = [(m, d) for m, d in scored if d <= search.distance_threshold]
        total = len(scored)
        page = scored[search.offset : search.offset + search.limit]
    else:
        total = found.count()
        ordered = found.order_by("-ams_created", "-id")
        page = [(m, 0.0) for m in ordered[search.offset : search.offset + search.limit]]
    if page:
        Memory.objects.filter(id__in=[m.id for m, _ in page]).update(
            last_accessed_at=timezone.now(), access_count=F("access_count") + 1
        )
    end = search.offset + len(page)
    return {
        "memories": [{**record_dict(m), "dist": d} for m, d in page],
        "total": total,
        "next_offset": end if end < total else None,
    }


def forget(
    agent: Agent,
    policy: PolicyIn,
    *,
    namespace: str | None,
    user_id: str | None,
    session_id: str | None,
    limit: int,
    dry_run: bool,
    pinned: list[str],
    actor: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A forgetting pass over at most `limit` of the agent's memories (oldest first):
    the ones the policy picks are archived, unless `dry_run`. Call inside a transaction."""
    now = now or timezone.now()
    MemoryRecord.objects.follow_replacements(agent)
    scanned = memories(agent)
    for field, value in (
        ("ams_namespace", namespace),
        ("ams_user_id", user_id),
        ("ams_session", session_id),
    ):
        if value is not None:
            scanned = scanned.filter(**{field: value})
    rows = list(scanned.order_by("ams_created", "id")[:limit])
    by_id = {ams_id(m): m for m in rows}
    chosen = forgetting.to_forget(
        (
            forgetting.Candidate(
                id=key,
                memory_type=m.ams_type,
                created_at=m.ams_created,
                last_accessed=m.ams_accessed,
            )
            for key, m in by_id.items()
        ),
        forgetting.Policy(
            max_age_days=policy.max_age_days,
            max_inactive_days=policy.max_inactive_days,
            budget=policy.budget,
            memory_type_allowlist=(
                frozenset(policy.memory_type_allowlist)
                if policy.memory_type_allowlist is not None
                else None
            ),
            hard_age_multiplier=policy.hard_age_multiplier or 12.0,
        ),
        now,
        frozenset(pinned),
    )
    if not dry_run and chosen:
        locked = Memory.objects.select_for_update().filter(pk__in=[by_id[i].pk for i in chosen])
        for memory in locked:
            memory.archive(actor)
    return {"scanned": len(rows), "deleted": len(chosen), "deleted_ids": chosen, "dry_run": dry_run}


def in_working_memory(session: Session) -> list[Memory]:
    """The active memories a session's working memory lists, oldest record first."""
    return list(
        memories(session.agent).filter(ams_record__working_memory=session).order_by("ams_record")
    )
