"""The memory model: agents own sessions; a session holds the conversation (messages
grouped in turns, with tool calls), working context, findings and subtasks; long-term
memories belong to the agent and outlive sessions; every change to a memory, finding or
context item is recorded as a MemoryEvent."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from memoryapp.core.shapes import Totals
from memoryapp.lib import diff, extraction, relevance
from memoryapp.lib.extraction.context import written_after
from memoryapp.lib.extraction.identity import CallKey
from memoryapp.lib.extraction.text import at_word
from memoryapp.lib.matching import queries_match
from memoryapp.lib.tokens import DEFAULT_ENCODING

CONFIDENCE_RANGE = Q(confidence__gte=0.0) & Q(confidence__lte=1.0)

# `select_for_update(of=SELF)`: lock the rows asked for, not the rows select_related joins
# (a plain FOR UPDATE over a join to the agent locked the agent's one row on every append
# and extraction, serialising an agent's writes and deadlocking against foreign-key checks).
SELF = ("self",)


def _changes(before: dict, now: dict, fields: tuple[str, ...]) -> str:
    """The fields whose value `before` differs from `now`, as "field: value, …"."""
    changed = [f for f in fields if f in before and before[f] != now.get(f)]
    return ", ".join(f"{f.replace('_', ' ')}: {at_word(before[f], 60)}" for f in changed)


class Agent(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    ttl_seconds = models.PositiveIntegerField(default=3600)
    max_messages = models.PositiveIntegerField(default=100)
    token_budget = models.PositiveIntegerField(default=32000)
    encoding = models.CharField(max_length=64, default=DEFAULT_ENCODING)
    # Optional per-section overrides of the default budget split (null: the default share).
    system_budget = models.PositiveIntegerField(null=True, blank=True)
    conversation_budget = models.PositiveIntegerField(null=True, blank=True)
    working_budget = models.PositiveIntegerField(null=True, blank=True)
    long_term_budget = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def default_conversation_budget(self) -> int:
        """Tokens a restored history may use unless the caller says otherwise: the
        conversation override, else 5/8 (62.5%) of the token budget."""
        if self.conversation_budget is not None:
            return self.conversation_budget
        return self.token_budget * 5 // 8


def hash_api_key(raw_key: str) -> str:
    # Keys are 256-bit random strings, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ApiKeyQuerySet(models.QuerySet):
    def usable(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(
        max_length=16, help_text="The key's first characters, to tell keys apart"
    )
    # Authentication looks keys up by this hash (unique index).
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.agent})"

    @classmethod
    def issue(cls, agent: Agent, name: str = "") -> tuple[ApiKey, str]:
        """Create a key; the raw key is returned once and never stored."""
        raw = "mk_" + secrets.token_urlsafe(32)
        key = cls.objects.create(
            agent=agent, name=name, prefix=raw[:10], key_hash=hash_api_key(raw)
        )
        return key, raw

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])

    def touch(self, now: datetime | None = None) -> None:
        """Record use, at most once a minute: a conditional update, so busy keys do not
        turn every request into a write on one row."""
        now = now or timezone.now()
        stale = now - timedelta(seconds=settings.MEMORYAPP_KEY_TOUCH_SECONDS)
        if self.last_used_at is not None and self.last_used_at > stale:
            return  # recent enough: no round trip at all
        ApiKey.objects.filter(pk=self.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale)
        ).update(last_used_at=now)


class SessionQuerySet(models.QuerySet):
    def for_agent(self, agent: Agent) -> SessionQuerySet:
        return self.filter(agent=agent)

    def active(self, now: datetime | None = None) -> SessionQuerySet:
        return self.filter(expires_at__gt=now or timezone.now())

    def expired(self, now: datetime | None = None) -> SessionQuerySet:
        return self.filter(expires_at__lte=now or timezone.now())


class Session(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        COMPLETED = "completed"
        FAILED = "failed"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    key = models.CharField(max_length=200)
    goal = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    metadata = models.JSONField(default=dict, blank=True)
    ttl_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Overrides the agent's TTL when set"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_activity_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    # Denormalised totals, kept by the append path under the session's row lock.
    message_count = models.PositiveIntegerField(default=0)
    token_count = models.PositiveBigIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    turn_count = models.PositiveIntegerField(default=0)
    # Rolling summary of pruned history (memoryapp.core.summaries): the text, the last
    # seq it covers, and the last summarizer error (then the summary is stale).
    summary = models.TextField(blank=True)
    summary_through_seq = models.PositiveIntegerField(default=0)
    summary_updated_at = models.DateTimeField(null=True, blank=True)
    summary_error = models.TextField(blank=True)
    # The structured state the extractive summary is rolled forward from (lib/summarize).
    summary_state = models.JSONField(null=True, blank=True)
    # The limits of the restore that rolled the summary last (its max_messages and the
    # tokens its conversation had; null: the agent's defaults). The worker rolls it ahead
    # for the same ones after each turn: an agent that reads /context, whose conversation
    # also gets what the other sections leave and so prunes less than the default restore,
    # finds it current instead of rolling it back (and storing it) on every call.
    summary_max_messages = models.PositiveIntegerField(null=True, blank=True)
    summary_max_tokens = models.PositiveIntegerField(null=True, blank=True)
    # What extraction has seen so far, tallied for the inferred working context
    # (memoryapp.lib.extraction.context): bounded, updated under this row's lock.
    evidence = models.JSONField(null=True, blank=True)

    objects = SessionQuerySet.as_manager()

    # What a write to the conversation changes on the session row.
    CONVERSATION_FIELDS = [
        "message_count",
        "token_count",
        "input_tokens",
        "output_tokens",
        "turn_count",
        "last_activity_at",
        "expires_at",
    ]

    class Meta:
        constraints = [
            # Lookup of a session by its external key (every per-session API call).
            models.UniqueConstraint(fields=["agent", "key"], name="session_unique_key_per_agent"),
        ]
        indexes = [
            # Session list filtered by active/expired, and TTL cleanup.
            models.Index(fields=["agent", "expires_at"], name="session_agent_expiry"),
            # Cursor pagination of an agent's sessions, newest first.
            models.Index(fields=["agent", "-id"], name="session_agent_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.agent}/{self.key}"

    @property
    def cwd(self) -> str:
        """The working directory the agent's tools ran in, when its metadata says."""
        value = (self.metadata or {}).get("cwd") if isinstance(self.metadata, dict) else None
        return value if isinstance(value, str) else ""

    def effective_ttl(self) -> int:
        return self.ttl_seconds if self.ttl_seconds is not None else self.agent.ttl_seconds

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())

    def slide_expiry(self, now: datetime | None = None) -> None:
        """A write happened: the session lives another TTL from now (not saved)."""
        now = now or timezone.now()
        self.last_activity_at = now
        self.expires_at = now + timedelta(seconds=self.effective_ttl())

    def totals(self) -> Totals:
        return {
            "messages": self.message_count,
            "tokens": self.token_count,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "turns": self.turn_count,
        }

    def clear_conversation(self) -> None:
        """Delete messages, turns and their tool calls; keep goal, working context,
        findings, subtasks. Numbering starts again at 1. Call inside a transaction
        holding this session's row lock."""
        Message.objects.filter(session=self).delete()
        ToolCall.objects.filter(session=self).delete()
        Turn.objects.filter(session=self).delete()
        IdempotencyRecord.objects.filter(session=self).delete()
        self.summary = ""
        self.summary_through_seq = 0
        self.summary_error = ""
        self.summary_state = None
        self.summary_max_messages = self.summary_max_tokens = None
        self.message_count = 0
        self.token_count = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.turn_count = 0
        self.slide_expiry()
        self.save(
            update_fields=[
                *self.CONVERSATION_FIELDS,
                "summary",
                "summary_through_seq",
                "summary_error",
                "summary_state",
                "summary_max_messages",
                "summary_max_tokens",
            ]
        )


