"""Full-text search over an agent's messages, findings and memories.

SQLite uses the FTS5 tables of migration 0003 (bm25 ranking, `snippet()`); PostgreSQL
uses `to_tsvector('english', …)` with the GIN indexes of the same migration (`ts_rank`,
`ts_headline`). The query is reduced to its words and rebuilt in one of three modes, so
no user input ever reaches a query parser's syntax: `any` word may match (ranked by how
well they match), `all` words must, or the words must stand together as a `phrase`
(in order; PostgreSQL's phrase skips English stop words, FTS5's does not).

Only live sessions' messages and findings are searched; memories are searched whatever
their session, as they belong to the agent. `search` answers a page of hits ordered by
rank (then id and kind, so pages never overlap); `count` answers how many there are in
all, in one query of the same shape without the ranking and snippets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from memoryapp.core.models import Agent
from memoryapp.lib import relevance

KINDS = ("message", "finding", "memory")
ANY, ALL, PHRASE = "any", "all", "phrase"
MODES = (ALL, ANY, PHRASE)
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
    seq: int | None = None  # a message's seq; a finding's step (its turn's iteration)
    role: str | None = None  # a message's role, a finding's tool, a memory's type
    status: str | None = None
    at: datetime | None = None  # when it was written: a message's, else its last change
    message_seq: int | None = None  # the message a message or finding hit opens

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
    """The query's distinct content words (stop words dropped: memoryapp.lib.relevance),
    casefolded, at most MAX_TERMS: a query of stop words alone matches nothing."""
    return relevance.query_terms(query)[:MAX_TERMS]


def phrase_words(query: str) -> list[str]:
    """The query's words in order, repeats kept: a phrase is its words as written (none
    when all of them are stop words)."""
    words = _WORD.findall(query.casefold())[:MAX_TERMS]
    return words if relevance.content_words(words) else []


@dataclass(frozen=True)
class _Part:
    """One kind's SELECT: its columns and its FROM … WHERE, each with its parameters, so
    a page and a count share the same matching rows."""

    columns: str
    column_params: list
    body: str
    body_params: list


@dataclass(frozen=True)
class _Filters:
    kinds: tuple[str, ...]
    memory_status: str | None
    memory_type: str | None
    min_confidence: float | None
    memory_session: str | None
    now: datetime
    # Whether each hit's snippet is written (off for a caller that reads only the ids and
    # their order: the snippet is most of a hit's cost on PostgreSQL, ts_headline).
    snippets: bool = True


def _snippet(filters: _Filters, expression: str) -> str:
    return f"{expression} AS snippet" if filters.snippets else "NULL AS snippet"


def _parts(agent: Agent, query: str, mode: str, filters: _Filters) -> list[_Part]:
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}")
    words = phrase_words(query) if mode == PHRASE else terms(query)
    if not words:
        return []
    if connection.vendor == "postgresql":
        return _postgres(agent, _tsquery_text(query, words, mode), mode, filters)
    return _sqlite(agent, words, mode, filters)


def search(
    agent: Agent,
    query: str,
    *,
    kinds: tuple[str, ...] = KINDS,
    mode: str = ANY,
    offset: int = 0,
    limit: int = 20,
    memory_status: str | None = "active",
    memory_type: str | None = None,
    min_confidence: float | None = None,
    memory_session: str | None = None,
    now: datetime | None = None,
    snippets: bool = True,
) -> list[Hit]:
    """A page of hits, best first. `snippets=False`: each hit's snippet is empty (for a
    caller that reads only which rows match and their order)."""
    filters = _Filters(
        kinds,
        memory_status,
        memory_type,
        min_confidence,
        memory_session,
        now or timezone.now(),
        snippets,
    )
    parts = _parts(agent, query, mode, filters)
    if not parts:
        return []
    sql, params = _union(parts, columns=True)
    sql += " ORDER BY rank DESC, id DESC, kind LIMIT %s OFFSET %s"
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
            at=_as_datetime(at),
            message_seq=message_seq,
        )
        for kind, row_id, rank, snippet, session, seq, role, status, at, message_seq in rows
    ]


def count(
    agent: Agent,
    query: str,
    *,
    kinds: tuple[str, ...] = KINDS,
    mode: str = ANY,
    memory_status: str | None = "active",
    memory_type: str | None = None,
    min_confidence: float | None = None,
    memory_session: str | None = None,
    now: datetime | None = None,
) -> int:
    """How many hits `search` with the same arguments finds in all."""
    filters = _Filters(
        kinds, memory_status, memory_type, min_confidence, memory_session, now or timezone.now()
    )
    parts = _parts(agent, query, mode, filters)
    if not parts:
        return 0
    sql, params = _union(parts, columns=False)
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM (" + sql + ") AS counted", params)
        return cursor.fetchone()[0]


@dataclass
class Results:
    """One search, run lazily: `count()` and a slice (`results[20:40]`) each run one
    query, so Django's Paginator pages it. `now` is fixed when it is made, so the count
    and the page agree on which sessions are live."""

    agent: Agent
    query: str
    kinds: tuple[str, ...] = KINDS
    mode: str = ANY
    memory_status: str | None = "active"
    now: datetime | None = None

    def __post_init__(self) -> None:
        self.now = self.now or timezone.now()

    def _options(self) -> dict:
        return {
            "kinds": self.kinds,
            "mode": self.mode,
            "memory_status": self.memory_status,
            "now": self.now,
        }

    def count(self) -> int:
        return count(self.agent, self.query, **self._options())

    def __getitem__(self, bounds: slice) -> list[Hit]:
        if not isinstance(bounds, slice) or bounds.step not in (None, 1):
            raise TypeError("search results are read a page (a slice) at a time")
        start = bounds.start or 0
        if bounds.stop is None or bounds.stop <= start:
            return []
        return search(
            self.agent, self.query, offset=start, limit=bounds.stop - start, **self._options()
        )


def _union(parts: list[_Part], *, columns: bool) -> tuple[str, list]:
    selects, params = [], []
    for part in parts:
        if columns:
            selects.append(f"SELECT {part.columns} {part.body}")
            params += part.column_params + part.body_params
        else:
            selects.append(f"SELECT 1 AS one {part.body}")
            params += part.body_params
    return "SELECT * FROM (" + " UNION ALL ".join(selects) + ") AS hits", params


def _as_datetime(value) -> datetime | None:
    """A timestamp column read through a raw cursor: PostgreSQL gives an aware datetime,
    SQLite the text Django stored (UTC, no offset)."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is not None and timezone.is_naive(parsed):
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _memory_filters(agent: Agent, filters: _Filters) -> tuple[str, list]:
    """SQL and parameters narrowing memory rows by status, type, confidence and the
    session they were learned in, inside the query: a filter after the LIMIT would lose
    matches."""
    sql, params = "", []
    if filters.memory_status:
        sql += " AND mem.status = %s"
        params.append(filters.memory_status)
    if filters.memory_type:
        sql += " AND mem.memory_type = %s"
        params.append(filters.memory_type)
    if filters.min_confidence is not None:
        sql += " AND mem.confidence >= %s"
        params.append(filters.min_confidence)
    if filters.memory_session:
        sql += (
            " AND mem.session_id IN (SELECT id FROM core_session WHERE agent_id = %s AND key = %s)"
        )
        params += [agent.pk, filters.memory_session]
    return sql, params


