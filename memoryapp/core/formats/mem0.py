"""mem0's memory, in and out: the JSON its `Memory.get_all()` answers (`{"results":
[...]}`, or the bare list older releases and the platform's export give), with the
history mem0 keeps in its SQLite history database (`history` table: old and new text,
event ADD / UPDATE / DELETE, actor, role, times).

In: each item of `results` is a memory (its text, `memory`); its id is kept as the
memory's origin, with its hash, metadata, user, agent, run and actor ids and mem0's own
times, so re-importing skips it and exporting gives it back. With a history database,
each memory's changes are replayed in order (an UPDATE replaces the text, as an edit does
here: the earlier text stays in the history; a DELETE archives); a memory the database
knows but `get_all` does not answer (deleted in mem0) is imported archived, with its
history, so nothing mem0 recorded is lost.

Out: the agent's active memories as `get_all` answers them: a memory that came from mem0
with its own id, hash, metadata, ids and times (its current text and a new hash and time
when it was edited here), any other with a stable id made from the agent and the memory,
and memoryapp's type and confidence in its metadata.
"""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from memoryapp.core.limits import MAX_FACT_CHARS
from memoryapp.core.models import Agent, Memory, Origin
from memoryapp.core.moving import (
    Change,
    Line,
    MemoryIn,
    Plan,
    Source,
    SourceError,
    System,
    checked_time,
    load_json,
)

SYSTEM = Origin.System.MEM0
IDS = ("user_id", "agent_id", "run_id", "actor_id", "role")
KEPT = ("hash", "metadata", "created_at", "updated_at", *IDS, "expiration_date")
# mem0 writes a memory's creation time in every row's created_at; the change's own time is
# its updated_at.
HISTORY_COLUMNS = (
    "id", "memory_id", "old_memory", "new_memory", "event", "created_at", "updated_at",
    "is_deleted", "actor_id", "role",
)  # fmt: skip
EVENTS = {"ADD": "add", "UPDATE": "update", "DELETE": "delete"}
LAST_DAY = date(9000, 12, 31)
MAX_HISTORY_ROWS = 1_000_000
MAX_ID = 200


def _moment(text: Any, where: str) -> datetime | None:
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise SourceError(where, "a time is an ISO 8601 string")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SourceError(where, f"not an ISO 8601 time: {text[:40]!r}") from None
    return checked_time(moment, where)


def _text(value: Any, where: str, limit: int = MAX_FACT_CHARS) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SourceError(where, "expected a non-empty string")
    if len(value) > limit:
        raise SourceError(where, f"longer than {limit} characters")
    return value


def _items(document: Any) -> list[Any]:
    if isinstance(document, dict) and "results" in document:
        document = document["results"]
        where = "results"
    else:
        where = "$"
    if not isinstance(document, list):
        raise SourceError(where, 'expected mem0\'s get_all answer: {"results": [...]} or a list')
    return document


def _memory(item: Any, where: str) -> MemoryIn:
    if not isinstance(item, dict):
        raise SourceError(where, "a memory is an object")
    source_id = _text(item.get("id"), f"{where}.id", MAX_ID)
    content = _text(item.get("memory"), f"{where}.memory")
    for name in IDS:
        if item.get(name) is not None:
            _text(item[name], f"{where}.{name}", MAX_ID)
    if item.get("metadata") is not None and not isinstance(item["metadata"], dict):
        raise SourceError(f"{where}.metadata", "metadata is an object or null")
    created = _moment(item.get("created_at"), f"{where}.created_at")
    _moment(item.get("updated_at"), f"{where}.updated_at")
    detail = {name: item[name] for name in KEPT if item.get(name) is not None}
    detail["memory"] = content
    memory = MemoryIn(source_id, content, created_at=created, detail=detail)
    if item.get("expiration_date") is not None:
        try:
            day = date.fromisoformat(_text(item["expiration_date"], f"{where}.expiration_date"))
        except ValueError:
            raise SourceError(f"{where}.expiration_date", "not a date (YYYY-MM-DD)") from None
        if not date(1970, 1, 1) <= day <= LAST_DAY:
            raise SourceError(f"{where}.expiration_date", f"outside 1970 to {LAST_DAY}")
        # mem0 hides a memory from the day after its expiration date.
        memory.expires_at = datetime.combine(day + timedelta(days=1), time(), UTC)
    return memory


