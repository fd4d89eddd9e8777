"""Moving memory in from another memory system (memoryapp.core.formats: mem0, Letta; the
AMS API's own, memoryapp/ams/moving.py), written once for all of them.

A reader turns the source into a `Plan` (sessions with their messages and working
context; memories with the history the source kept), checking every field as it goes
(`SourceError` names where the source broke; nothing is written then). `move_in` compares
the plan with what the agent holds and, unless it is a dry run, writes it:

- a memory whose id in its system the agent already holds (an `Origin` row) is skipped:
  importing the same file twice creates nothing the second time;
- a memory that says what an active memory of the agent says is imported all the same and
  the line says which one it repeats: an imported memory keeps its identity (the duplicate
  is shown, not merged);
- a session whose key the agent has live is skipped, with the reason;
- everything else is created: a memory with its history replayed through Memory's own
  methods (add, replace, archive), each change at the time and by the actor the source
  recorded, and an `Origin` naming the system, the id and when it came; a session's
  messages as turns (one per user message, each extracted as an appended turn is), its
  working context as explicit items whose evidence says where each came from.

One transaction per session and one per batch of memories: a failure leaves whole
sessions and whole batches, never half of one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.limits import MAX_FACT_CHARS, MAX_MESSAGES_PER_TURN
from memoryapp.core.models import (
    Agent,
    ContextItem,
    Memory,
    MemoryEvent,
    Message,
    Origin,
    Session,
)
from memoryapp.lib.extraction.text import at_word

BATCH = 200  # memories written per transaction


class SourceError(ValueError):
    """The source is malformed or truncated: `where` names the place (a JSON path, a
    table and row), `what` what is wrong there."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")
        self.where, self.what = where, what


# The times an import takes: after 1970 and at most a day ahead (a clock a little off),
# time zone required (mem0's `expiration_date` is a date, bounded apart).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
AHEAD = timedelta(days=1)


def checked_time(moment: datetime, where: str) -> datetime:
    """`moment` if an import may store it, else SourceError."""
    if moment.tzinfo is None:
        raise SourceError(where, "a time without a time zone")
    if not EARLIEST <= moment <= timezone.now() + AHEAD:
        raise SourceError(where, f"{moment.isoformat()[:40]} is before 1970 or in the future")
    return moment


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_json(data: bytes, name: str) -> Any:
    """`data` parsed, or SourceError naming where it broke (truncated, not JSON, nested
    past what a parser takes, NaN or Infinity)."""
    try:
        return json.loads(data, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{name}: line {exc.lineno} column {exc.colno}",
                          f"not JSON ({exc.msg}): truncated?") from None  # fmt: skip
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SourceError(name, f"not JSON ({str(exc)[:80] or exc.__class__.__name__})") from None


@dataclass
class Change:
    """One change the source recorded: `content` after it (None for a delete)."""

    action: str  # "add", "update" or "delete"
    content: str | None
    at: datetime | None
    actor: str


@dataclass
class MemoryIn:
    source_id: str
    content: str
    memory_type: str = Memory.Type.FACT
    confidence: float = 0.8
    history: list[Change] = field(default_factory=list)  # oldest first
    deleted: bool = False
    created_at: datetime | None = None
    expires_at: datetime | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    payload: Any = None  # the source's own object, for a system's own writer


@dataclass
class MessageIn:
    role: str
    content: str
    created_at: datetime | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    client_id: str = ""