class Turn(models.Model):
    class UsageSource(models.TextChoices):
        REPORTED = "reported", "reported by the agent"
        COUNTED = "counted", "counted from the turn's messages"

    # No index of its own: turn_unique_iteration (session, iteration) serves lookups.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="turns", db_index=False
    )
    iteration = models.PositiveIntegerField()
    message_count = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    tool_call_count = models.PositiveIntegerField(default=0)
    usage_source = models.CharField(max_length=16, choices=UsageSource.choices)
    model = models.CharField(max_length=200, blank=True)
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    timestamp = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Turn list of a session in iteration order, and gapless iterations.
            models.UniqueConstraint(fields=["session", "iteration"], name="turn_unique_iteration"),
        ]

    def __str__(self) -> str:
        return f"{self.session} #{self.iteration}"

    def metadata(self) -> dict:
        return {
            "iteration": self.iteration,
            "message_count": self.message_count,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "tool_calls": self.tool_call_count,
            "timestamp": self.timestamp,
        }


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    # No index of its own: message_unique_seq (session, seq) serves lookups, and a
    # single-column one misled the planner on grown sessions (migration 0011).
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.CASCADE, related_name="messages", null=True, blank=True
    )
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    name = models.CharField(max_length=200, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    tool_calls = models.JSONField(null=True, blank=True)
    token_count = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    # A client that names its messages and sends the whole list each time (Redis Agent
    # Memory Server's, memoryapp/ams): its id for this one; when it left the client's
    # list (the row stays, seq stays gapless); its earlier versions and removals, oldest
    # first. Kept on the row so TTL cleanup's bulk deletes take them along.
    client_id = models.CharField(max_length=200, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    revisions = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            # History restore reads a session's newest messages backwards by seq.
            models.UniqueConstraint(fields=["session", "seq"], name="message_unique_seq"),
            # A client's id names one message of the session: a PUT of the whole list
            # appends only ids not stored yet (memoryapp/ams/working.py).
            models.UniqueConstraint(
                fields=["session", "client_id"],
                condition=~Q(client_id=""),
                name="message_unique_client_id",
            ),
        ]
        indexes = [
            # History restore keeps every system message: read them without a scan.
            models.Index(
                fields=["session", "seq"],
                condition=Q(role="system"),
                name="message_system_by_seq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session} {self.seq} {self.role}"


class ToolCall(models.Model):
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_call_rows")
    # Denormalised so a session's tool calls are found without joining turns.
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="tool_calls")
    tool = models.CharField(max_length=200)
    query = models.TextField(blank=True, help_text="The query or the arguments")
    success = models.BooleanField(null=True)
    output_size = models.PositiveIntegerField(default=0, help_text="Characters in the output")
    output_excerpt = models.TextField(blank=True, help_text="A bounded excerpt, never all of it")
    file_path = models.CharField(max_length=1000, blank=True)
    # The assistant's id for this call (links it to the tool message that answers it).
    call_id = models.CharField(max_length=200, blank=True)
    # Structured result metadata the tool reported (line totals, match counts), bounded.
    details = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Written by extraction: this call's kind and its own fact at the time (the finding
    # holds the latest answer to the same call; summaries read each call's own fact).
    kind = models.CharField(max_length=20, blank=True)
    fact = models.TextField(blank=True)
    fact_success = models.BooleanField(null=True)
    finding = models.ForeignKey(
        "Finding", on_delete=models.SET_NULL, null=True, blank=True, related_name="calls"
    )
    # Not run: `finding` already answered it, and the agent said so (`known_from`).
    skipped = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # Tool calls of a session, newest first (dashboard, recent tools).
            models.Index(fields=["session", "-id"], name="toolcall_session_newest"),
            # Extraction: is a tool message's call one the agent reported with the turn?
            models.Index(fields=["session", "call_id"], name="toolcall_session_call"),
        ]

    def __str__(self) -> str:
        return f"{self.tool}({self.query[:40]})"


class IdempotencyRecord(models.Model):
    """The first answer to an append sent with an Idempotency-Key, replayed on retry."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # A retry finds the first answer by session and key.
            models.UniqueConstraint(fields=["session", "key"], name="idempotency_unique_key"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.key}"


class SessionItemOnDashboard:
    """What findings and working-context items share on the dashboard: both live on
    their session's page, and each one's history is its own."""

    def history_targets(self) -> dict:
        """The rows whose changes make up this one's history: itself."""
        return {self.pk: self}

    def dashboard_url(self) -> str:
        page = reverse("dashboard:session", args=[self.session.agent.name, self.session.key])
        return f"{page}#item-{self.KIND}-{self.pk}"


class FindingQuerySet(models.QuerySet):
    def for_agent(self, agent: Agent) -> FindingQuerySet:
        return self.filter(session__agent=agent)

    def with_provenance(self) -> FindingQuerySet:
        """What the dashboard shows of each: its session, turn, message and tool call."""
        return self.select_related("session__agent", "turn", "message", "tool_call")


class Finding(SessionItemOnDashboard, models.Model):
    """What one tool call taught the agent. Its identity says exactly which call it
    answers (memoryapp.lib.extraction.identity): two different calls never share a
    finding, and the same call made again updates it."""

    class Source(models.TextChoices):
        EXTRACTED = "extracted"
        AGENT = "agent"
        MANUAL = "manual"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="findings")
    tool = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, default="other")
    query = models.TextField(blank=True)
    # sha256 of the call's identity key (kind-scoped: path, pattern + scope, command, URL…)
    identity = models.CharField(max_length=64, default="")
    fact = models.TextField()
    step = models.PositiveIntegerField(null=True, blank=True)
    success = models.BooleanField(default=True)
    file_path = models.CharField(max_length=1000, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.AGENT)
    # Structured facts of the kind (a read's language and manifest, a run's test summary).
    details = models.JSONField(null=True, blank=True)
    # Provenance: the turn, message and tool call this finding last came from.
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # No constraint in PostgreSQL (migration 0012): finding and message leave together with
    # their session, and the check at commit, once per deleted message, was most of cleanup.
    message = models.ForeignKey(
        Message,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_constraint=False,
    )
    tool_call = models.ForeignKey(
        ToolCall, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = FindingQuerySet.as_manager()

    KIND = "finding"  # its name in MemoryEvent.target_kind and the dashboard's URLs
    is_editable = True

    class Meta:
        constraints = [
            # "Already known?" looks a call up by its identity; one finding per call.
            models.UniqueConstraint(fields=["session", "identity"], name="finding_unique_identity"),
        ]
        indexes = [
            # Near-duplicate matching of natural-language (RAG) queries scans one tool's.
            models.Index(fields=["session", "tool"], name="finding_session_tool"),
            # Staleness: was this file edited after it was read?
            models.Index(fields=["session", "file_path"], name="finding_session_path"),
        ]

    def __str__(self) -> str:
        return f"{self.tool}: {at_word(self.fact, 60)}"

    def save(self, *args, **kwargs) -> None:
        # A finding made without extraction (a test, the admin) still gets its identity.
        if not self.identity:
            self.kind, key = self.key_for(self.tool, self.query, self.session.cwd)
            self.identity = key.digest
            self.file_path = self.file_path or key.path
        super().save(*args, **kwargs)

    EDITABLE = ("tool", "query", "fact", "step", "success", "file_path", "source")

    def snapshot(self) -> dict:
        return {name: getattr(self, name) for name in self.EDITABLE}

    @staticmethod
    def key_for(tool: str, query: str, cwd: str = "") -> tuple[str, CallKey]:
        """(kind, identity) of `tool(query)`; the query may be text or JSON arguments, and
        relative paths are taken from `cwd`, the session's working directory."""
        kind = extraction.kind_of(tool, query)
        return kind, extraction.call_key(kind, tool, query, cwd)

    @classmethod
    def known(cls, session: Session, tool: str, query: str) -> Finding | None:
        """The stored finding that answers `tool(query)`, if any: the same call exactly,
        or for natural-language retrieval a near-duplicate question."""
        kind, key = cls.key_for(tool, query, session.cwd)
        found = cls.objects.filter(session=session, identity=key.digest).first()
        if found is not None or kind != extraction.kinds.RAG:
            return found
        candidates = cls.objects.filter(session=session, tool__iexact=tool.strip(), kind=kind)
        # Newest first: when several match, the latest knowledge wins.
        for finding in candidates.order_by("-updated_at", "-id")[:500]:
            if queries_match(finding.query, key.display):
                return finding
        return None

    def is_stale(self) -> bool:
        """A read is stale when its file was changed after it was read (`stale_among`)."""
        return self.pk in Finding.stale_among(self.session, [self])

    @classmethod
    def mark_stale_reads(cls, session: Session, findings: list[Finding]) -> None:
        """Set `is_stale_read` on each of `findings` (what the dashboard's "edited since
        read" shows): one query when there are reads among them, none otherwise."""
        stale = cls.stale_among(session, findings)
        for finding in findings:
            finding.is_stale_read = finding.pk in stale

    @classmethod
    def stale_among(cls, session: Session, findings: list[Finding]) -> set[int]:
        """Ids of the reads among `findings` whose file was changed after the read: by an
        edit that succeeded (one query for the session's edits of those files), or by a
        shell command that writes it (`sed -i`, a formatter, a checkout; the session's
        evidence tally knows)."""
        reads = [f for f in findings if f.kind == extraction.kinds.READ and f.file_path]
        if not reads:
            return set()
        edits: dict[str, list[tuple]] = {}
        for path, step, updated in cls.objects.filter(
            session=session,
            kind=extraction.kinds.EDIT,
            success=True,
            file_path__in={f.file_path for f in reads},
        ).values_list("file_path", "step", "updated_at"):
            edits.setdefault(path, []).append((step, updated))
        stale = {r.pk for r in reads if written_after(session.evidence, r.file_path, r.step)}
        for read in reads:
            for step, updated in edits.get(read.file_path, []):
                if read.step is not None and step is not None:
                    later = step > read.step or (step == read.step and updated > read.updated_at)
                else:
                    later = updated > read.updated_at
                if later:
                    stale.add(read.pk)
                    break
        return stale

    @classmethod
    def record(
        cls,
        session: Session,
        *,
        tool: str,
        query: str,
        fact: str,
        actor: str,
        step: int | None = None,
        success: bool = True,
        file_path: str = "",
        source: str = "agent",
        kind: str | None = None,
        identity: str | None = None,
        details: dict | None = None,
        turn: Turn | None = None,
        message: Message | None = None,
        tool_call: ToolCall | None = None,
        keep_manual: bool = False,
    ) -> tuple[Finding, bool]:
        """Add a finding, or update the one that answers the same call: `(finding,
        created)`. `kind` and `identity` (the key, not its digest) come from extraction;
        without them they are computed from `tool` and `query`. With `keep_manual`
        (extraction), a person's correction of that call is left as it is. Call inside a
        transaction."""
        if kind is None or identity is None:
            kind, key = cls.key_for(tool, query, session.cwd)
            identity, shown = key.key, key.display
            file_path = file_path or key.path
        else:
            shown = query
        digest = CallKey(identity, shown).digest
        existing = cls.objects.select_for_update().filter(session=session, identity=digest).first()
        if existing is None and kind == extraction.kinds.RAG:
            existing = cls.known(session, tool, shown)
        if existing is not None:
            existing.session = session  # its event names the agent: no query for the row again
        if keep_manual and existing is not None and existing.source == cls.Source.MANUAL:
            return existing, False
        values = {
            "tool": tool.strip(),
            "kind": kind,
            "query": shown,
            "fact": fact,
            "step": step,
            "success": success,
            "file_path": file_path,
            "source": source,
            "details": details or None,
        }
        links = {"turn": turn, "message": message, "tool_call": tool_call}
        if existing is None:
            finding = cls.objects.create(session=session, identity=digest, **values, **links)
            MemoryEvent.record(finding, MemoryEvent.Action.ADD, None, finding.snapshot(), actor)
            return finding, True
        before = existing.snapshot()
        for name, value in values.items():
            setattr(existing, name, value)
        for name, value in links.items():
            if value is not None:
                setattr(existing, name, value)
        changed = existing.snapshot() != before
        existing.save()  # a repeat of the same call still moves its step and provenance
        if changed:
            MemoryEvent.record(
                existing, MemoryEvent.Action.UPDATE, before, existing.snapshot(), actor
            )
        return existing, False

    def remove(self, actor: str) -> None:
        MemoryEvent.record(self, MemoryEvent.Action.DELETE, self.snapshot(), None, actor)
        self.delete()

    REVERTIBLE = ("tool", "query", "fact", "step", "success", "file_path")

    def revert_plan(self, event: MemoryEvent) -> str | None:
        """What reverting `event` would do, in words; None when nothing."""
        if event.before is None:
            return "delete this finding"
        changes = _changes(event.before, self.snapshot(), self.REVERTIBLE)
        return f"restore {changes}" if changes else None

    def revert(self, event: MemoryEvent, actor: str) -> Finding | None:
        """Undo one change: undoing the add deletes the finding (None is answered);
        undoing a change restores what it held before, as a person's correction."""
        if event.before is None:
            self.remove(actor)
            return None
        self.edit(actor, **{k: event.before[k] for k in self.REVERTIBLE if k in event.before})
        return self

    def edit(self, actor: str, **changes) -> bool:
        """A person's correction: the finding becomes `manual` (extraction leaves it be)."""
        before = self.snapshot()
        for name, value in changes.items():
            if name not in self.EDITABLE:
                raise ValueError(f"{name} is not editable")
            setattr(self, name, value)
        self.source = self.Source.MANUAL
        if self.snapshot() == before:
            return False
        self.save()
        MemoryEvent.record(self, MemoryEvent.Action.UPDATE, before, self.snapshot(), actor)
        return True

    @classmethod
    def add_from_dashboard(
        cls, *, agent: Agent, session: Session | None, actor: str, **fields
    ) -> Finding:
        """A finding a person adds to a session (`tool`, `query`, `fact`, `success`): the
        same call again updates the finding that answers it. Call inside a transaction."""
        if session is None:
            raise ValueError("a finding belongs to a session")
        finding, _ = cls.record(session, actor=actor, source=cls.Source.MANUAL, **fields)
        return finding

    def edit_from_dashboard(self, actor: str, **fields) -> Finding:
        self.edit(actor, **fields)
        return self


class ContextItemQuerySet(models.QuerySet):
    def for_agent(self, agent: Agent) -> ContextItemQuerySet:
        return self.filter(session__agent=agent)

    def with_provenance(self) -> ContextItemQuerySet:
        """What the dashboard shows of each: its session (its evidence is in the row)."""
        return self.select_related("session__agent")


class ContextItem(SessionItemOnDashboard, models.Model):
    class Source(models.TextChoices):
        EXPLICIT = "explicit"
        INFERRED = "inferred"
        MANUAL = "manual"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="context_items")
    key = models.CharField(max_length=200)
    value = models.JSONField()
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.EXPLICIT)
    confidence = models.FloatField(default=1.0)
    # What an inferred value rests on: [{"turn", "seq", "what"}…], newest last, bounded.
    evidence = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ContextItemQuerySet.as_manager()

    KIND = "context_item"  # its name in MemoryEvent.target_kind and the dashboard's URLs
    is_editable = True

    class Meta:
        constraints = [
            # Working context is read and written by session and key.
            models.UniqueConstraint(fields=["session", "key"], name="context_unique_key"),
            models.CheckConstraint(condition=CONFIDENCE_RANGE, name="context_confidence_0_1"),
        ]

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}"

    def snapshot(self) -> dict:
        return {
            "key": self.key,
            "value": self.value,
            "source": self.source,
            "confidence": self.confidence,
        }

    @classmethod
    def put(
        cls,
        session: Session,
        key: str,
        value: object,
        *,
        source: str,
        confidence: float,
        actor: str,
        evidence: list | None = None,
    ) -> tuple[ContextItem, bool]:
        """Set one working-context item: `(item, applied)`. An inferred value never
        overwrites an explicit or manual one (then nothing changes and `applied` is
        False). Call inside a transaction."""
        item = cls.objects.select_for_update().filter(session=session, key=key).first()
        if item is not None:
            item.session = session  # its event names the agent: no query for the row again
        else:
            item = cls.objects.create(
                session=session,
                key=key,
                value=value,
                source=source,
                confidence=confidence,
                evidence=evidence or [],
            )
            MemoryEvent.record(item, MemoryEvent.Action.ADD, None, item.snapshot(), actor)
            return item, True
        if source == cls.Source.INFERRED and item.source in (
            cls.Source.EXPLICIT,
            cls.Source.MANUAL,
        ):
            return item, False
        before = item.snapshot()
        item.value, item.source, item.confidence = value, source, confidence
        new_evidence = evidence if evidence is not None else item.evidence
        if item.snapshot() == before and new_evidence == item.evidence:
            return item, True  # nothing changed: no event, no write
        item.evidence = new_evidence
        item.save(update_fields=["value", "source", "confidence", "evidence", "updated_at"])
        if item.snapshot() != before:
            MemoryEvent.record(item, MemoryEvent.Action.UPDATE, before, item.snapshot(), actor)
        return item, True

    def remove(self, actor: str) -> None:
        MemoryEvent.record(self, MemoryEvent.Action.DELETE, self.snapshot(), None, actor)
        self.delete()

    def revert_plan(self, event: MemoryEvent) -> str | None:
        """What reverting `event` would do, in words; None when nothing."""
        if event.before is None:
            return "remove this item"
        changes = _changes(event.before, self.snapshot(), ("value", "confidence"))
        return f"restore {changes}" if changes else None

    def revert(self, event: MemoryEvent, actor: str) -> ContextItem | None:
        """Undo one change: undoing the add removes the item (None is answered); undoing
        a change sets the value and confidence it had before, as a person's value."""
        if event.before is None:
            self.remove(actor)
            return None
        item, _ = ContextItem.put(
            self.session,
            self.key,
            event.before["value"],
            source=self.Source.MANUAL,
            confidence=event.before["confidence"],
            actor=actor,
        )
        return item

    @classmethod
    def add_from_dashboard(
        cls,
        *,
        agent: Agent,
        session: Session | None,
        actor: str,
        key: str,
        value,
        confidence: float = 1.0,
    ) -> ContextItem:
        """An item a person sets on a session; an existing key takes the new value. Call
        inside a transaction."""
        if session is None:
            raise ValueError("a working-context item belongs to a session")
        item, _ = cls.put(
            session, key, value, source=cls.Source.MANUAL, confidence=confidence, actor=actor
        )
        return item

    def edit_from_dashboard(self, actor: str, *, value, confidence: float) -> ContextItem:
        """A person's value: it stays until a person or the agent says otherwise."""
        item, _ = ContextItem.put(
            self.session,
            self.key,
            value,
            source=self.Source.MANUAL,
            confidence=confidence,
            actor=actor,
        )
        return item


