"""Export and import of a session, or a whole agent, as one JSON document.

An export holds everything a session is: its messages (content, role, token count, seq,
time), turns (usage, model, time) with their tool-call rows and extraction jobs, findings
(identity, provenance, staleness), working context (with the evidence of inferred items),
subtasks, the session's goal, metadata, TTL and expiry, the extraction evidence tally, and
the long-term memories it produced; every finding, context item and memory carries its
history (MemoryEvent rows, oldest first), and a memory carries what another app keeps
beside it, each as a section of its own (a `MemorySection`: the Redis Agent Memory Server
API's record, `ams`, memoryapp/ams/export.py; where an imported memory came from,
`origin`, memoryapp/core/moving.py). An agent's export
holds all its live sessions, its memories that no live session produced, and its
settings.

Each object is in the shape the API already answers for it (`session_summary`, the turn
list's items, `message_dict`, `finding_dict`, the context item, the subtask, the memory),
plus what an exact copy needs and the API does not show (memoryapp/api/export.py's schema
declares each object, once). Ids are the source database's; the document's cross
references use them (a finding's tool call, a tool call's finding, a memory's
replacement, a subtask's dependencies, the `superseded_by` in a memory event's
snapshots) and an import maps them to the rows it creates. A reference to a memory not
in the document (one deleted since) is exported as null, so that every document this
module writes can be imported.

Left out, on purpose: the rolling summary of pruned history (a cache: recomputed from the
messages on the first read, the same text with the extractive summarizer), idempotency
records (a retry window, not memory), and the history of findings, context items and
memories deleted for good (their rows are gone, so nothing says which session they were
in).

Import writes rows directly rather than through `append_turn`, because it sets history and
timestamps the write API cannot, all in one transaction, after `check_document` found
nothing wrong (gapless seqs and iterations, turn ranges, totals that match the rows,
references that resolve); nothing is written when a check fails. Token counts are kept as
exported (counted with the source agent's encoding). Turns whose extraction ran are
imported with their job as it ended, so nothing is extracted again; a turn the export
caught before its extraction ran carries its tool calls' whole outputs, and its job is
dispatched after the import commits, as the source's will be.

Memory: the export holds one session at a time (read under its row lock, so each session
is a consistent snapshot) and an agent's own memories a page at a time, and streams the
document out as it goes; the set of the agent's memory ids is kept for the whole export.
An import holds its whole document (bounded by the request size limit).

Sections: an app that keeps rows beside memories registers a `MemorySection` from its
AppConfig.ready (`add_memory_section`); this module reads, checks and writes each through
it and never imports the app. Something a section names that the agent already holds (the
AMS API's record ids) is an `ImportConflict`, unless `replace`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from memoryapp.core.context import context_item_dict, finding_dict, memory_dict
from memoryapp.core.conversation import session_summary
from memoryapp.core.dispatch import dispatch_extraction
from memoryapp.core.models import (
    SELF,
    Agent,
    ContextItem,
    ExtractionJob,
    Finding,
    Memory,
    MemoryEvent,
    Message,
    PendingToolOutput,
    Session,
    Subtask,
    ToolCall,
    Turn,
)
from memoryapp.core.restore import message_dict
from memoryapp.core.shapes import HistoryMessage, Totals
from memoryapp.lib import tokens

FORMAT = "memoryapp-export"
VERSION = 1
Scope = Literal["session", "agent"]

# Rows written per INSERT; memories of an agent's export read per page.
BATCH = 500
MEMORY_PAGE = 500


# An object of the document (an agent's settings, a session, a turn, a tool call, a finding,
# a context item, a subtask, a memory, a change in a history): what the functions below
# write and the import reads. Its fields and their bounds are declared once, by the schema
# the import is checked against and the OpenAPI document publishes (ExportDocument and the
# objects it holds, memoryapp/api/export.py); tests/test_export.py holds that an export
# writes every field that schema declares and nothing else.
Exported = dict[str, Any]


# --- export -----------------------------------------------------------------------------------


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def agent_settings(agent: Agent) -> Exported:
    return {
        "name": agent.name,
        "ttl_seconds": agent.ttl_seconds,
        "max_messages": agent.max_messages,
        "token_budget": agent.token_budget,
        "encoding": agent.encoding,
        "system_budget": agent.system_budget,
        "conversation_budget": agent.conversation_budget,
        "working_budget": agent.working_budget,
        "long_term_budget": agent.long_term_budget,
        "default_conversation_budget": agent.default_conversation_budget(),
    }


def _event(event: MemoryEvent, known_memories: set[int] | None) -> Exported:
    before, after = event.before, event.after
    if event.target_kind == MemoryEvent.Target.MEMORY and known_memories is not None:
        before, after = (_known_refs(s, known_memories) for s in (before, after))
    return {
        "action": event.action,
        "before": before,
        "after": after,
        "actor": event.actor,
        "created_at": event.created_at.isoformat(),
    }


def _known_refs(snapshot: dict | None, known: set[int]) -> dict | None:
    """A memory snapshot whose `superseded_by` names a memory outside the document reads
    null: an import could not point it anywhere."""
    if isinstance(snapshot, dict) and snapshot.get("superseded_by") not in known | {None}:
        return {**snapshot, "superseded_by": None}
    return snapshot


def _histories(agent: Agent, targets: dict[str, Iterable[int]]) -> dict[tuple[str, int], list]:
    """Every change of the given targets (`{kind: ids}`), oldest first, in one query."""
    wanted = Q()
    for kind, ids in targets.items():
        ids = list(ids)
        if ids:
            wanted |= Q(target_kind=kind, target_id__in=ids)
    found: dict[tuple[str, int], list] = {}
    if not wanted:
        return found
    events = MemoryEvent.objects.filter(agent=agent).filter(wanted).order_by("created_at", "id")
    for event in events:
        found.setdefault((event.target_kind, event.target_id), []).append(event)
    return found


def _with_sections(memories: QuerySet[Memory]) -> QuerySet[Memory]:
    """Memories reading every section's rows along, in a constant number of queries."""
    for section in MEMORY_SECTIONS:
        memories = section.with_rows(memories)
    return memories


