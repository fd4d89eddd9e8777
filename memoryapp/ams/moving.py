"""Moving in from Redis Agent Memory Server, and out to it (issue 39, items 1 and 5).

In, from a running server's REST API (or a file this module exported): every session's
working memory (messages with their ids and times, `data`, `context`, namespace, user,
TTL, strategy, the records it lists) and every long-term memory (text, topics, entities,
memory type, event date, `extracted_from`, namespace, user, session, times). Each is
checked with this API's own input schemas and stored through its own functions, the ones
a PUT of the working memory and a POST of the records call (memoryapp/ams/working.py,
records.py): after the import, the same `agent-memory-client` calls against
`/ams/<key>/v1/` answer the same sessions and memories. The rest goes through
memoryapp.core.moving: the dry run, the report, a record whose id the agent holds
skipped, an `Origin` on each memory.

Reading a server: its session listing answers bare ids, and reading one needs the
namespace and user it was stored under; they are taken from its long-term records and
from the namespaces and users given, and a session none of them opens is reported, not
guessed. Long-term records are listed with an empty search text and no recency boost (a
search with the boost rewrites their access times) a page of 100 at a time until a short
page (the server's `total` and `next_offset` do not say more pages remain). A filter-only
search whose filters match nothing falls back to a semantic search of everything on that
server, so records are listed without filters.

Out: `export` answers the agent's live sessions as the server's working memory JSON and
its memories as long-term memory records, in one document that `read` takes back.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from ninja.errors import HttpError
from pydantic import ValidationError

from memoryapp.ams import records, working
from memoryapp.ams.models import MemoryRecord
from memoryapp.ams.schemas import MEMORY_ID_PREFIX, MESSAGE_ID_PREFIX, RecordIn, WorkingMemoryIn
from memoryapp.core.models import Agent, Memory, MemoryEvent, Origin, Session
from memoryapp.core.moving import (
    Line,
    MemoryIn,
    MessageIn,
    Plan,
    SessionIn,
    Source,
    SourceError,
    System,
    add_system,
    last_event_id,
    load_json,
)

SYSTEM = Origin.System.AMS
FORMAT = "redis-agent-memory-server"
PAGE = 100  # the server's largest page
MAX_PAGES = 1000
MAX_BYTES = 50 * 1024 * 1024  # one answer of the server
TIMEOUT = 15
ACTOR = "import:ams"


# --- reading a server -----------------------------------------------------------------------


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A server's answers come from the address given, never from where it points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, "a redirect, not followed", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirects)
MAX_SCOPES = 50  # namespaces, and user ids, a server's sessions are looked for in


def _call(base: str, method: str, path: str, query: dict | None = None, body: Any = None) -> Any:
    url = base.rstrip("/") + path
    if query:
        url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(request, timeout=TIMEOUT) as answer:
            raw = answer.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise SourceError(f"{method} {path}", f"the server answered {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(base, f"cannot reach the server ({reason})") from None
    if len(raw) > MAX_BYTES:
        raise SourceError(f"{method} {path}", f"an answer over {MAX_BYTES} bytes")
    return load_json(raw, f"{method} {path}")


def _paged(fetch, what: str) -> list[Any]:
    found: list[Any] = []
    for page in range(MAX_PAGES):
        items = fetch(page * PAGE)
        if not isinstance(items, list):
            raise SourceError(what, "expected a list")
        found += items
        if len(items) < PAGE:
            return found
    raise SourceError(what, f"more than {MAX_PAGES * PAGE} items")


def _long_term(base: str) -> list[dict]:
    def page(offset: int) -> Any:
        body = {"text": "", "limit": PAGE, "offset": offset, "recency_boost": False}
        answer = _call(base, "POST", "/v1/long-term-memory/search", body=body) or {}
        return answer.get("memories") if isinstance(answer, dict) else None

    unique: dict[str, dict] = {}
    for record in _paged(page, "POST /v1/long-term-memory/search"):
        if isinstance(record, dict) and isinstance(record.get("id"), str):
            unique.setdefault(record["id"], record)
    return list(unique.values())


def _session_ids(base: str, **scope: str | None) -> list[str]:
    def page(offset: int) -> Any:
        query = {"limit": PAGE, "offset": offset, **scope}
        answer = _call(base, "GET", "/v1/working-memory/", query) or {}
        return answer.get("sessions") if isinstance(answer, dict) else None

    return [s for s in _paged(page, "GET /v1/working-memory/") if isinstance(s, str)]


def _scopes(given: list[str], records: list[dict], name: str) -> list[str]:
    found = {r[name] for r in records if isinstance(r.get(name), str) and r[name]}
    scopes = sorted({*given, *found})
    if len(scopes) > MAX_SCOPES:
        raise SourceError(name, f"more than {MAX_SCOPES} to look for sessions in")
    return scopes


def fetch(base: str, namespaces: list[str], user_ids: list[str]) -> dict[str, Any]:
    """Everything the server at `base` holds, as `export` writes it; `unreached`: the
    sessions no known namespace and user opened."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc or "?" in base or "#" in base:
        raise SourceError(base[:200], "a server's address is http(s)://host[:port][/path]")
    long_term = _long_term(base)
    namespaces = _scopes(namespaces, long_term, "namespace")
    user_ids = _scopes(user_ids, long_term, "user_id")
    # A session's namespace and user: the listing filtered by each known one says.
    in_namespace = {s: n for n in namespaces for s in _session_ids(base, namespace=n)}
    of_user = {s: u for u in user_ids for s in _session_ids(base, user_id=u)}
    found, unreached = [], []
    for session_id in dict.fromkeys(_session_ids(base)):
        query = {"namespace": in_namespace.get(session_id), "user_id": of_user.get(session_id)}
        memory = _call(base, "GET", f"/v1/working-memory/{urllib.parse.quote(session_id)}", query)
        (found if isinstance(memory, dict) else unreached).append(memory or session_id)
    return {
        "format": FORMAT,
        "working_memory": found,
        "long_term_memory": long_term,
        "unreached": unreached,
    }


