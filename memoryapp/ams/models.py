"""What Redis Agent Memory Server's clients say about a long-term memory that memoryapp's
Memory has no field for: the client's id, its memory type, namespace, user, session,
event date, topics and entities. The text, its history, status and access times stay on
the Memory (edited through its own methods, so the dashboard's history has every change);
a memory written through /api/v1 has no record, and the client sees it with an id of
memoryapp's (`memoryapp-memory-<pk>`)."""

from __future__ import annotations

from django.db import models
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from memoryapp.core.models import Agent, Memory, Session


class MemoryRecordQuerySet(models.QuerySet):
    def for_agent(self, agent: Agent) -> MemoryRecordQuerySet:
        return self.filter(agent=agent)

    def follow_replacements(self, agent: Agent, hops: int = 10) -> None:
        """A memory whose text changed outside this API (the dashboard, /api/v1) was
        replaced by a new one: its record moves to the replacement, so the client's id
        names the fact as it reads now. One UPDATE when nothing moved."""
        replacement = Memory.objects.filter(pk=OuterRef("memory_id")).values("superseded_by_id")
        for _ in range(hops):
            moved = (
                self.for_agent(agent)
                .filter(
                    memory__status=Memory.Status.SUPERSEDED, memory__superseded_by__isnull=False
                )
                # A replacement the client already names keeps its own record (two ids
                # for one memory would break the one-to-one link: every call a 500).
                .exclude(memory__superseded_by__ams_record__isnull=False)
                .update(memory_id=Subquery(replacement[:1]))
            )
            if not moved:
                return


class MemoryRecord(models.Model):
    class Type(models.TextChoices):
        EPISODIC = "episodic"
        SEMANTIC = "semantic"
        MESSAGE = "message"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    memory = models.OneToOneField(Memory, on_delete=models.CASCADE, related_name="ams_record")
    record_id = models.CharField(max_length=200)
    memory_type = models.CharField(max_length=16, choices=Type.choices, default=Type.SEMANTIC)
    namespace = models.CharField(max_length=200, blank=True)
    user_id = models.CharField(max_length=200, blank=True)
    session_key = models.CharField(max_length=200, blank=True)
    event_date = models.DateTimeField(null=True, blank=True)
    # When the client says it was made (it may import older memories).
    created_at = models.DateTimeField(default=timezone.now)
    extracted_from = models.JSONField(null=True, blank=True)
    # The session whose working memory lists this record (indexed: reading a working
    # memory lists its records). No database constraint: TTL cleanup deletes sessions in
    # bulk SQL, and the record outlives its session.
    working_memory = models.ForeignKey(
        Session,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )

    objects = MemoryRecordQuerySet.as_manager()

    class Meta:
        constraints = [
            # GET, PATCH and DELETE by the client's id; one record per id and agent.
            models.UniqueConstraint(fields=["agent", "record_id"], name="ams_record_unique_id"),
        ]

    def __str__(self) -> str:
        return f"{self.record_id} → memory {self.memory_id}"


class RecordTag(models.Model):
    """One topic or entity of a record: the search filters on them in SQL."""

    class Kind(models.TextChoices):
        TOPIC = "topic"
        ENTITY = "entity"

    record = models.ForeignKey(
        MemoryRecord, on_delete=models.CASCADE, related_name="tags", db_index=False
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    value = models.CharField(max_length=200)

    class Meta:
        ordering = ["id"]
        constraints = [
            # The search's topic and entity filters: EXISTS (record, kind, value).
            models.UniqueConstraint(fields=["record", "kind", "value"], name="ams_tag_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"