def _memory_export(
    memory: Memory, history: list[MemoryEvent], known: set[int] | None, sessions: set[int]
) -> Exported:
    """`sessions`: the ids of the document's sessions (a section may keep a reference to
    one of them: a record's working memory)."""
    superseded_by = memory.superseded_by_id
    if known is not None and superseded_by not in known:
        superseded_by = None
    exported: Exported = {
        **memory_dict(memory),
        "superseded_by": superseded_by,
        "last_accessed_at": _iso(memory.last_accessed_at),
        "access_count": memory.access_count,
        "history": [_event(e, known) for e in history],
    }
    for section in MEMORY_SECTIONS:
        part = section.export(memory, sessions)
        if part is not None:
            exported[section.name] = part  # type: ignore[literal-required]
    return exported


def _memories_export(
    agent: Agent, memories: list[Memory], known: set[int] | None, sessions: set[int]
) -> list[Exported]:
    history = _histories(agent, {MemoryEvent.Target.MEMORY: [m.pk for m in memories]})
    return [
        _memory_export(m, history.get((MemoryEvent.Target.MEMORY, m.pk), []), known, sessions)
        for m in memories
    ]


def session_export(
    session: Session,
    known_memories: set[int] | None = None,
    known_sessions: set[int] | None = None,
) -> Exported:
    """Everything under `session`, in a constant number of queries. Call inside a
    transaction holding the session's row lock: every writer to a session takes it, so
    what is read is one consistent state. `known_memories`, `known_sessions`: the ids of
    every memory and session the document holds (default: this session's)."""
    agent = session.agent
    turns = _turns_export(session)
    messages = Message.objects.filter(session=session, seq__lte=session.message_count)
    findings = list(
        Finding.objects.filter(session=session)
        .select_related("turn", "message", "tool_call")
        .order_by("id")
    )
    stale = Finding.stale_among(session, findings)
    items = list(ContextItem.objects.filter(session=session).order_by("id"))
    subtasks = list(
        Subtask.objects.filter(session=session).prefetch_related("dependencies").order_by("id")
    )
    memories = list(_with_sections(Memory.objects.filter(session=session)).order_by("id"))
    if known_sessions is None:
        known_sessions = {session.pk}
    if known_memories is None:
        known_memories = {m.pk for m in memories}
    history = _histories(
        agent,
        {
            MemoryEvent.Target.FINDING: [f.pk for f in findings],
            MemoryEvent.Target.CONTEXT_ITEM: [i.pk for i in items],
            MemoryEvent.Target.MEMORY: [m.pk for m in memories],
        },
    )

    def changes(kind: str, pk: int) -> list[Exported]:
        return [_event(e, known_memories) for e in history.get((kind, pk), [])]

    return {
        **session_summary(session),
        "evidence": session.evidence,
        "turns": turns,
        "messages": [message_dict(m) for m in messages.order_by("seq")],
        "findings": [
            _finding_export(f, f.pk in stale, changes(MemoryEvent.Target.FINDING, f.pk))
            for f in findings
        ],
        "context_items": [
            _context_item_export(item, changes(MemoryEvent.Target.CONTEXT_ITEM, item.pk))
            for item in items
        ],
        "subtasks": [_subtask_export(task) for task in subtasks],
        "memories": [
            _memory_export(
                m,
                history.get((MemoryEvent.Target.MEMORY, m.pk), []),
                known_memories,
                known_sessions,
            )
            for m in memories
        ],
    }


def _turns_export(session: Session) -> list[Exported]:
    """The session's turns, each with its tool calls and extraction job, in three queries."""
    turns = Turn.objects.filter(session=session, iteration__lte=session.turn_count)
    turns = list(turns.order_by("iteration"))
    calls = list(
        ToolCall.objects.filter(session=session, turn__iteration__lte=session.turn_count)
        .select_related("pending_output")
        .order_by("id")
    )
    jobs = {job.turn_id: job for job in ExtractionJob.objects.filter(session=session)}
    calls_of: dict[int, list[Exported]] = {}
    for call in calls:
        calls_of.setdefault(call.turn_id, []).append(_tool_call_export(call))
    return [_turn_export(t, calls_of.get(t.pk, []), jobs.get(t.pk)) for t in turns]