# --- a document into a plan ------------------------------------------------------------------


def _checked(schema, item: Any, where: str):
    """`item` as the API's input schema takes it: the fields it does not take (the
    server's derived ones: tokens, percentages, access counts) left out."""
    if not isinstance(item, dict):
        raise SourceError(where, "expected an object")
    taken = {k: v for k, v in item.items() if k in schema.model_fields}
    try:
        return schema.model_validate(taken)
    except ValidationError as exc:
        error = exc.errors()[0]
        at = ".".join(str(part) for part in error["loc"])
        raise SourceError(f"{where}.{at}" if at else where, error["msg"]) from None


def _session(item: Any, where: str) -> SessionIn:
    """The working memory without the records it lists (those are read as memories, and
    listed in it again when written)."""
    if not isinstance(item, dict):
        raise SourceError(where, "expected an object")
    messages = item.get("messages")
    if isinstance(messages, list):
        messages = [_foreign(m, MESSAGE_ID_PREFIX) for m in messages]
    memory = _checked(WorkingMemoryIn, {**item, "messages": messages or [], "memories": []}, where)
    if not memory.session_id:
        raise SourceError(f"{where}.session_id", "a working memory names its session")
    session = SessionIn(memory.session_id, ttl_seconds=memory.ttl_seconds, payload=memory)
    session.messages = [
        MessageIn(m.role, m.content, m.created_at, client_id=m.id) for m in memory.messages
    ]
    session.context = {f"data.{k}": (v, "") for k, v in (memory.data or {}).items()}
    if memory.context:
        session.context["context"] = (memory.context, "")
    return session


def _foreign(item: Any, prefix: str) -> Any:
    """An id memoryapp gave (`memoryapp-memory-7`, another memoryapp's export) names a row
    of the agent it came from, not of this one: it comes in as `imported-memory-7`."""
    if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"].startswith(prefix):
        return {**item, "id": "imported-" + item["id"].removeprefix("memoryapp-")}
    return item


def _memory(item: Any, where: str, listed_in: str | None) -> MemoryIn:
    record = _checked(RecordIn, _foreign(item, MEMORY_ID_PREFIX), where)
    detail = {"namespace": record.namespace, "user_id": record.user_id}
    if listed_in:
        detail["working_memory"] = listed_in
    return MemoryIn(record.id, record.text, created_at=record.created_at, detail=detail,
                    payload=record)  # fmt: skip


