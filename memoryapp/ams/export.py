"""The AMS API's part of an export document: a memory that the Redis Agent Memory Server
API wrote carries its record under `ams` (the client's id, memory type, namespace, user,
session, dates, topics and entities). memoryapp.core.export writes and reads the rest of
the document and knows this part only as a section registered with it (`RECORDS`,
registered by memoryapp/ams/apps.py), so core never imports this app.

Records: a client's record id is unique in its agent. An import naming one the agent
already has is an `ImportConflict` (nothing written), or with `replace` takes the id over:
the agent's record is removed and its memory stays, reached by memoryapp's id from then
on, as a replaced session's memories stay. An id of memoryapp's (`memoryapp-memory-<pk>`,
a record the client made by naming a memory written through /api/v1) names the new
memory's pk after an import. A record's session (`session_id`, and the session whose
working memory lists it) follows a session renamed by the import; a working memory not
created by the import (not in the document, or expired) is dropped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from memoryapp.ams.models import MemoryRecord, RecordTag
from memoryapp.ams.schemas import MEMORY_ID_PREFIX
from memoryapp.core.export import BATCH, Exported, ImportConflict, Loc
from memoryapp.core.models import Agent, Memory, Session


def _is_memoryapps(record_id: str) -> bool:
    return record_id.startswith(MEMORY_ID_PREFIX)


def _client_record_ids(memories: list[Exported]) -> list[str]:
    """The client's record ids among these memories (not memoryapp's: those name the new
    memory's pk)."""
    return [m["ams"]["id"] for m in memories if "ams" in m and not _is_memoryapps(m["ams"]["id"])]


class Records:
    """The `ams` section of a memory's export (memoryapp.core.export.MemorySection)."""

    name = "ams"

    def with_rows(self, memories: QuerySet[Memory]) -> QuerySet[Memory]:
        """Memories with their record, its working memory and its tags, in two queries."""
        return memories.select_related("ams_record__working_memory").prefetch_related(
            "ams_record__tags"
        )

    def export(self, memory: Memory, sessions: set[int]) -> Exported | None:
        try:
            record = memory.ams_record
        except MemoryRecord.DoesNotExist:
            return None
        listed_in = record.working_memory if record.working_memory_id in sessions else None
        tags = list(record.tags.all())
        return {
            "id": record.record_id,
            "memory_type": record.memory_type,
            "namespace": record.namespace,
            "user_id": record.user_id,
            "session_id": record.session_key,
            "event_date": (
                record.event_date.isoformat() if record.event_date is not None else None
            ),
            "created_at": record.created_at.isoformat(),
            "extracted_from": record.extracted_from,
            "working_memory": listed_in.key if listed_in is not None else None,
            "topics": [t.value for t in tags if t.kind == RecordTag.Kind.TOPIC],
            "entities": [t.value for t in tags if t.kind == RecordTag.Kind.ENTITY],
        }

    def check(self, located: list[tuple[Loc, Exported]]) -> list[tuple[Loc, str]]:
        problems = []
        record_ids: set[str] = set()
        for at, memory in located:
            if "ams" in memory:
                if memory["ams"]["id"] in record_ids:
                    problems.append(
                        ((*at, "ams", "id"), "record ids are unique across the document")
                    )
                record_ids.add(memory["ams"]["id"])
        return problems

    def held(self, agent: Agent, memories: list[Exported]) -> list[str]:
        """The client's record ids among `memories` that the agent has, sorted."""
        record_ids = _client_record_ids(memories)
        if not record_ids:
            return []
        held = MemoryRecord.objects.for_agent(agent).filter(record_id__in=record_ids)
        return sorted(held.values_list("record_id", flat=True))

    def write(
        self,
        agent: Agent,
        written: list[tuple[Memory, Exported]],
        created: dict[str, Session],
        renamed: dict[str, str],
        replace: bool,
    ) -> None:
        """The records and tags of the memories written, in a constant number of queries.
        With `replace`, a record of the agent's holding one of their ids is removed first
        (its memory stays). `created`: the sessions made, by the key the document gives
        them; `renamed`: the key each document session is stored under."""
        exported: list[tuple[Memory, Any]] = [(row, m["ams"]) for row, m in written if "ams" in m]
        if not exported:
            return
        record_ids = _client_record_ids([m for _, m in written])
        if replace and record_ids:
            MemoryRecord.objects.for_agent(agent).filter(record_id__in=record_ids).delete()
        records = [
            MemoryRecord(
                agent=agent,
                memory=row,
                record_id=f"{MEMORY_ID_PREFIX}{row.pk}" if _is_memoryapps(a["id"]) else a["id"],
                memory_type=a["memory_type"],
                namespace=a["namespace"],
                user_id=a["user_id"],
                session_key=renamed.get(a["session_id"], a["session_id"]),
                event_date=_when(a["event_date"]),
                created_at=_when(a["created_at"]),
                extracted_from=a["extracted_from"],
                working_memory=created.get(a["working_memory"] or ""),
            )
            for row, a in exported
        ]
        try:
            with transaction.atomic():
                MemoryRecord.objects.bulk_create(records, batch_size=BATCH)
        except IntegrityError:
            raise ImportConflict([], sorted(record_ids)) from None  # written meanwhile
        RecordTag.objects.bulk_create(
            [
                RecordTag(record=record, kind=kind, value=value)
                for record, (_, a) in zip(records, exported, strict=True)
                for kind, values in (
                    (RecordTag.Kind.TOPIC, a["topics"]),
                    (RecordTag.Kind.ENTITY, a["entities"]),
                )
                for value in values
            ],
            batch_size=BATCH,
        )


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


RECORDS = Records()