def _tool_call_export(call: ToolCall) -> Exported:
    pending = getattr(call, "pending_output", None)
    return {
        "id": call.pk,
        "tool": call.tool,
        "query": call.query,
        "success": call.success,
        "output_size": call.output_size,
        "output_excerpt": call.output_excerpt,
        "output": pending.output if pending is not None else None,
        "file_path": call.file_path,
        "call_id": call.call_id,
        "details": call.details,
        "kind": call.kind,
        "fact": call.fact,
        "fact_success": call.fact_success,
        "finding": call.finding_id,
        "skipped": call.skipped,
        "created_at": call.created_at.isoformat(),
    }


def _finding_export(finding: Finding, stale: bool, history: list[Exported]) -> Exported:
    return {
        **finding_dict(finding, stale),
        "identity": finding.identity,
        "created_at": finding.created_at.isoformat(),
        "tool_call": finding.tool_call_id,
        "history": history,
    }


def _context_item_export(item: ContextItem, history: list[Exported]) -> Exported:
    return {
        **context_item_dict(item),
        "created_at": item.created_at.isoformat(),
        "evidence": item.evidence or [],
        "history": history,
    }


def _subtask_export(task: Subtask) -> Exported:
    return {
        "id": task.pk,
        "title": task.title,
        "status": task.status,
        "position": task.position,
        "dependencies": sorted(d.pk for d in task.dependencies.all()),
        "created_at": task.created_at.isoformat(),
        "updated_at": task.updated_at.isoformat(),
    }


def _turn_export(turn: Turn, calls: list[Exported], job: ExtractionJob | None) -> Exported:
    extraction: Exported | None = None
    if job is not None:
        extraction = {
            "status": job.status,
            "attempts": job.attempts,
            "last_error": job.last_error,
            "findings_added": job.findings_added,
            "context_items_set": job.context_items_set,
            "created_at": job.created_at.isoformat(),
            "queued_at": _iso(job.queued_at),
            "finished_at": _iso(job.finished_at),
        }
    metadata = turn.metadata()
    return {
        **metadata,
        "timestamp": turn.timestamp.isoformat(),
        "model": turn.model,
        "usage_source": turn.usage_source,
        "first_seq": turn.first_seq,
        "last_seq": turn.last_seq,
        "calls": calls,
        "extraction": extraction,
    }


def read_session(
    session_id: int,
    known_memories: set[int] | None = None,
    known_sessions: set[int] | None = None,
) -> Exported | None:
    """The export of one session, read under its row lock; None when it is gone."""
    with transaction.atomic():
        session = (
            Session.objects.select_for_update(of=SELF)
            .select_related("agent")
            .filter(pk=session_id)
            .first()
        )
        if session is None:
            return None
        return session_export(session, known_memories, known_sessions)


def _header(agent: Agent, scope: Scope) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "scope": scope,
        "exported_at": timezone.now().isoformat(),
        "agent": agent_settings(agent),
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _document(header: dict, sessions: Iterable, memories: Iterable) -> Iterator[str]:
    """The document's JSON text in pieces: the header, then each session and each memory
    as it comes (one object in memory at a time)."""
    yield _dumps(header)[:-1] + ',"sessions":['
    for i, session in enumerate(sessions):
        yield ("," if i else "") + _dumps(session)
    yield '],"memories":['
    for i, memory in enumerate(memories):
        yield ("," if i else "") + _dumps(memory)
    yield "]}\n"


def stream_session(session: Session) -> Iterator[str]:
    """A session's export document, as JSON text in pieces. The session is read at once
    (so that a session that is gone is known before anything is sent)."""
    exported = read_session(session.pk)
    if exported is None:
        raise Session.DoesNotExist(session.key)
    return _document(_header(session.agent, "session"), [exported], [])


def stream_agent(agent: Agent, now: datetime | None = None) -> Iterator[str]:
    """An agent's export document: every session live at `now` (oldest first), then the
    agent's memories that none of them produced (oldest first), as JSON text in pieces."""
    now = now or timezone.now()
    session_ids = list(
        Session.objects.for_agent(agent).active(now).order_by("id").values_list("id", flat=True)
    )
    memory_ids = set(Memory.objects.for_agent(agent).values_list("id", flat=True))
    last_memory = max(memory_ids, default=0)
    # A record's working memory is exported when its session is in the document.
    known_sessions = set(session_ids)
    gone: list[int] = []  # sessions removed while the export ran: their memories stay

    def sessions() -> Iterator[Exported]:
        for session_id in session_ids:
            exported = read_session(session_id, memory_ids, known_sessions)
            if exported is None:
                gone.append(session_id)
            else:
                yield exported

    def memories() -> Iterator[Exported]:
        own = _with_sections(Memory.objects.for_agent(agent)).filter(
            Q(session__isnull=True) | Q(session__expires_at__lte=now) | Q(session_id__in=gone),
            id__lte=last_memory,
        )
        after = 0
        while True:
            page = list(own.filter(id__gt=after).order_by("id")[:MEMORY_PAGE])
            yield from _memories_export(agent, page, memory_ids, known_sessions - set(gone))
            if len(page) < MEMORY_PAGE:
                return
            after = page[-1].pk

    return _document(_header(agent, "agent"), sessions(), memories())


# --- import -----------------------------------------------------------------------------------

Loc = tuple[str | int, ...]


@dataclass
class ImportRefused(Exception):
    """The document breaks a rule the schema cannot say: nothing was written."""

    problems: list[tuple[Loc, str]]


@dataclass
class ImportConflict(Exception):
    """Sessions with these keys, or records with these client ids, exist (and replacing
    them was not asked for)."""

    keys: list[str]
    records: list[str] = field(default_factory=list)