def plan_of(document: Any, source: str) -> Plan:
    """A Plan of what an export of this module (or `fetch`) holds."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise SourceError("$", f'not a {FORMAT} document: {{"format": "{FORMAT}", …}}')
    plan = Plan(SYSTEM, source, write_session=_write_session, write_memory=_write_memory)
    plan.held = _held
    memories: dict[str, MemoryIn] = {}
    for i, item in enumerate(_list(document, "working_memory")):
        session = _session(item, f"working_memory[{i}]")
        plan.sessions.append(session)
        for j, listed in enumerate(_list(item, "memories", f"working_memory[{i}].memories")):
            memory = _memory(listed, f"working_memory[{i}].memories[{j}]", session.key)
            memories.setdefault(memory.source_id, memory)
    for i, item in enumerate(_list(document, "long_term_memory")):
        memory = _memory(item, f"long_term_memory[{i}]", None)
        listed = memories.get(memory.source_id)
        if listed is not None and "working_memory" in listed.detail:
            memory.detail["working_memory"] = listed.detail["working_memory"]
        memories[memory.source_id] = memory
    plan.memories = list(memories.values())
    for session_id in _list(document, "unreached"):
        why = "its namespace and user are not known: give them (--namespace, --user-id)"
        plan.notes.append(Line("session", str(session_id)[:200], "skip", why, ""))
    return plan


def _list(document: dict, name: str, where: str | None = None) -> list:
    found = document.get(name, [])
    if not isinstance(found, list):
        raise SourceError(where or name, "expected a list")
    return found


def read(source: Source) -> Plan:
    """From the server at `source.url` (with `namespace` and `user_id` options), or from
    files this module exported."""
    if source.url:
        options = source.options or {}
        document = fetch(source.url, options.get("namespace", []), options.get("user_id", []))
        return plan_of(document, source.url)
    if len(source.files) != 1:
        raise SourceError("files", "one exported file, or a server's address")
    data, name = source.files[0]
    return plan_of(load_json(data, name), name)


# --- writing, through this API's own functions -----------------------------------------------


def _held(agent: Agent, record_ids: list[str]) -> dict[str, str]:
    held = MemoryRecord.objects.for_agent(agent).filter(record_id__in=record_ids)
    return {
        record_id: f"the agent has a record with this id: memory #{memory_id}"
        for record_id, memory_id in held.values_list("record_id", "memory_id")
    }


def _write_session(agent: Agent, session: SessionIn) -> Session:
    try:
        return working.put(agent, session.key, session.payload, user_id=None, model="", actor=ACTOR)
    except HttpError as exc:
        raise SourceError(f"working memory {session.key}", str(exc)) from None


def _write_memory(agent: Agent, memory: MemoryIn) -> Memory:
    listed_in = memory.detail.get("working_memory")
    session = (
        Session.objects.for_agent(agent).active().filter(key=listed_in).first()
        if listed_in
        else None
    )
    mark = last_event_id()
    try:
        (record,) = records.save_records(
            agent, [memory.payload], actor=ACTOR, deduplicate=False, working_memory=session
        )
    except HttpError as exc:
        raise SourceError(f"record {memory.source_id}", str(exc)) from None
    if not memory.payload.session_id:
        # As the server holds it: a record listed in a working memory keeps its own
        # session, none (a PUT here would give it the working memory's).
        MemoryRecord.objects.filter(pk=record.pk).update(session_key="")
        Memory.objects.filter(pk=record.memory_id).update(session=None)
    when = memory.created_at or timezone.now()
    Memory.objects.filter(pk=record.memory_id).update(
        created_at=when, updated_at=memory.payload.updated_at or when
    )
    MemoryEvent.objects.filter(
        target_kind="memory", target_id=record.memory_id, pk__gt=mark
    ).update(created_at=when)
    return Memory.objects.get(pk=record.memory_id)


# --- out --------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def export(agent: Agent) -> dict[str, Any]:
    """The agent's live sessions as the server's working memory JSON (GET
    /v1/working-memory/{id}) and its memories as its long-term records (the search's
    `memories`), in one document `read` takes back."""
    sessions = Session.objects.for_agent(agent).active().order_by("created_at", "pk")
    memories = records.memories(agent).order_by("pk")
    return _jsonable(
        {
            "format": FORMAT,
            "working_memory": [working.read(s, window=None) for s in sessions],
            "long_term_memory": [records.record_dict(m) for m in memories],
        }
    )


def register() -> None:
    """Offer this system to the import command and page (memoryapp/ams/apps.py)."""
    add_system(
        System(
            SYSTEM,
            "Redis Agent Memory Server",
            "the server's address (its REST API), or a file exported from here",
            read,
            export,
        )
    )