# Every part selects the same columns, in this order (the union needs one shape):
# kind, id, rank, snippet, session, seq, role, status, at, message_seq.


def _fts5_match(words: list[str], mode: str) -> str:
    """An FTS5 query of quoted words only (a double quote cannot occur in a word)."""
    if mode == PHRASE:
        return '"' + " ".join(words) + '"'
    return (" AND " if mode == ALL else " OR ").join(f'"{word}"' for word in words)


def _sqlite(agent: Agent, words: list[str], mode: str, filters: _Filters) -> list[_Part]:
    match = _fts5_match(words, mode)
    parts = []
    if "message" in filters.kinds:
        parts.append(
            _Part(
                "'message' AS kind, m.id AS id, -bm25(core_message_fts) AS rank, "
                + _snippet(filters, "snippet(core_message_fts, 0, char(2), char(3), '…', 16)")
                + ", "
                "s.key AS session, m.seq AS seq, m.role AS role, NULL AS status, "
                "m.created_at AS at, m.seq AS message_seq",
                [],
                "FROM core_message_fts JOIN core_message m ON m.id = core_message_fts.rowid "
                "JOIN core_session s ON s.id = m.session_id "
                "WHERE core_message_fts MATCH %s AND s.agent_id = %s AND s.expires_at > %s",
                [match, agent.pk, filters.now],
            )
        )
    if "finding" in filters.kinds:
        parts.append(
            _Part(
                "'finding' AS kind, f.id AS id, -bm25(core_finding_fts) AS rank, "
                + _snippet(filters, "snippet(core_finding_fts, 0, char(2), char(3), '…', 16)")
                + ", "
                "s.key AS session, f.step AS seq, f.tool AS role, NULL AS status, "
                "f.updated_at AS at, fm.seq AS message_seq",
                [],
                "FROM core_finding_fts JOIN core_finding f ON f.id = core_finding_fts.rowid "
                "JOIN core_session s ON s.id = f.session_id "
                "LEFT JOIN core_message fm ON fm.id = f.message_id "
                "WHERE core_finding_fts MATCH %s AND s.agent_id = %s AND s.expires_at > %s",
                [match, agent.pk, filters.now],
            )
        )
    if "memory" in filters.kinds:
        memory_sql, memory_params = _memory_filters(agent, filters)
        parts.append(
            _Part(
                "'memory' AS kind, mem.id AS id, -bm25(core_memory_fts) AS rank, "
                + _snippet(filters, "snippet(core_memory_fts, 0, char(2), char(3), '…', 16)")
                + ", "
                "NULL AS session, NULL AS seq, mem.memory_type AS role, mem.status AS status, "
                "mem.updated_at AS at, NULL AS message_seq",
                [],
                "FROM core_memory_fts JOIN core_memory mem ON mem.id = core_memory_fts.rowid "
                "WHERE core_memory_fts MATCH %s AND mem.agent_id = %s" + memory_sql,
                [match, agent.pk] + memory_params,
            )
        )
    return parts