class MemorySection(Protocol):
    """What an app keeps beside memories, carried in each memory's export under `name`
    (memoryapp/ams/export.py: the AMS API's record). Registered by the app's ready()."""

    name: str

    def with_rows(self, memories: QuerySet[Memory]) -> QuerySet[Memory]:
        """`memories` reading the section's rows along (select_ or prefetch_related)."""
        ...

    def export(self, memory: Memory, sessions: set[int]) -> Any:
        """The section of `memory`'s export, None when it has none. `sessions`: the ids
        of the document's sessions."""
        ...

    def check(self, located: list[tuple[Loc, Exported]]) -> list[tuple[Loc, str]]:
        """What is wrong with the document's sections that the schema cannot say, given
        every memory with where it is."""
        ...

    def held(self, agent: Agent, memories: list[Exported]) -> list[str]:
        """What the memories' sections name that the agent has already (an import
        conflict unless `replace`), sorted."""
        ...

    def write(
        self,
        agent: Agent,
        written: list[tuple[Memory, Exported]],
        created: dict[str, Session],
        renamed: dict[str, str],
        replace: bool,
    ) -> None:
        """The section's rows for the memories written (each row with what it was made
        from), inside the import's transaction. `created`: the sessions made, by the key
        the document gives them; `renamed`: the key each document session is stored
        under."""
        ...


MEMORY_SECTIONS: list[MemorySection] = []


def add_memory_section(section: MemorySection) -> None:
    """Carry `section` in every export and import from now on (once, by name)."""
    if all(s.name != section.name for s in MEMORY_SECTIONS):
        MEMORY_SECTIONS.append(section)


@dataclass
class ImportResult:
    scope: str
    sessions: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    memories: int = 0
    extraction_queued: int = 0


MAX_PROBLEMS = 50


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


class _Problems(list):
    def add(self, loc: Loc, message: str) -> None:
        if len(self) < MAX_PROBLEMS:
            self.append((loc, message))


def _check_session(at: Loc, session: Exported, problems: _Problems, memory_ids: set) -> None:
    """Numbering first: past a gap or a bad turn range the rest would only repeat it."""
    if not _check_messages(at, session["messages"], problems):
        return
    if not _check_turns(at, session["turns"], len(session["messages"]), problems):
        return
    _check_totals(at, session, problems)
    finding_ids = _check_findings(at, session, problems, memory_ids)
    _check_call_findings(at, session["turns"], finding_ids, problems)
    _check_context_items(at, session["context_items"], problems, memory_ids)
    _check_subtasks(at, session["subtasks"], problems)


def _check_messages(at: Loc, messages: list[HistoryMessage], problems: _Problems) -> bool:
    """Seqs 1, 2, …, client ids unique; False at the first gap in the numbering."""
    client_ids: set[str] = set()
    for i, message in enumerate(messages):
        if message["seq"] != i + 1:
            problems.add(
                (*at, "messages", i, "seq"), f"messages are numbered 1, 2, … : expected {i + 1}"
            )
            return False
        if message.get("client_id"):
            if message["client_id"] in client_ids:
                problems.add((*at, "messages", i, "client_id"), "client ids are unique")
            client_ids.add(message["client_id"])
    return True


def _check_turns(at: Loc, turns: list[Exported], message_count: int, problems: _Problems) -> bool:
    """Iterations 1, 2, …, each turn's messages after the previous turn's, tool-call ids
    unique; False at the first bad iteration or range."""
    last = 0
    call_ids: set[int] = set()
    for i, turn in enumerate(turns):
        where = (*at, "turns", i)
        if turn["iteration"] != i + 1:
            problems.add((*where, "iteration"), f"turns are numbered 1, 2, … : expected {i + 1}")
            return False
        if not last < turn["first_seq"] <= turn["last_seq"] <= message_count:
            problems.add(
                (*where, "first_seq"),
                f"a turn's messages follow the previous turn's and exist: first_seq > {last}, "
                f"first_seq <= last_seq <= {message_count}",
            )
            return False
        if turn["message_count"] != turn["last_seq"] - turn["first_seq"] + 1:
            problems.add((*where, "message_count"), "message_count is last_seq - first_seq + 1")
        last = turn["last_seq"]
        for j, call in enumerate(turn["calls"]):
            if call["id"] in call_ids:
                problems.add((*where, "calls", j, "id"), "tool-call ids are unique")
            call_ids.add(call["id"])
    return True


def _check_totals(at: Loc, session: Exported, problems: _Problems) -> None:
    messages, turns = session["messages"], session["turns"]
    totals: Totals = {
        "messages": len(messages),
        "tokens": sum(m["token_count"] for m in messages),
        "input_tokens": sum(t["input_tokens"] for t in turns),
        "output_tokens": sum(t["output_tokens"] for t in turns),
        "turns": len(turns),
    }
    for name, value in totals.items():
        if session["totals"][name] != value:
            problems.add((*at, "totals", name), f"the rows give {value}")


