"""Full-text search over an agent's messages, findings and memories.

SQLite uses the FTS5 tables of migration 0003 (bm25 ranking, `snippet()`); PostgreSQL
uses `to_tsvector('english', …)` with the GIN indexes of the same migration (`ts_rank`,
`ts_headline`). The query is reduced to its words, any of which may match (ranked by how
well they match), so no user input ever reaches a query parser's syntax.

Only live sessions' messages and findings are searched; memories are searched whatever
their session, as they belong to the agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils import timezone

from memoryapp.core.models import Agent

KINDS = ("message", "finding", "memory")
START, STOP = "\x02", "\x03"
MAX_TERMS = 16
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class Hit:
    kind: str
    id: int
    rank: float
    snippet: str
    session: str | None = None
    seq: int | None = None
    role: str | None = None
    status: str | None = None

    def segments(self) -> list[dict]:
        """The snippet as text segments, the matched ones marked: safe to render by
        escaping each segment, with no markup inside agent text."""
        parts: list[dict] = []
        for i, chunk in enumerate(re.split(f"[{START}{STOP}]", self.snippet)):
            if chunk:
                parts.append({"text": chunk, "match": i % 2 == 1})
        return parts

    def plain_snippet(self) -> str:
        return self.snippet.replace(START, "").replace(STOP, "")


def terms(query: str) -> list[str]:
    seen: list[str] = []
    for word in _WORD.findall(query.casefold()):
        if word not in seen:
            seen.append(word)
    return seen[:MAX_TERMS]


def search(
    agent: Agent,
    query: str,
    *,
    kinds: tuple[str, ...] = KINDS,
    offset: int = 0,
    limit: int = 20,
    memory_status: str | None = "active",
    memory_type: str | None = None,
    min_confidence: float | None = None,
    memory_session: str | None = None,
    now: datetime | None = None,
) -> list[Hit]:
    words = terms(query)
    if not words:
        return []
    now = now or timezone.now()
    if connection.vendor == "postgresql":
        sql, params = _postgres(agent, words, kinds, memory_status, memory_session, now)
    else:
        sql, params = _sqlite(agent, words, kinds, memory_status, memory_session, now)
    # Memory filters apply to the union's memory rows only (their `status` is set).
    if memory_type is not None:
        sql += " WHERE (kind <> 'memory' OR role = %s)"
        params.append(memory_type)
    if min_confidence is not None:
        sql += (" AND" if memory_type is not None else " WHERE") + (
            " (kind <> 'memory' OR confidence >= %s)"
        )
        params.append(min_confidence)
    sql += " ORDER BY rank DESC, id DESC LIMIT %s OFFSET %s"
    params += [limit, offset]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        Hit(
            kind=kind,
            id=row_id,
            rank=float(rank),
            snippet=snippet or "",
            session=session,
            seq=seq,
            role=role,
            status=status,
        )
        for kind, row_id, rank, snippet, session, seq, role, status, _confidence in rows
    ]


def _memory_filters(agent, memory_status, memory_session) -> tuple[str, list]:
    """SQL and parameters narrowing memory rows by status and by the session they were
    learned in, inside the query: a filter after the LIMIT would lose matches."""
    sql, params = "", []
    if memory_status:
        sql += " AND mem.status = %s"
        params.append(memory_status)
    if memory_session:
        sql += (
            " AND mem.session_id IN (SELECT id FROM core_session WHERE agent_id = %s AND key = %s)"
        )
        params += [agent.pk, memory_session]
    return sql, params


def _sqlite(agent, words, kinds, memory_status, memory_session, now):
    match = " OR ".join('"' + w.replace('"', "") + '"' for w in words)
    parts, params = [], []
    if "message" in kinds:
        parts.append(
            "SELECT 'message' AS kind, m.id AS id, -bm25(core_message_fts) AS rank, "
            "snippet(core_message_fts, 0, char(2), char(3), '…', 16) AS snippet, "
            "s.key AS session, m.seq AS seq, m.role AS role, NULL AS status, "
            "NULL AS confidence "
            "FROM core_message_fts JOIN core_message m ON m.id = core_message_fts.rowid "
            "JOIN core_session s ON s.id = m.session_id "
            "WHERE core_message_fts MATCH %s AND s.agent_id = %s AND s.expires_at > %s"
        )
        params += [match, agent.pk, now]
    if "finding" in kinds:
        parts.append(
            "SELECT 'finding' AS kind, f.id AS id, -bm25(core_finding_fts) AS rank, "
            "snippet(core_finding_fts, 0, char(2), char(3), '…', 16) AS snippet, "
            "s.key AS session, f.step AS seq, f.tool AS role, NULL AS status, "
            "NULL AS confidence "
            "FROM core_finding_fts JOIN core_finding f ON f.id = core_finding_fts.rowid "
            "JOIN core_session s ON s.id = f.session_id "
            "WHERE core_finding_fts MATCH %s AND s.agent_id = %s AND s.expires_at > %s"
        )
        params += [match, agent.pk, now]
    if "memory" in kinds:
        status_sql, status_params = _memory_filters(agent, memory_status, memory_session)
        parts.append(
            "SELECT 'memory' AS kind, mem.id AS id, -bm25(core_memory_fts) AS rank, "
            "snippet(core_memory_fts, 0, char(2), char(3), '…', 16) AS snippet, "
            "NULL AS session, NULL AS seq, mem.memory_type AS role, mem.status AS status, "
            "mem.confidence AS confidence "
            "FROM core_memory_fts JOIN core_memory mem ON mem.id = core_memory_fts.rowid "
            "WHERE core_memory_fts MATCH %s AND mem.agent_id = %s" + status_sql
        )
        params += [match, agent.pk] + status_params
    return "SELECT * FROM (" + " UNION ALL ".join(parts) + ")", params


def _postgres(agent, words, kinds, memory_status, memory_session, now):
    tsquery = " | ".join(words)
    options = f"StartSel={START}, StopSel={STOP}, MaxWords=30, MinWords=12, MaxFragments=2"
    parts, params = [], []
    if "message" in kinds:
        parts.append(
            "SELECT 'message' AS kind, m.id AS id, "
            "ts_rank(to_tsvector('english'::regconfig, m.content), q) AS rank, "
            "ts_headline('english'::regconfig, m.content, q, %s) AS snippet, "
            "s.key AS session, m.seq AS seq, m.role AS role, NULL AS status, "
            "NULL::double precision AS confidence "
            "FROM core_message m JOIN core_session s ON s.id = m.session_id, "
            "to_tsquery('english'::regconfig, %s) q "
            "WHERE to_tsvector('english'::regconfig, m.content) @@ q "
            "AND s.agent_id = %s AND s.expires_at > %s"
        )
        params += [options, tsquery, agent.pk, now]
    if "finding" in kinds:
        parts.append(
            "SELECT 'finding' AS kind, f.id AS id, "
            "ts_rank(to_tsvector('english'::regconfig, f.fact || ' ' || f.query), q) AS rank, "
            "ts_headline('english'::regconfig, f.fact, q, %s) AS snippet, "
            "s.key AS session, f.step AS seq, f.tool AS role, NULL AS status, "
            "NULL::double precision AS confidence "
            "FROM core_finding f JOIN core_session s ON s.id = f.session_id, "
            "to_tsquery('english'::regconfig, %s) q "
            "WHERE to_tsvector('english'::regconfig, f.fact || ' ' || f.query) @@ q "
            "AND s.agent_id = %s AND s.expires_at > %s"
        )
        params += [options, tsquery, agent.pk, now]
    if "memory" in kinds:
        status_sql, status_params = _memory_filters(agent, memory_status, memory_session)
        parts.append(
            "SELECT 'memory' AS kind, mem.id AS id, "
            "ts_rank(to_tsvector('english'::regconfig, mem.content), q) AS rank, "
            "ts_headline('english'::regconfig, mem.content, q, %s) AS snippet, "
            "NULL AS session, NULL AS seq, mem.memory_type AS role, mem.status AS status, "
            "mem.confidence AS confidence "
            "FROM core_memory mem, to_tsquery('english'::regconfig, %s) q "
            "WHERE to_tsvector('english'::regconfig, mem.content) @@ q "
            "AND mem.agent_id = %s" + status_sql
        )
        params += [options, tsquery, agent.pk] + status_params
    return "SELECT * FROM (" + " UNION ALL ".join(parts) + ") AS hits", params


def recall_memories(
    agent: Agent,
    *,
    query: str = "",
    memory_type: str | None = None,
    min_confidence: float | None = None,
    status: str = "active",
    session_key: str | None = None,
    offset: int = 0,
    limit: int = 20,
) -> tuple[list, bool]:
    """An agent's memories, filtered: ranked by relevance with a query, else by confidence
    then recency. Answers (a page of memories, whether more follow). Used by the API's
    recall and the dashboard's memories page."""
    from memoryapp.core.models import Memory

    if query.strip():
        hits = search(
            agent,
            query,
            kinds=("memory",),
            offset=offset,
            limit=limit + 1,
            memory_status=None if status == "all" else status,
            memory_type=memory_type or None,
            min_confidence=min_confidence or None,
            memory_session=session_key or None,
        )
        by_id = Memory.objects.select_related("session").in_bulk([h.id for h in hits])
        found = [by_id[h.id] for h in hits if h.id in by_id]
    else:
        memories = Memory.objects.for_agent(agent).select_related("session")
        if status != "all":
            memories = memories.filter(status=status)
        if memory_type:
            memories = memories.filter(memory_type=memory_type)
        if min_confidence:
            memories = memories.filter(confidence__gte=min_confidence)
        if session_key:
            memories = memories.filter(session__key=session_key)
        found = list(
            memories.order_by("-confidence", "-updated_at", "-id")[offset : offset + limit + 1]
        )
    return found[:limit], len(found) > limit