def read_history(path: str) -> dict[str, list[Change]]:
    """Each memory's changes in mem0's history database, oldest first (SourceError for a
    file that is not one, naming the table and row)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        kind = db.execute("SELECT type FROM sqlite_master WHERE name = 'history'").fetchone()
        if kind != ("table",):
            raise sqlite3.DatabaseError("no table named history")
        rows = db.execute(
            f"SELECT {', '.join(HISTORY_COLUMNS)} FROM history ORDER BY updated_at, rowid "
            f"LIMIT {MAX_HISTORY_ROWS + 1}"
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        raise SourceError("history database", f"not mem0's history table ({exc})") from None
    if len(rows) > MAX_HISTORY_ROWS:
        raise SourceError("history database", f"more than {MAX_HISTORY_ROWS} rows")
    changes: dict[str, list[Change]] = {}
    for n, row in enumerate(rows, 1):
        record = dict(zip(HISTORY_COLUMNS, row, strict=True))
        where = f"history row {n} (id {str(record['id'])[:40]})"
        event = EVENTS.get(str(record["event"]).upper())
        if event is None:
            raise SourceError(f"{where}.event", f"unknown event {str(record['event'])[:20]!r}")
        memory_id = _text(record["memory_id"], f"{where}.memory_id", MAX_ID)
        content = record["new_memory"] if event != "delete" else None
        if event != "delete":
            content = _text(content, f"{where}.new_memory")
        who = f"mem0:{str(record['actor_id'] or record['role'] or 'mem0')[:100]}"
        at = _moment(record["updated_at"] or record["created_at"], f"{where}.updated_at")
        earlier = changes.setdefault(memory_id, [])
        if not earlier and event != "add" and isinstance(record["old_memory"], str):
            # Its ADD is not in the database: the text before this change was its first.
            first = _moment(record["created_at"], f"{where}.created_at") or at
            earlier.append(Change("add", _text(record["old_memory"], f"{where}.old_memory"),
                                  first, who))  # fmt: skip
        earlier.append(Change(event, content, at, who))
    return changes


def _parse(data: bytes, name: str) -> list[MemoryIn]:
    document = load_json(data, name)
    return [_memory(item, f"{name}: results[{i}]") for i, item in enumerate(_items(document))]


def read(files: list[tuple[bytes, str]], history_path: str | None = None) -> Plan:
    """A Plan of the memories in mem0's `get_all` answers (`files`: each file's bytes and
    name; one per user, say) and, when given, the history database at `history_path`.
    A memory in two files (a user's get_all also answers that user's agent- and run-scoped
    memories) is read once."""
    memories: dict[str, MemoryIn] = {}
    for data, name in files:
        for memory in _parse(data, name):
            memories.setdefault(memory.source_id, memory)
    plan = Plan(SYSTEM, ", ".join(name for _, name in files), memories=list(memories.values()))
    history = read_history(history_path) if history_path else {}
    for memory in plan.memories:
        memory.history = history.pop(memory.source_id, [])
    for source_id, changes in history.items():
        texts = [c.content for c in changes if c.content is not None]
        if changes[-1].action == "delete" and texts:
            # Deleted in mem0: kept here, archived, with its history.
            memory = MemoryIn(source_id, texts[-1], history=changes, deleted=True)
            memory.created_at = changes[0].at
            plan.memories.append(memory)
        else:
            why = "in the history database but in no get_all file given (another user's?)"
            plan.notes.append(Line("memory", source_id, "skip", why, texts[-1] if texts else ""))
    return plan


# --- out --------------------------------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()  # mem0's own hash of a memory's text


def _origins(agent: Agent) -> dict[int, Origin]:
    """The mem0 origin of each memory, carried forward to the memory that replaced it
    (an edit here makes a new memory)."""
    origins = {o.memory_id: o for o in Origin.objects.filter(agent=agent, system=SYSTEM)}
    replaced = dict(
        Memory.objects.filter(agent=agent, superseded_by__isnull=False).values_list(
            "pk", "superseded_by_id"
        )
    )
    for memory_id, origin in list(origins.items()):
        seen = {memory_id}
        while memory_id in replaced and replaced[memory_id] not in seen:
            memory_id = replaced[memory_id]
            seen.add(memory_id)
            origins.setdefault(memory_id, origin)
    return origins


def _item(agent: Agent, memory: Memory, origin: Origin | None) -> dict[str, Any]:
    """One memory as a `get_all` item: what mem0 said of it, while its text is the one
    mem0 had; the text, hash and time of now once it was edited here."""
    if origin is None:
        return {
            "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"memoryapp:{agent.name}:{memory.pk}")),
            "memory": memory.content,
            "hash": _digest(memory.content),
            "metadata": {"memory_type": memory.memory_type, "confidence": memory.confidence},
            "created_at": memory.created_at.isoformat(),
            "updated_at": memory.updated_at.isoformat(),
        }
    detail = origin.detail
    unchanged = detail.get("memory") == memory.content
    item: dict[str, Any] = {
        "id": origin.source_id,
        "memory": memory.content,
        "hash": detail.get("hash") if unchanged else None,
        "metadata": detail.get("metadata"),
        "created_at": detail.get("created_at") or memory.created_at.isoformat(),
        "updated_at": detail.get("updated_at") if unchanged else None,
    }
    item["hash"] = item["hash"] or _digest(memory.content)
    item["updated_at"] = item["updated_at"] or memory.updated_at.isoformat()
    item.update({name: detail[name] for name in (*IDS, "expiration_date") if name in detail})
    return item


def export(agent: Agent) -> dict[str, list[dict[str, Any]]]:
    """The agent's active memories as mem0's `get_all()` answers them."""
    origins = _origins(agent)
    active = Memory.objects.filter(agent=agent, status=Memory.Status.ACTIVE).order_by("pk")
    return {"results": [_item(agent, m, origins.get(m.pk)) for m in active]}


SQLITE = b"SQLite format 3\x00"


def read_source(source: Source) -> Plan:
    """The get_all JSON files among `source.files` and, when one of them is an SQLite
    database, mem0's history in it."""
    databases = [(data, name) for data, name in source.files if data.startswith(SQLITE)]
    answers = [(data, name) for data, name in source.files if not data.startswith(SQLITE)]
    if not answers:
        raise SourceError("files", "no get_all JSON among them")
    if len(databases) > 1:
        raise SourceError("files", "one history database at most")
    if not databases:
        return read(answers)
    with tempfile.NamedTemporaryFile(suffix=".db") as copy:
        copy.write(databases[0][0])
        copy.flush()
        return read(answers, copy.name)


SYSTEM_ENTRY = System(
    SYSTEM,
    "mem0",
    "get_all JSON (one file per user, say), with mem0's history.db for the edit history",
    read_source,
    export,
)