def _check_findings(at: Loc, session: Exported, problems: _Problems, memory_ids: set) -> set[int]:
    """Ids and identities unique, provenance and history that resolve; answers the ids."""
    finding_ids: set[int] = set()
    identities: set[str] = set()
    calls = {c["id"]: c for t in session["turns"] for c in t["calls"]}
    for i, finding in enumerate(session["findings"]):
        where = (*at, "findings", i)
        if finding["id"] in finding_ids:
            problems.add((*where, "id"), "finding ids are unique")
        finding_ids.add(finding["id"])
        if finding["identity"] in identities:
            problems.add((*where, "identity"), "one finding per call: identities are unique")
        identities.add(finding["identity"])
        _check_provenance(where, finding, session, calls, problems)
        _check_history((*where, "history"), finding["history"], problems, memory_ids)
    return finding_ids


def _check_provenance(
    where: Loc,
    finding: Exported,
    session: Exported,
    calls: dict[int, Exported],
    problems: _Problems,
) -> None:
    """The finding's turn, message and tool call are the session's, and its provenance
    names the call's call_id."""
    provenance = finding["provenance"]
    if provenance["turn"] is not None and not 1 <= provenance["turn"] <= len(session["turns"]):
        problems.add((*where, "provenance", "turn"), "no such turn in this session")
    if provenance["message_seq"] is not None and not (
        1 <= provenance["message_seq"] <= len(session["messages"])
    ):
        problems.add((*where, "provenance", "message_seq"), "no such message in this session")
    call = calls.get(finding["tool_call"]) if finding["tool_call"] is not None else None
    if finding["tool_call"] is not None and call is None:
        problems.add((*where, "tool_call"), "no such tool call in this session")
    expected = (call["call_id"] or None) if call is not None else None
    if provenance["tool_call_id"] != expected:
        problems.add(
            (*where, "provenance", "tool_call_id"), f"the tool call's call_id is {expected!r}"
        )


def _check_call_findings(
    at: Loc, turns: list[Exported], finding_ids: set[int], problems: _Problems
) -> None:
    for turn_index, turn in enumerate(turns):
        for j, call in enumerate(turn["calls"]):
            if call["finding"] is not None and call["finding"] not in finding_ids:
                problems.add(
                    (*at, "turns", turn_index, "calls", j, "finding"),
                    "no such finding in this session",
                )


def _check_context_items(
    at: Loc, items: list[Exported], problems: _Problems, memory_ids: set
) -> None:
    keys: set[str] = set()
    for i, item in enumerate(items):
        if item["key"] in keys:
            problems.add((*at, "context_items", i, "key"), "context item keys are unique")
        keys.add(item["key"])
        _check_history((*at, "context_items", i, "history"), item["history"], problems, memory_ids)


def _check_subtasks(at: Loc, subtasks: list[Exported], problems: _Problems) -> None:
    task_ids = [t["id"] for t in subtasks]
    if len(set(task_ids)) != len(task_ids):
        problems.add((*at, "subtasks"), "subtask ids are unique")
    for i, task in enumerate(subtasks):
        dependencies = task["dependencies"]
        if not set(dependencies) <= set(task_ids):
            problems.add((*at, "subtasks", i, "dependencies"), "no such subtask in this session")
        elif len(set(dependencies)) != len(dependencies):
            problems.add((*at, "subtasks", i, "dependencies"), "a dependency is named once")


def _check_history(at: Loc, history: list[Exported], problems: _Problems, memory_ids) -> None:
    for i, event in enumerate(history):
        for side in ("before", "after"):
            ref = (event[side] or {}).get("superseded_by")
            if ref is not None and ref not in memory_ids:
                problems.add((*at, i, side, "superseded_by"), "no such memory in the document")


def check_document(document: Exported, keys: list[str]) -> list[tuple[Loc, str]]:
    """What the schema cannot check: numbering, turn ranges, totals, unique ids and keys,
    references. `keys`: each session's key as it will be stored."""
    problems = _Problems()
    memories = [m for s in document["sessions"] for m in s["memories"]] + document["memories"]
    memory_ids = {m["id"] for m in memories}
    if len(memory_ids) != len(memories):
        problems.add(("memories",), "memory ids are unique across the document")
    located: list[tuple[Loc, Exported]] = [
        (("sessions", i, "memories", j), m)
        for i, s in enumerate(document["sessions"])
        for j, m in enumerate(s["memories"])
    ]
    located += [(("memories", j), m) for j, m in enumerate(document["memories"])]
    for section in MEMORY_SECTIONS:
        for loc, message in section.check(located):
            problems.add(loc, message)
    seen: set[str] = set()
    for i, (session, key) in enumerate(zip(document["sessions"], keys, strict=True)):
        if key in seen:
            problems.add(("sessions", i, "key"), f"session {key!r} is in the document twice")
        seen.add(key)
        _check_session(("sessions", i), session, problems, memory_ids)
        for j, memory in enumerate(session["memories"]):
            _check_memory(("sessions", i, "memories", j), memory, problems, memory_ids)
    for j, memory in enumerate(document["memories"]):
        _check_memory(("memories", j), memory, problems, memory_ids)
    _check_replacement_chains(memories, problems)
    if document["scope"] == "agent":
        try:
            tokens.get_encoding(document["agent"]["encoding"])
        except tokens.EncodingUnavailable as exc:
            problems.add(("agent", "encoding"), str(exc))
    return list(problems)