@dataclass
class SessionIn:
    key: str
    messages: list[MessageIn] = field(default_factory=list)
    # Working context: name -> (value, where it came from).
    context: dict[str, tuple[Any, str]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    goal: str = ""
    ttl_seconds: int | None = None  # None: the agent's
    payload: Any = None  # the source's own object, for a system's own writer


@dataclass
class Plan:
    system: str  # Origin.System
    source: str  # the file or address it was read from, for the report
    sessions: list[SessionIn] = field(default_factory=list)
    memories: list[MemoryIn] = field(default_factory=list)
    notes: list[Line] = field(default_factory=list)  # what the reader left out, and why
    # A system whose memory this app also serves through an API of its own (the AMS API)
    # writes through that API's functions instead, so what its clients read afterwards is
    # what they would have read had they written it there; `held` names what the agent
    # already holds by that system's ids (id -> why).
    write_session: Callable[[Agent, SessionIn], Session] | None = None
    write_memory: Callable[[Agent, MemoryIn], Memory] | None = None
    held: Callable[[Agent, list[str]], dict[str, str]] | None = None


@dataclass
class Line:
    kind: str  # "session" or "memory"
    source_id: str
    action: str  # "create" or "skip"
    why: str
    text: str


@dataclass
class Report:
    system: str
    source: str
    dry_run: bool
    lines: list[Line] = field(default_factory=list)

    def count(self, kind: str, action: str) -> int:
        return sum(1 for line in self.lines if line.kind == kind and line.action == action)

    @property
    def summary(self) -> str:
        """ "3 sessions and 12 memories created; 2 memories skipped" (would be, dry)."""
        done = "would be " if self.dry_run else ""
        parts = []
        for action, verb in (("create", "created"), ("skip", "skipped")):
            counted = [
                f"{n} {one if n == 1 else many}"
                for kind, one, many in (
                    ("session", "session", "sessions"),
                    ("memory", "memory", "memories"),
                )  # fmt: skip
                if (n := self.count(kind, action))
            ]
            if counted:
                parts.append(f"{' and '.join(counted)} {done}{verb}")
        return "; ".join(parts) or "nothing to import"


@dataclass
class Source:
    """What a person hands an importer: files (each its bytes and name) or a server's
    address."""

    files: list[tuple[bytes, str]] = field(default_factory=list)
    url: str = ""
    options: dict[str, list[str]] = field(default_factory=dict)  # a system's own


@dataclass
class System:
    """A memory system memoryapp moves memory in from and out to."""

    name: str  # Origin.System
    label: str
    takes: str  # what to hand it, in words (the command's help, the dashboard's page)
    read: Callable[[Source], Plan]
    export: Callable[[Agent], dict[str, Any]] | None = None


SYSTEMS: dict[str, System] = {}


def add_system(system: System) -> None:
    """Offer `system` to the import command and page (an app registers its own from its
    AppConfig.ready, as the AMS API does)."""
    SYSTEMS[system.name] = system


def _preview(text: str) -> str:
    return at_word(" ".join(text.split()), 120)


def _plan_memories(agent: Agent, plan: Plan) -> list[tuple[MemoryIn, Line]]:
    held = dict(
        Origin.objects.filter(
            agent=agent, system=plan.system, source_id__in=[m.source_id for m in plan.memories]
        ).values_list("source_id", "memory_id")
    )
    keys = [Memory.content_key_for(m.content) for m in plan.memories]
    same = dict(
        Memory.objects.filter(agent=agent, status=Memory.Status.ACTIVE, content_key__in=keys)
        .order_by("pk")
        .values_list("content_key", "pk")
    )
    reasons = {i: f"already imported: memory #{pk}" for i, pk in held.items()}
    if plan.held is not None:
        elsewhere = plan.held(
            agent, [m.source_id for m in plan.memories if m.source_id not in held]
        )
        reasons.update(elsewhere)
    lines = []
    repeated: set[str] = set()
    for memory, key in zip(plan.memories, keys, strict=True):
        action, why = "create", "new"
        if memory.source_id in repeated:
            action, why = "skip", "repeated in the source: the first is imported"
        elif memory.source_id in reasons:
            action, why = "skip", reasons[memory.source_id]
        elif memory.deleted:
            why = "deleted in the source: imported archived, with its history"
        elif key in same:
            why = f"says what memory #{same[key]} says: imported beside it, not merged"
        repeated.add(memory.source_id)
        line = Line("memory", memory.source_id, action, why, _preview(memory.content))
        lines.append((memory, line))
    return lines


def _plan_sessions(agent: Agent, plan: Plan) -> list[tuple[SessionIn, Line]]:
    now = timezone.now()
    live = set(
        Session.objects.for_agent(agent)
        .active(now)
        .filter(key__in=[s.key for s in plan.sessions])
        .values_list("key", flat=True)
    )
    lines = []
    repeated: set[str] = set()
    for session in plan.sessions:
        n = len(session.messages)
        told = f"{n} message{'s' if n != 1 else ''}"
        if session.context:
            told += f", {len(session.context)} working-context items"
        if session.key in repeated:
            why = "repeated in the source: the first is imported"
            line = Line("session", session.key, "skip", why, told)
        elif session.key in live:
            why = "a live session has this key: nothing of it is changed"
            line = Line("session", session.key, "skip", why, told)
        else:
            line = Line("session", session.key, "create", "new", told)
        repeated.add(session.key)
        lines.append((session, line))
    return lines


def move_in(
    agent: Agent, plan: Plan, *, dry_run: bool, actor: str, on_batch: Callable | None = None
) -> Report:
    """Import `plan` into `agent` (or, with `dry_run`, only say what would happen): the
    report has a line per session and memory with what was (would be) done and why."""
    report = Report(plan.system, plan.source, dry_run)
    sessions = _plan_sessions(agent, plan)
    memories = _plan_memories(agent, plan)
    report.lines = [line for _, line in sessions] + [line for _, line in memories] + plan.notes
    if dry_run:
        return report
    for session, line in sessions:
        if line.action == "create":
            try:
                with transaction.atomic():
                    write = plan.write_session or (lambda a, s: _write_session(a, s, plan.system))
                    _mark_imported(write(agent, session), plan)
            except SourceError as exc:
                line.action, line.why = "skip", f"refused: {exc.what}"
    wanted = [(m, line) for m, line in memories if line.action == "create"]
    for start in range(0, len(wanted), BATCH):
        with transaction.atomic():
            for memory, line in wanted[start : start + BATCH]:
                try:
                    with transaction.atomic():
                        _write_memory_and_origin(agent, memory, plan)
                except SourceError as exc:
                    line.action, line.why = "skip", f"refused: {exc.what}"
        if on_batch is not None:
            on_batch(min(start + BATCH, len(wanted)), len(wanted))
    return report


def _write_memory_and_origin(agent: Agent, memory: MemoryIn, plan: Plan) -> None:
    if plan.write_memory is not None:
        row = plan.write_memory(agent, memory)
    else:
        row = _write_memory(agent, memory, plan.system)
    Origin.objects.create(
        agent=agent, memory=row, system=plan.system, source_id=memory.source_id,
        detail=memory.detail,
    )  # fmt: skip


# --- writing --------------------------------------------------------------------------------


def _turns(messages: list[MessageIn]) -> list[list[MessageIn]]:
    """Messages cut into turns: each user message starts one (a leading system message
    joins the first), at most MAX_MESSAGES_PER_TURN each."""
    turns: list[list[MessageIn]] = []
    for message in messages:
        starts = message.role == "user" and turns and any(m.role != "system" for m in turns[-1])
        if not turns or starts or len(turns[-1]) >= MAX_MESSAGES_PER_TURN:
            turns.append([])
        turns[-1].append(message)
    return turns


def _write_session(agent: Agent, session: SessionIn, system: str) -> Session:
    for messages in _turns(session.messages):
        append_turn(
            agent,
            session.key,
            TurnInput(
                messages=[
                    MessageInput(m.role, m.content, m.name, m.tool_call_id, m.tool_calls)
                    for m in messages
                ],
                timestamp=messages[-1].created_at,
            ),
        )
    row, created = Session.objects.get_or_create(
        agent=agent, key=session.key, defaults={"expires_at": timezone.now()}
    )
    if created:
        row.slide_expiry(timezone.now())
    row.metadata = {**(row.metadata or {}), **session.metadata}
    row.goal = row.goal or session.goal[:10_000]
    if session.ttl_seconds is not None:
        row.ttl_seconds = session.ttl_seconds
        row.slide_expiry(timezone.now())
    row.save(update_fields=["metadata", "goal", "ttl_seconds", "expires_at", "last_activity_at"])
    stored = Message.objects.filter(session=row).order_by("seq")
    for message, source in zip(stored, session.messages, strict=True):
        update = {"created_at": source.created_at} if source.created_at else {}
        if source.client_id:
            update["client_id"] = source.client_id
        if update:
            Message.objects.filter(pk=message.pk).update(**update)
    for key, (value, where) in session.context.items():
        ContextItem.put(
            row,
            key,
            value,
            source=ContextItem.Source.EXPLICIT,
            confidence=1.0,
            actor=f"import:{system}",
            evidence=[{"turn": 0, "seq": None, "what": where}],
        )
    return row


def _mark_imported(session: Session, plan: Plan) -> None:
    """The session says where it came from (its page shows it)."""
    imported = {
        "system": plan.system,
        "from": Origin.System(plan.system).label,
        "source": plan.source[:500],
        "at": timezone.now().astimezone(UTC).isoformat(timespec="seconds"),
    }
    session.metadata = {**(session.metadata or {}), "imported": imported}
    session.save(update_fields=["metadata"])


def _events_since(memory_ids: list[int], after: int) -> QuerySet[MemoryEvent]:
    return MemoryEvent.objects.filter(
        target_kind=MemoryEvent.Target.MEMORY, target_id__in=memory_ids, pk__gt=after
    )


def last_event_id() -> int:
    """The newest history row's id: the changes made after it are `pk__gt` it."""
    last = MemoryEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
    return last or 0


def _write_memory(agent: Agent, memory: MemoryIn, system: str) -> Memory:
    """The memory, its history replayed through Memory's methods with the source's times
    and actors; the memory as it reads now is returned."""
    first = Change("add", memory.content, memory.created_at, f"import:{system}")
    history = memory.history or [first]
    if history[0].action != "add" or history[0].content is None:
        history = [first, *history]
    row: Memory | None = None
    chain: list[int] = []  # the memory's rows, first version first
    for change in history:
        mark = last_event_id()
        actor = change.actor[:200]
        if row is None:
            row, _ = Memory.remember(
                agent,
                change.content[:MAX_FACT_CHARS],
                memory_type=memory.memory_type,
                confidence=memory.confidence,
                actor=actor,
                merge=False,
            )
        elif change.action == "delete":
            row.archive(actor)
        elif change.content is not None and change.content != row.content:
            if row.status != Memory.Status.ACTIVE:
                row.restore(actor)
            row = row.revise(actor=actor, content=change.content[:MAX_FACT_CHARS])
        when = change.at or timezone.now()
        if row.pk not in chain:
            chain.append(row.pk)
            Memory.objects.filter(pk=row.pk).update(created_at=when)
        _events_since(chain, mark).update(created_at=when)
        Memory.objects.filter(pk__in=chain[-2:]).update(updated_at=when)
    if memory.deleted and row.status == Memory.Status.ACTIVE:
        row.archive(f"import:{system}")
    if memory.expires_at is not None:
        Memory.objects.filter(pk=row.pk).update(expires_at=memory.expires_at)
    return row


# --- in memoryapp's own export and import (memoryapp.core.export) -----------------------------


class Origins:
    """The `origin` section of a memory's export (memoryapp.core.export.MemorySection):
    an agent exported and imported elsewhere keeps where each memory came from, so a
    later import from that system still skips what it brought."""

    name = "origin"

    def with_rows(self, memories: QuerySet[Memory]) -> QuerySet[Memory]:
        return memories.select_related("origin")

    def export(self, memory: Memory, sessions: set[int]) -> dict[str, Any] | None:
        try:
            origin = memory.origin
        except Origin.DoesNotExist:
            return None
        return {
            "system": origin.system,
            "source_id": origin.source_id,
            "detail": origin.detail,
            "imported_at": origin.imported_at.isoformat(),
        }

    def check(self, located: list) -> list:
        problems, seen = [], set()
        for at, memory in located:
            if "origin" in memory:
                pair = (memory["origin"]["system"], memory["origin"]["source_id"])
                if pair in seen:
                    problems.append(((*at, "origin", "source_id"), "one memory per source id"))
                seen.add(pair)
        return problems

    def _pairs(self, memories: list[dict]) -> list[tuple[str, str]]:
        return [
            (m["origin"]["system"], m["origin"]["source_id"]) for m in memories if "origin" in m
        ]

    def _held(self, agent: Agent, memories: list[dict]) -> QuerySet[Origin]:
        pairs = self._pairs(memories)
        held = Origin.objects.filter(agent=agent, source_id__in=[i for _, i in pairs])
        wanted = set(pairs)
        return held.filter(pk__in=[o.pk for o in held if (o.system, o.source_id) in wanted])

    def held(self, agent: Agent, memories: list[dict]) -> list[str]:
        return sorted(f"{o.system}:{o.source_id}" for o in self._held(agent, memories))

    def write(self, agent, written, created, renamed, replace) -> None:
        exported = [(row, m) for row, m in written if "origin" in m]
        if replace:
            self._held(agent, [m for _, m in exported]).delete()  # their memories stay
        Origin.objects.bulk_create(
            [
                Origin(
                    agent=agent,
                    memory=row,
                    system=m["origin"]["system"],
                    source_id=m["origin"]["source_id"],
                    detail=m["origin"]["detail"],
                    imported_at=datetime.fromisoformat(m["origin"]["imported_at"]),
                )
                for row, m in exported
            ]
        )


ORIGINS = Origins()