class MemoryQuerySet(models.QuerySet):
    def for_agent(self, agent: Agent) -> MemoryQuerySet:
        return self.filter(agent=agent)

    def active(self) -> MemoryQuerySet:
        return self.filter(status=Memory.Status.ACTIVE)

    def with_provenance(self) -> MemoryQuerySet:
        """What the dashboard shows of each: its agent, the session that learned it, and
        where it was imported from."""
        return self.select_related("agent", "session", "origin")


class Memory(models.Model):
    class Type(models.TextChoices):
        FACT = "fact"
        DECISION = "decision"
        PREFERENCE = "preference"
        CONVENTION = "convention"
        LESSON = "lesson"

    class Status(models.TextChoices):
        ACTIVE = "active"
        ARCHIVED = "archived"
        SUPERSEDED = "superseded"

    class Source(models.TextChoices):
        AGENT = "agent"
        EXTRACTED = "extracted"
        MANUAL = "manual"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    # Memories belong to the agent: they stay when their session expires. An index on
    # session_id comes with the foreign key (cleanup unlinks memories by session).
    session = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="memories"
    )
    memory_type = models.CharField(max_length=32, choices=Type.choices, default=Type.FACT)
    content = models.TextField()
    # Hash of the normalized content: "the same fact again" is found by index, not scan.
    content_key = models.CharField(max_length=64, editable=False, default="")
    confidence = models.FloatField(default=0.8)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.AGENT)
    superseded_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="supersedes"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    access_count = models.PositiveIntegerField(default=0)

    objects = MemoryQuerySet.as_manager()

    KIND = "memory"  # its name in MemoryEvent.target_kind and the dashboard's URLs

    class Meta:
        verbose_name_plural = "memories"
        constraints = [
            models.CheckConstraint(condition=CONFIDENCE_RANGE, name="memory_confidence_0_1"),
        ]
        indexes = [
            # Recall without a query: an agent's active memories by confidence.
            models.Index(fields=["agent", "status", "-confidence"], name="memory_agent_confidence"),
            # remember(): is this fact already known to the agent?
            models.Index(fields=["agent", "content_key"], name="memory_agent_content"),
        ]

    def __str__(self) -> str:
        return f"[{self.memory_type}] {at_word(self.content, 60)}"

    @property
    def past_expiry(self) -> bool:
        """Its own expiry has passed (TTL cleanup archives it, if it is still active)."""
        return self.expires_at is not None and self.expires_at <= timezone.now()

    def snapshot(self) -> dict:
        return {
            "memory_type": self.memory_type,
            "content": self.content,
            "confidence": self.confidence,
            "status": self.status,
            "superseded_by": self.superseded_by_id,
        }

    @staticmethod
    def content_key_for(content: str) -> str:
        """The same fact said again has one key: its content words and negations, stemmed,
        in order (relevance.fact_key), whatever its case, punctuation and articles."""
        return hashlib.sha256(relevance.fact_key(content).encode()).hexdigest()

    @staticmethod
    def strengthen(old: float, new: float) -> float:
        """Hearing a fact again raises confidence (noisy-or): 0.6 then 0.6 gives 0.84."""
        return round(min(1.0, 1 - (1 - old) * (1 - new)), 4)

    @classmethod
    def remember(
        cls,
        agent: Agent,
        content: str,
        *,
        memory_type: str,
        confidence: float,
        actor: str,
        session: Session | None = None,
        source: str = "agent",
        merge: bool = True,
    ) -> tuple[Memory, bool]:
        """Store a fact: `(memory, created)`. The same fact again (same type, the same
        content words and negations in the same order: content_key_for) strengthens the
        active memory instead of adding a copy; `merge=False` adds the copy (a client that
        asked not to deduplicate). Call inside a transaction."""
        key = cls.content_key_for(content)
        existing = (
            cls.objects.select_for_update()
            .filter(agent=agent, content_key=key, memory_type=memory_type, status=cls.Status.ACTIVE)
            .first()
            if merge
            else None
        )
        if existing is not None:
            before = existing.snapshot()
            existing.confidence = cls.strengthen(existing.confidence, confidence)
            existing.save(update_fields=["confidence", "updated_at"])
            MemoryEvent.record(
                existing, MemoryEvent.Action.UPDATE, before, existing.snapshot(), actor
            )
            return existing, False
        memory = cls.objects.create(
            agent=agent,
            session=session,
            memory_type=memory_type,
            content=content,
            content_key=key,
            confidence=confidence,
            source=source,
        )
        MemoryEvent.record(memory, MemoryEvent.Action.ADD, None, memory.snapshot(), actor)
        return memory, True

    def revise(
        self,
        *,
        actor: str,
        content: str | None = None,
        memory_type: str | None = None,
        confidence: float | None = None,
        source: str | None = None,
    ) -> Memory:
        """Change this memory. New content replaces the fact: a new memory is created and
        this one is marked superseded, linking to it; the new one is returned. Type and
        confidence alone change this memory in place. Call inside a transaction."""
        if content is not None and content != self.content:
            replacement = Memory.objects.create(
                agent=self.agent,
                session=self.session,
                memory_type=memory_type or self.memory_type,
                content=content,
                content_key=self.content_key_for(content),
                confidence=self.confidence if confidence is None else confidence,
                source=source or self.source,
            )
            MemoryEvent.record(
                replacement, MemoryEvent.Action.ADD, None, replacement.snapshot(), actor
            )
            before = self.snapshot()
            self.status = self.Status.SUPERSEDED
            self.superseded_by = replacement
            self.save(update_fields=["status", "superseded_by", "updated_at"])
            MemoryEvent.record(self, MemoryEvent.Action.UPDATE, before, self.snapshot(), actor)
            return replacement
        before = self.snapshot()
        if memory_type is not None:
            self.memory_type = memory_type
        if confidence is not None:
            self.confidence = confidence
        if source is not None:
            self.source = source
        if self.snapshot() != before:
            self.save(update_fields=["memory_type", "confidence", "source", "updated_at"])
            MemoryEvent.record(self, MemoryEvent.Action.UPDATE, before, self.snapshot(), actor)
        return self

    def archive(self, actor: str) -> bool:
        """Forget softly: archived memories leave recall and context but can be restored."""
        if self.status != self.Status.ACTIVE:
            return False
        before = self.snapshot()
        self.status = self.Status.ARCHIVED
        self.save(update_fields=["status", "updated_at"])
        MemoryEvent.record(self, MemoryEvent.Action.DELETE, before, self.snapshot(), actor)
        return True

    def live_replacement(self, hops: int = 50) -> Memory | None:
        """The memory that holds this one's place now: the end of its chain of
        replacements (None when it was not replaced)."""
        current, seen = self.superseded_by, {self.pk}
        while (
            current is not None
            and current.status == self.Status.SUPERSEDED
            and current.superseded_by_id is not None
            and current.pk not in seen
            and len(seen) < hops
        ):
            seen.add(current.pk)
            current = current.superseded_by
        return current

    def revert_plan(self, event: MemoryEvent) -> str | None:
        """What reverting `event` (a change of this memory) would do, in words; None when
        it would do nothing, so it is not offered."""
        if event.target_id != self.pk:
            return None
        if event.before is None:
            return "forget this fact (archive it)" if self.status == self.Status.ACTIVE else None
        replaced = self.status == self.Status.SUPERSEDED and self.superseded_by_id is not None
        if replaced and event.before.get("status") == self.Status.ACTIVE:
            # An earlier change of a replaced fact: its revert brings back that state.
            also = _changes(event.before, self.snapshot(), ("memory_type", "confidence"))
            also = f" ({also})" if also else ""
            now = self.live_replacement()
            holder = (
                "the fact that replaced it"
                if now is None or now.pk == self.superseded_by_id
                else f"“{at_word(now.content, 80)}”, which holds its place now"
            )
            return f"bring back “{at_word(self.content, 80)}”{also} and archive {holder}"
        if replaced:
            return None  # an earlier change of a fact that was replaced since
        changes = _changes(event.before, self.snapshot(), ("memory_type", "confidence", "status"))
        return f"restore {changes}" if changes else None

    def revert(self, event: MemoryEvent, actor: str) -> Memory:
        """Undo one change from this memory's history. Undoing an add forgets the memory;
        undoing a replacement brings the old fact back and archives the new one; undoing
        any other change restores the type, confidence and status it had before."""
        if event.before is None:
            self.archive(actor)
            return self
        before = self.snapshot()
        replacement = self.live_replacement() if self.status == self.Status.SUPERSEDED else None
        if replacement is not None and event.before.get("status") == self.Status.ACTIVE:
            # The fact that holds this one's place now: its replacement, or the end of a
            # chain of later replacements (the ones between are already superseded).
            replacement.archive(actor)
            self.superseded_by = None
        self.memory_type = event.before.get("memory_type", self.memory_type)
        self.confidence = event.before.get("confidence", self.confidence)
        self.status = event.before.get("status", self.status)
        self.source = self.Source.MANUAL
        if self.snapshot() != before:
            self.save()
            MemoryEvent.record(self, MemoryEvent.Action.UPDATE, before, self.snapshot(), actor)
        return self

    def expire(self, actor: str = "system:cleanup") -> bool:
        """The memory's own expiry passed: archived, with an `expire` event."""
        if self.status != self.Status.ACTIVE:
            return False
        before = self.snapshot()
        self.status = self.Status.ARCHIVED
        self.save(update_fields=["status", "updated_at"])
        MemoryEvent.record(self, MemoryEvent.Action.EXPIRE, before, self.snapshot(), actor)
        return True

    def restore(self, actor: str) -> bool:
        if self.status != self.Status.ARCHIVED:
            return False
        before = self.snapshot()
        self.status = self.Status.ACTIVE
        self.save(update_fields=["status", "updated_at"])
        MemoryEvent.record(self, MemoryEvent.Action.RESTORE, before, self.snapshot(), actor)
        return True

    def remove(self, actor: str) -> None:
        """Delete for good (archive is the soft way); the history keeps a `delete` row
        with what it held. Call inside a transaction."""
        MemoryEvent.record(self, MemoryEvent.Action.DELETE, self.snapshot(), None, actor)
        self.delete()

    @property
    def is_editable(self) -> bool:
        """A replaced fact is not edited: its replacement is."""
        return self.status != self.Status.SUPERSEDED

    @classmethod
    def add_from_dashboard(
        cls,
        *,
        agent: Agent,
        session: Session | None,
        actor: str,
        content: str,
        memory_type: str,
        confidence: float,
    ) -> Memory:
        """A fact a person adds; the same fact again strengthens the one remembered.
        Call inside a transaction."""
        memory, _ = cls.remember(
            agent,
            content,
            memory_type=memory_type,
            confidence=confidence,
            actor=actor,
            session=session,
            source=cls.Source.MANUAL,
        )
        return memory

    def edit_from_dashboard(
        self, actor: str, *, content: str, memory_type: str, confidence: float
    ) -> Memory:
        """A person's edit: new content replaces the fact (the new memory is returned)."""
        return self.revise(
            actor=actor,
            content=content,
            memory_type=memory_type,
            confidence=confidence,
            source=self.Source.MANUAL,
        )

    def history_targets(self, limit: int = 50) -> dict[int, Memory]:
        """This memory and the facts it replaced, so that a replacement can be reverted
        from the memory people see now (one query per generation, at most `limit`)."""
        targets = {self.pk: self}
        frontier = [self.pk]
        while frontier and len(targets) < limit:
            replaced = Memory.objects.filter(agent_id=self.agent_id, superseded_by_id__in=frontier)
            found = [m for m in replaced if m.pk not in targets]
            targets.update((m.pk, m) for m in found)
            frontier = [m.pk for m in found]
        return targets

    def dashboard_url(self) -> str:
        page = reverse("dashboard:memories", args=[self.agent.name])
        return f"{page}#item-{self.KIND}-{self.pk}"