def _check_replacement_chains(memories: list[Exported], problems: _Problems) -> None:
    """A memory is replaced by a newer one, never (through others) by itself: revising
    makes chains, and a loop is a document no server wrote."""
    replaced_by = {m["id"]: m["superseded_by"] for m in memories}
    for start in replaced_by:
        seen = {start}
        current = replaced_by.get(start)
        while current is not None:
            if current in seen:
                problems.add(("memories",), f"memory {start} is replaced by itself (a loop)")
                return
            seen.add(current)
            current = replaced_by.get(current)


def _check_memory(at: Loc, memory: Exported, problems: _Problems, memory_ids: set) -> None:
    if memory["superseded_by"] is not None and memory["superseded_by"] not in memory_ids:
        problems.add((*at, "superseded_by"), "no such memory in the document")
    _check_history((*at, "history"), memory["history"], problems, memory_ids)


def import_document(
    agent: Agent,
    document: Exported,
    *,
    session_key: str | None = None,
    replace: bool = False,
    now: datetime | None = None,
) -> ImportResult:
    """Recreate what `document` holds under `agent`, in one transaction: its sessions (the
    one session renamed to `session_key` when given), their memories, the agent's own
    memories, and with an agent's export its settings. A session whose expiry has passed is
    not created (TTL cleanup would remove it at once); its memories stay with the agent,
    as cleanup leaves them. A live session with the same key is an `ImportConflict`, or
    with `replace` is removed first, as if it had expired. `ImportRefused` when a check
    fails; nothing is written then."""
    now = now or timezone.now()
    sessions = document["sessions"]
    keys = [s["key"] for s in sessions]
    if session_key is not None:
        if len(sessions) != 1:
            raise ValueError("a new key names one session")
        keys = [session_key]
    problems = check_document(document, keys)
    if problems:
        raise ImportRefused(problems)
    result = ImportResult(scope=document["scope"])
    pairs = list(zip(sessions, keys, strict=True))
    alive = [_when(s["expires_at"]) > now for s in sessions]
    result.expired = [k for (_, k), live in zip(pairs, alive, strict=True) if not live]
    every_memory = [m for s in sessions for m in s["memories"]] + document["memories"]
    if not replace:
        wanted = [k for (_, k), live in zip(pairs, alive, strict=True) if live]
        taken = Session.objects.for_agent(agent).active(now).filter(key__in=wanted)
        if taken.exists():
            raise ImportConflict(sorted(taken.values_list("key", flat=True)))
        for section in MEMORY_SECTIONS:
            held = section.held(agent, every_memory)
            if held:
                raise ImportConflict([], held)

    memory_map: dict[int, Memory] = {}
    written: list[tuple[Memory, Exported]] = []
    queued: list[int] = []
    created: dict[str, Session] = {}  # by the key the document gives
    with transaction.atomic():
        if document["scope"] == "agent":
            _apply_settings(agent, document["agent"])
        for (session, key), live in zip(pairs, alive, strict=True):
            row = _make_session(agent, key, session, replace, now) if live else None
            if row is not None:
                queued += _write_conversation(row, session, now)
                result.sessions.append(key)
                created[session["key"]] = row
            written += _make_memories(agent, row, session["memories"], memory_map)
        written += _make_memories(agent, None, document["memories"], memory_map)
        _link_memories(agent, written, memory_map)
        renamed = {session["key"]: key for session, key in pairs}
        for section in MEMORY_SECTIONS:
            section.write(agent, written, created, renamed, replace)
        for job_id in queued:
            # After commit, as append_turn does; a failed dispatch is left to the sweep.
            transaction.on_commit(lambda job_id=job_id: dispatch_extraction(job_id), robust=True)
    result.memories = len(written)
    result.extraction_queued = len(queued)
    return result


def _apply_settings(agent: Agent, settings: Exported) -> None:
    names = [
        "ttl_seconds",
        "max_messages",
        "token_budget",
        "encoding",
        "system_budget",
        "conversation_budget",
        "working_budget",
        "long_term_budget",
    ]
    for name in names:
        setattr(agent, name, settings[name])
    agent.save(update_fields=[*names, "updated_at"])


def _make_session(
    agent: Agent, key: str, session: Exported, replace: bool, now: datetime
) -> Session:
    """The new session row, once any session holding its key is gone: an expired one is
    removed as TTL cleanup would, a live one too when `replace` (else a conflict)."""
    from memoryapp.core.cleanup import purge_sessions

    existing = Session.objects.select_for_update(of=SELF).filter(agent=agent, key=key).first()
    if existing is not None:
        if not existing.is_expired(now):
            if not replace:
                raise ImportConflict([key])  # created since the check
            # Expire it now and remove it as cleanup would: its memories stay, unlinked.
            Session.objects.filter(pk=existing.pk).update(expires_at=now)
        purge_sessions([existing.pk], now)
    messages = session["messages"]
    turns = session["turns"]
    row = Session(
        agent=agent,
        key=key,
        goal=session["goal"],
        status=session["status"],
        metadata=session["metadata"],
        ttl_seconds=session["ttl_seconds"],
        last_activity_at=_when(session["last_activity_at"]),
        expires_at=_when(session["expires_at"]),
        message_count=len(messages),
        token_count=sum(m["token_count"] for m in messages),
        input_tokens=sum(t["input_tokens"] for t in turns),
        output_tokens=sum(t["output_tokens"] for t in turns),
        turn_count=len(turns),
        evidence=session["evidence"],
    )
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:
        raise ImportConflict([key]) from None  # another import created it meanwhile
    created_at = _when(session["created_at"])
    Session.objects.filter(pk=row.pk).update(created_at=created_at)
    row.created_at = created_at
    return row