# The tsquery function and the operator joining the words, by mode: the words are \w+
# only, so the joined string holds no syntax but the operator we put there.
_TSQUERY = {
    ANY: ("to_tsquery", " | "),
    ALL: ("to_tsquery", " & "),
    PHRASE: ("phraseto_tsquery", " "),
}


def _tsquery_text(query: str, words: list[str], mode: str) -> str:
    """The words joined by the mode's operator. PostgreSQL's parser keeps a path or a
    dotted name (`tests/__init__.py`) as one lexeme where FTS5 splits it into words, so
    each such name of the query is also asked for whole: `name | part & part` in place of
    its parts (the names hold only \\w, `.`, `-` and `/`, none of them tsquery syntax)."""
    if mode == PHRASE:
        return " ".join(words)
    joiner = _TSQUERY[mode][1]
    paths = [i for i in sorted(relevance.identifiers(query)) if "/" in i or "." in i]
    if not paths:
        return joiner.join(words)
    in_paths: set[str] = set()
    groups = []
    for path in paths:
        parts = [w for w in terms(path) if w in words]
        in_paths.update(parts)
        groups.append("(" + path + (" | " + " & ".join(parts) if parts else "") + ")")
    rest = [w for w in words if w not in in_paths]
    return joiner.join(groups + rest)


def _postgres(agent: Agent, tsquery: str, mode: str, filters: _Filters) -> list[_Part]:
    function = _TSQUERY[mode][0]
    query_from = f"{function}('english'::regconfig, %s) q"
    options = f"StartSel={START}, StopSel={STOP}, MaxWords=30, MinWords=12, MaxFragments=2"
    snippet_params = [options] if filters.snippets else []  # ts_headline's, when written
    parts = []
    if "message" in filters.kinds:
        parts.append(
            _Part(
                "'message' AS kind, m.id AS id, "
                "ts_rank(to_tsvector('english'::regconfig, m.content), q) AS rank, "
                + _snippet(filters, "ts_headline('english'::regconfig, m.content, q, %s)")
                + ", "
                "s.key AS session, m.seq AS seq, m.role AS role, NULL AS status, "
                "m.created_at AS at, m.seq AS message_seq",
                snippet_params,
                f"FROM core_message m JOIN core_session s ON s.id = m.session_id, {query_from} "
                "WHERE to_tsvector('english'::regconfig, m.content) @@ q "
                "AND s.agent_id = %s AND s.expires_at > %s",
                [tsquery, agent.pk, filters.now],
            )
        )
    if "finding" in filters.kinds:
        parts.append(
            _Part(
                "'finding' AS kind, f.id AS id, "
                "ts_rank(to_tsvector('english'::regconfig, f.fact || ' ' || f.query), q) AS rank, "
                + _snippet(filters, "ts_headline('english'::regconfig, f.fact, q, %s)")
                + ", "
                "s.key AS session, f.step AS seq, f.tool AS role, NULL AS status, "
                "f.updated_at AS at, fm.seq AS message_seq",
                snippet_params,
                "FROM core_finding f JOIN core_session s ON s.id = f.session_id "
                f"LEFT JOIN core_message fm ON fm.id = f.message_id, {query_from} "
                "WHERE to_tsvector('english'::regconfig, f.fact || ' ' || f.query) @@ q "
                "AND s.agent_id = %s AND s.expires_at > %s",
                [tsquery, agent.pk, filters.now],
            )
        )
    if "memory" in filters.kinds:
        memory_sql, memory_params = _memory_filters(agent, filters)
        parts.append(
            _Part(
                "'memory' AS kind, mem.id AS id, "
                "ts_rank(to_tsvector('english'::regconfig, mem.content), q) AS rank, "
                + _snippet(filters, "ts_headline('english'::regconfig, mem.content, q, %s)")
                + ", "
                "NULL AS session, NULL AS seq, mem.memory_type AS role, mem.status AS status, "
                "mem.updated_at AS at, NULL AS message_seq",
                snippet_params,
                f"FROM core_memory mem, {query_from} "
                "WHERE to_tsvector('english'::regconfig, mem.content) @@ q "
                "AND mem.agent_id = %s" + memory_sql,
                [tsquery, agent.pk] + memory_params,
            )
        )
    return parts