class MemoryEventQuerySet(models.QuerySet):
    def history_of(self, kind: str, ids) -> MemoryEventQuerySet:
        """The changes of these rows of one kind, newest first (index event_target)."""
        return self.filter(target_kind=kind, target_id__in=ids).order_by("-created_at", "-id")


class MemoryEvent(models.Model):
    class Target(models.TextChoices):
        MEMORY = "memory"
        FINDING = "finding"
        CONTEXT_ITEM = "context_item"

    class Action(models.TextChoices):
        ADD = "add"
        UPDATE = "update"
        DELETE = "delete"
        RESTORE = "restore"
        EXPIRE = "expire"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memory_events")
    target_kind = models.CharField(max_length=16, choices=Target.choices)
    target_id = models.BigIntegerField()
    action = models.CharField(max_length=16, choices=Action.choices)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    actor = models.CharField(max_length=200, help_text="agent:<name>, user:<username> or system")
    created_at = models.DateTimeField(default=timezone.now)

    objects = MemoryEventQuerySet.as_manager()

    class Meta:
        indexes = [
            # The history of one memory, finding or context item, in order.
            models.Index(fields=["target_kind", "target_id", "created_at"], name="event_target"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.target_kind}#{self.target_id} by {self.actor}"

    FIELD_LABELS = {"memory_type": "type", "superseded_by": "replaced by", "file_path": "file"}
    # The order a change's fields are shown in: what it says first, then how sure, then state.
    FIELD_ORDER = (
        "key", "content", "value", "tool", "query", "fact", "file_path", "memory_type",
        "confidence", "success", "source", "status", "superseded_by",
    )  # fmt: skip
    PERSON = "user:"  # the actor prefix of a person's change (agent:…, system:… otherwise)

    @property
    def label(self) -> str:
        """What kind of change this row is, in words: added, edited, archived, restored,
        replaced (a memory's content changed: a new memory took its place), brought back
        (a replacement undone), expired or deleted."""
        if self.action == self.Action.DELETE:
            return "archived" if self.after else "deleted"
        if self.action != self.Action.UPDATE:
            return {"add": "added", "restore": "restored", "expire": "expired"}[self.action]
        old, new = (self.before or {}).get("status"), (self.after or {}).get("status")
        if old == new:
            return "edited"
        if new == Memory.Status.ACTIVE:
            return "brought back" if old == Memory.Status.SUPERSEDED else "restored"
        return "replaced" if new == Memory.Status.SUPERSEDED else "archived"

    def changes(self, contents: dict[int, str] | None = None) -> list[diff.Change]:
        """The fields this change changed, old and new. `contents`: memory ids to their
        content, so that a replacement reads as the content it brought (a word diff)
        rather than as the id of the memory that took the fact's place."""
        before, after = self.before, self.after
        if self.target_kind == self.Target.MEMORY and contents:

            def named(snapshot: dict | None) -> dict | None:
                if not snapshot or snapshot.get("superseded_by") not in contents:
                    return snapshot
                return {**snapshot, "superseded_by": f"“{contents[snapshot['superseded_by']]}”"}

            new_id = (after or {}).get("superseded_by")
            if before and new_id in contents and before.get("superseded_by") != new_id:
                # Said as the content the edit wrote, not as the memory that holds it.
                after = {**after, "content": contents[new_id], "superseded_by": None}
            before, after = named(before), named(after)
        return diff.changes(before, after, self.FIELD_LABELS, self.FIELD_ORDER)

    @staticmethod
    def contents_for(events: list[MemoryEvent], targets: dict) -> dict[int, str]:
        """The content of each memory these events name as a replacement (for
        `changes()`): the history's own rows, and one query for any others."""
        contents = {pk: t.content for pk, t in targets.items() if isinstance(t, Memory)}
        named = {
            snapshot.get("superseded_by")
            for event in events
            if event.target_kind == MemoryEvent.Target.MEMORY
            for snapshot in (event.before, event.after)
            if snapshot
        }
        missing = {pk for pk in named if isinstance(pk, int) and pk not in contents}
        if missing:
            agents = {event.agent_id for event in events}
            found = Memory.objects.filter(pk__in=missing, agent_id__in=agents)
            contents.update(found.values_list("pk", "content"))
        return contents

    @classmethod
    def attach_people(cls, *groups) -> None:
        """Set on each memory, finding or context item of `groups` who added it
        (`added_by`: an agent, the extractor or a person) and the person who changed it
        last (`edited_by`, `edited_at`; None if no person did): one query for all."""
        by_kind: dict[str, dict] = {}
        for items in groups:
            for item in items:
                item.added_by = item.edited_by = item.edited_at = None
                by_kind.setdefault(item.KIND, {})[item.pk] = item
        if not by_kind:
            return
        wanted = Q()
        for kind, items in by_kind.items():
            wanted |= Q(target_kind=kind, target_id__in=list(items))
        rows = (
            cls.objects.filter(wanted)
            .filter(Q(action=cls.Action.ADD) | Q(actor__startswith=cls.PERSON))
            .order_by("created_at", "id")
            .values_list("target_kind", "target_id", "action", "actor", "created_at")
        )
        for kind, target_id, action, actor, when in rows:
            item = by_kind[kind][target_id]
            if action == cls.Action.ADD and item.added_by is None:
                item.added_by = actor
            elif action != cls.Action.ADD:
                item.edited_by, item.edited_at = actor, when

    @classmethod
    def record(
        cls, target: models.Model, action: str, before: dict | None, after: dict | None, actor: str
    ) -> MemoryEvent:
        if isinstance(target, Memory):
            kind, agent_id = cls.Target.MEMORY, target.agent_id
        elif isinstance(target, Finding):
            kind, agent_id = cls.Target.FINDING, target.session.agent_id
        elif isinstance(target, ContextItem):
            kind, agent_id = cls.Target.CONTEXT_ITEM, target.session.agent_id
        else:
            raise TypeError(f"no history is kept for {type(target).__name__}")
        return cls.objects.create(
            agent_id=agent_id,
            target_kind=kind,
            target_id=target.pk,
            action=action,
            before=before,
            after=after,
            actor=actor[:200],
        )


class Subtask(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        IN_PROGRESS = "in_progress"
        DONE = "done"
        BLOCKED = "blocked"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="subtasks")
    title = models.CharField(max_length=500)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    position = models.PositiveIntegerField(default=0)
    dependencies = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="dependents"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.title


class ExtractionJobQuerySet(models.QuerySet):
    def failed(self):
        """Jobs whose extraction gave up: what the dashboard counts as errors."""
        return self.filter(status=ExtractionJob.Status.FAILED)


class ExtractionJob(models.Model):
    """The outbox row for one turn's extraction: written in the ingest transaction, so a
    turn is never stored without it; dispatched after commit, re-dispatched by the sweep
    when the broker was down; its status and last error are what the dashboard shows."""

    class Status(models.TextChoices):
        PENDING = "pending"  # the broker could not take it: the sweep will
        QUEUED = "queued"  # written so with the turn, then handed to the broker
        DONE = "done"
        FAILED = "failed"

    turn = models.OneToOneField(Turn, on_delete=models.CASCADE, related_name="extraction")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="extraction_jobs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    findings_added = models.PositiveIntegerField(default=0)
    context_items_set = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    queued_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ExtractionJobQuerySet.as_manager()

    class Meta:
        indexes = [
            # The sweep: pending (or long-queued) jobs, oldest first.
            models.Index(fields=["status", "created_at"], name="extraction_status_age"),
            # The dashboard: a session's failed extractions.
            models.Index(fields=["session", "status"], name="extraction_session_status"),
        ]

    def __str__(self) -> str:
        return f"extraction of {self.turn} ({self.status})"


class PendingToolOutput(models.Model):
    """A tool's whole output, kept only until extraction has turned it into a finding;
    then it is deleted. Long-term, memory keeps the finding and the bounded excerpt."""

    tool_call = models.OneToOneField(
        ToolCall, on_delete=models.CASCADE, related_name="pending_output"
    )
    output = models.TextField()

    def __str__(self) -> str:
        return f"output of {self.tool_call_id}"


class CleanupRunQuerySet(models.QuerySet):
    def running(self) -> CleanupRunQuerySet:
        """Runs not finished yet: the one the cleanup page follows, the one a task resumes."""
        return self.filter(status=CleanupRun.Status.RUNNING)

    def under_way(self, now: datetime | None = None) -> CleanupRunQuerySet:
        """Real (not dry) runs running now: while one is, no other real run starts. A run
        whose worker died stays "running"; after STALE_AFTER it no longer counts."""
        now = now or timezone.now()
        return self.running().filter(dry_run=False, started_at__gt=now - CleanupRun.STALE_AFTER)


class CleanupRun(models.Model):
    """One run of TTL cleanup, with its progress, for the dashboard's progress bar and
    its list of past runs."""

    STALE_AFTER = timedelta(hours=1)

    class Status(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    dry_run = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    triggered_by = models.CharField(max_length=200, default="beat")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    sessions_total = models.PositiveIntegerField(default=0)
    sessions_done = models.PositiveIntegerField(default=0)
    sessions_removed = models.PositiveIntegerField(default=0)
    messages_removed = models.PositiveBigIntegerField(default=0)
    rows_removed = models.PositiveBigIntegerField(default=0)
    memories_expired = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    objects = CleanupRunQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        kind = "dry run" if self.dry_run else "cleanup"
        return f"{kind} {self.started_at:%Y-%m-%d %H:%M} ({self.status})"

    @property
    def progress(self) -> float:
        if self.status != self.Status.RUNNING:
            return 1.0
        return self.sessions_done / self.sessions_total if self.sessions_total else 0.0


class Embedding(models.Model):
    """The vector of one memory or finding (memoryapp.core.embeddings writes them, off
    the request path). It records its embedder and dimension, and the `updated_at` of
    the row it was made from: a vector is current while the embedder is the configured
    one and the row has not changed since; otherwise it is re-embedded, unless its text is
    what was embedded."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    memory = models.OneToOneField(
        "Memory", on_delete=models.CASCADE, null=True, blank=True, related_name="embedding"
    )
    finding = models.OneToOneField(
        "Finding", on_delete=models.CASCADE, null=True, blank=True, related_name="embedding"
    )
    embedder = models.CharField(max_length=200)
    dim = models.PositiveIntegerField()
    vector = models.BinaryField()  # float16, little-endian (memoryapp.lib.embedding)
    source_updated_at = models.DateTimeField()
    # sha256 of the text embedded: a row that changed but not in its text (a memory's
    # status or confidence) keeps its vector (memoryapp.core.embeddings.text_digest).
    text_digest = models.CharField(max_length=64, default="")
    embedded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(memory__isnull=False, finding__isnull=True)
                | Q(memory__isnull=True, finding__isnull=False),
                name="embedding_of_one_row",
            ),
        ]
        indexes = [
            # A scan of an agent's vectors of one embedder.
            models.Index(fields=["agent", "embedder"], name="embedding_agent_embedder"),
        ]

    def __str__(self) -> str:
        target = f"memory {self.memory_id}" if self.memory_id else f"finding {self.finding_id}"
        return f"{self.embedder} vector of {target}"


class Origin(models.Model):
    """Where an imported memory came from (memoryapp.core.moving): the system it was kept
    in, its id there, and what that system said about it that memoryapp has no field for
    (its user, agent and run ids, metadata, hash, its own times). The id is the memory's
    identity for re-imports: one memory per system and id in an agent, so importing the
    same file twice creates nothing the second time, and exporting back to that system
    gives the memory its own id again."""

    class System(models.TextChoices):
        MEM0 = "mem0", "mem0"
        LETTA = "letta", "Letta"
        AMS = "ams", "Redis Agent Memory Server"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    memory = models.OneToOneField(Memory, on_delete=models.CASCADE, related_name="origin")
    system = models.CharField(max_length=16, choices=System.choices)
    source_id = models.CharField(max_length=200)
    detail = models.JSONField(default=dict, blank=True)
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "system", "source_id"], name="origin_unique_source_id"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.system}:{self.source_id} → memory {self.memory_id}"

    @classmethod
    def attach(cls, memories: list[Memory]) -> None:
        """Give each of `memories` its origin (or none) in one query: a page of them
        reads `memory.origin` without a query per row."""
        found = {o.memory_id: o for o in cls.objects.filter(memory__in=[m.pk for m in memories])}
        for memory in memories:
            Memory.origin.related.set_cached_value(memory, found.get(memory.pk))

    @property
    def label(self) -> str:
        """How the dashboard says it: "imported from mem0, id 3f2…, at 2026-12-06 21:40
        UTC" (a Letta block: its label and agent)."""
        what = f"id {self.source_id}"
        if self.system == self.System.LETTA and self.detail.get("block"):
            what = f"core memory block {self.detail['block']} of {self.detail.get('session', '')}"
        return (
            f"imported from {self.get_system_display()}, {what}, "
            f"at {self.imported_at:%Y-%m-%d %H:%M} UTC"
        )