def _write_conversation(session: Session, exported: Exported, now: datetime) -> list[int]:
    """Turns, messages, tool calls, extraction jobs, findings, working context and
    subtasks, with their history. Answers the ids of the extraction jobs to dispatch."""
    turns = _write_turns(session, exported["turns"])
    messages = _write_messages(session, exported["messages"], turns)
    calls = _write_tool_calls(session, exported["turns"], turns)
    queued = _write_jobs(session, exported["turns"], turns, now)
    findings = _write_findings(session, exported["findings"], turns, messages, calls)
    _link_calls_to_findings(exported["turns"], calls, exported["findings"], findings)
    items = _write_context_items(session, exported["context_items"])
    _write_subtasks(session, exported["subtasks"])
    _write_history(
        session.agent,
        [
            (MemoryEvent.Target.FINDING, row, f["history"])
            for f, row in zip(exported["findings"], findings, strict=True)
        ]
        + [
            (MemoryEvent.Target.CONTEXT_ITEM, row, i["history"])
            for i, row in zip(exported["context_items"], items, strict=True)
        ],
        {},
    )
    return queued


def _write_turns(session: Session, exported: list[Exported]) -> list[Turn]:
    return Turn.objects.bulk_create(
        [
            Turn(
                session=session,
                iteration=t["iteration"],
                message_count=t["message_count"],
                input_tokens=t["input_tokens"],
                output_tokens=t["output_tokens"],
                tool_call_count=t["tool_calls"],
                usage_source=t["usage_source"],
                model=t["model"],
                first_seq=t["first_seq"],
                last_seq=t["last_seq"],
                timestamp=_when(t["timestamp"]),
            )
            for t in exported
        ],
        batch_size=BATCH,
    )


def _write_messages(
    session: Session, exported: list[HistoryMessage], turns: list[Turn]
) -> list[Message]:
    """The messages, each linked to the turn whose seq range holds it."""
    turn_of_seq: dict[int, Turn] = {}
    for turn in turns:
        for seq in range(turn.first_seq, turn.last_seq + 1):
            turn_of_seq[seq] = turn
    return Message.objects.bulk_create(
        [
            Message(
                session=session,
                turn=turn_of_seq.get(m["seq"]),
                seq=m["seq"],
                role=m["role"],
                content=m["content"],
                name=m.get("name") or "",
                tool_call_id=m.get("tool_call_id") or "",
                tool_calls=m.get("tool_calls") or None,
                token_count=m["token_count"],
                created_at=_when(m["created_at"]),
                client_id=m.get("client_id") or "",
                removed_at=_when(m.get("removed_at")),
                revisions=m.get("revisions") or None,
            )
            for m in exported
        ],
        batch_size=BATCH,
    )


def _write_tool_calls(
    session: Session, exported: list[Exported], turns: list[Turn]
) -> dict[int, ToolCall]:
    """The turns' tool-call rows (not linked to their findings yet) and the whole outputs
    extraction has yet to use; answers the rows by exported id."""
    calls: dict[int, ToolCall] = {}
    for turn, t in zip(turns, exported, strict=True):
        for c in t["calls"]:
            calls[c["id"]] = ToolCall(
                turn=turn,
                session=session,
                tool=c["tool"],
                query=c["query"],
                success=c["success"],
                output_size=c["output_size"],
                output_excerpt=c["output_excerpt"],
                file_path=c["file_path"],
                call_id=c["call_id"],
                details=c["details"],
                kind=c["kind"],
                fact=c["fact"],
                fact_success=c["fact_success"],
                skipped=c["skipped"],
                created_at=_when(c["created_at"]),
            )
    ToolCall.objects.bulk_create(list(calls.values()), batch_size=BATCH)
    pending: list[PendingToolOutput] = []
    for t in exported:
        for c in t["calls"]:
            if c["output"] is not None:
                pending.append(PendingToolOutput(tool_call=calls[c["id"]], output=c["output"]))
    PendingToolOutput.objects.bulk_create(pending, batch_size=BATCH)
    return calls


def _write_jobs(
    session: Session, exported: list[Exported], turns: list[Turn], now: datetime
) -> list[int]:
    """The turns' extraction jobs; answers the ids of those to dispatch."""
    jobs = []
    for turn, t in zip(turns, exported, strict=True):
        job = t["extraction"]
        if job is None:
            continue
        finished = job["status"] in (ExtractionJob.Status.DONE, ExtractionJob.Status.FAILED)
        jobs.append(
            ExtractionJob(
                turn=turn,
                session=session,
                # Not run yet: queued and dispatched after commit, as a new turn's is.
                status=job["status"] if finished else ExtractionJob.Status.QUEUED,
                attempts=job["attempts"],
                last_error=job["last_error"],
                findings_added=job["findings_added"],
                context_items_set=job["context_items_set"],
                created_at=_when(job["created_at"]),
                queued_at=_when(job["queued_at"]) if finished else now,
                finished_at=_when(job["finished_at"]),
            )
        )
    ExtractionJob.objects.bulk_create(jobs, batch_size=BATCH)
    return [j.pk for j in jobs if j.status == ExtractionJob.Status.QUEUED]


def _write_findings(
    session: Session,
    exported: list[Exported],
    turns: list[Turn],
    messages: list[Message],
    calls: dict[int, ToolCall],
) -> list[Finding]:
    by_iteration = {turn.iteration: turn for turn in turns}
    by_seq = {message.seq: message for message in messages}
    findings = Finding.objects.bulk_create(
        [
            Finding(
                session=session,
                tool=f["tool"],
                kind=f["kind"],
                query=f["query"],
                identity=f["identity"],
                fact=f["fact"],
                step=f["step"],
                success=f["success"],
                file_path=f["file_path"],
                source=f["source"],
                details=f["details"],
                turn=by_iteration.get(f["provenance"]["turn"]),
                message=by_seq.get(f["provenance"]["message_seq"]),
                tool_call=calls.get(f["tool_call"]),
            )
            for f in exported
        ],
        batch_size=BATCH,
    )
    _set_times(Finding, findings, exported)
    return findings


def _link_calls_to_findings(
    exported: list[Exported],
    calls: dict[int, ToolCall],
    exported_findings: list[Exported],
    findings: list[Finding],
) -> None:
    """Each tool call's finding, once both have rows."""
    finding_of = {f["id"]: row for f, row in zip(exported_findings, findings, strict=True)}
    linked = []
    for t in exported:
        for c in t["calls"]:
            if c["finding"] is not None:
                calls[c["id"]].finding = finding_of[c["finding"]]
                linked.append(calls[c["id"]])
    ToolCall.objects.bulk_update(linked, ["finding"], batch_size=BATCH)


def _write_context_items(session: Session, exported: list[Exported]) -> list[ContextItem]:
    items = ContextItem.objects.bulk_create(
        [
            ContextItem(
                session=session,
                key=i["key"],
                value=i["value"],
                source=i["source"],
                confidence=i["confidence"],
                evidence=i["evidence"],
            )
            for i in exported
        ],
        batch_size=BATCH,
    )
    _set_times(ContextItem, items, exported)
    return items


def _write_subtasks(session: Session, exported: list[Exported]) -> None:
    """The subtasks, then their dependencies."""
    tasks = Subtask.objects.bulk_create(
        [
            Subtask(session=session, title=t["title"], status=t["status"], position=t["position"])
            for t in exported
        ],
        batch_size=BATCH,
    )
    _set_times(Subtask, tasks, exported)
    task_of = {t["id"]: row for t, row in zip(exported, tasks, strict=True)}
    Through = Subtask.dependencies.through
    Through.objects.bulk_create(
        [
            Through(from_subtask=task_of[t["id"]], to_subtask=task_of[d])
            for t in exported
            for d in t["dependencies"]
        ],
        batch_size=BATCH,
    )


def _set_times(model, rows: list, exported: list[dict]) -> None:
    """`created_at` and `updated_at` as exported (`auto_now` fields: the insert set them
    to now; `bulk_update` writes them as given)."""
    for row, data in zip(rows, exported, strict=True):
        row.created_at = _when(data["created_at"])
        row.updated_at = _when(data["updated_at"])
    model.objects.bulk_update(rows, ["created_at", "updated_at"], batch_size=BATCH)


def _make_memories(
    agent: Agent, session: Session | None, exported: list[Exported], memory_map: dict
) -> list[tuple[Memory, Exported]]:
    rows = Memory.objects.bulk_create(
        [
            Memory(
                agent=agent,
                session=session,
                memory_type=m["memory_type"],
                content=m["content"],
                content_key=Memory.content_key_for(m["content"]),
                confidence=m["confidence"],
                status=m["status"],
                source=m["source"],
                expires_at=_when(m["expires_at"]),
                last_accessed_at=_when(m["last_accessed_at"]),
                access_count=m["access_count"],
            )
            for m in exported
        ],
        batch_size=BATCH,
    )
    for m, row in zip(exported, rows, strict=True):
        memory_map[m["id"]] = row
    return list(zip(rows, exported, strict=True))


def _link_memories(
    agent: Agent, written: list[tuple[Memory, Exported]], memory_map: dict[int, Memory]
) -> None:
    """Replacements, times and history, once every memory of the document has its row."""
    for row, m in written:
        ref = m["superseded_by"]
        row.superseded_by = memory_map[ref] if ref is not None else None
        row.created_at = _when(m["created_at"])
        row.updated_at = _when(m["updated_at"])
    Memory.objects.bulk_update(
        [row for row, _ in written], ["superseded_by", "created_at", "updated_at"], batch_size=BATCH
    )
    _write_history(
        agent, [(MemoryEvent.Target.MEMORY, row, m["history"]) for row, m in written], memory_map
    )


def _write_history(agent: Agent, targets: list[tuple[str, Any, list]], memory_map: dict) -> None:
    def mapped(snapshot: dict | None) -> dict | None:
        if snapshot is None or snapshot.get("superseded_by") is None:
            return snapshot
        return {**snapshot, "superseded_by": memory_map[snapshot["superseded_by"]].pk}

    MemoryEvent.objects.bulk_create(
        [
            MemoryEvent(
                agent=agent,
                target_kind=kind,
                target_id=row.pk,
                action=e["action"],
                before=mapped(e["before"]),
                after=mapped(e["after"]),
                actor=e["actor"],
                created_at=_when(e["created_at"]),
            )
            for kind, row, history in targets
            for e in history
        ],
        batch_size=BATCH,
    )
