"""What a session holds and what its memory saved: `GET /api/v1/sessions/{key}/stats`.

- `entries`: rows of each kind the session holds (messages, turns, tool calls, findings,
  working-context items, subtasks, and the long-term memories it produced).
- `bytes`: UTF-8 bytes of the text stored for it (message contents, tool-call queries and
  output excerpts, finding facts, working-context values as JSON, memory contents):
  what the session costs to keep, counted by the database.
- `average_turn_tokens`: exact tokens of the messages per turn, and the usage the agent
  reported per turn (input, output).
- `redundant_tool_calls_avoided`: tool calls the agent did not run because a finding
  already answered them (reported with `known_from`, as the reference loop does).
"""

from __future__ import annotations

from django.db.models import Count, Func, IntegerField, Q, Sum, TextField
from django.db.models.functions import Cast, Coalesce

from memoryapp.core.models import (
    ContextItem,
    Finding,
    Memory,
    Message,
    Session,
    Subtask,
    ToolCall,
)
from memoryapp.core.shapes import Entries, SessionStats


class Utf8Bytes(Func):
    """Bytes of a text column in UTF-8 (not characters)."""

    function = "octet_length"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        template = "length(CAST(%(expressions)s AS BLOB))"
        return self.as_sql(compiler, connection, template=template, **extra)


def _bytes(rows, *columns: str) -> int:
    sizes = {f"b{i}": Coalesce(Sum(Utf8Bytes(column)), 0) for i, column in enumerate(columns)}
    return sum(int(n) for n in rows.aggregate(**sizes).values())


def session_stats(session: Session) -> SessionStats:
    calls = ToolCall.objects.filter(session=session).aggregate(
        n=Count("id"), avoided=Count("id", filter=Q(skipped=True))
    )
    entries: Entries = {
        "messages": session.message_count,
        "turns": session.turn_count,
        "tool_calls": calls["n"],
        "findings": Finding.objects.filter(session=session).count(),
        "context_items": ContextItem.objects.filter(session=session).count(),
        "subtasks": Subtask.objects.filter(session=session).count(),
        "memories": Memory.objects.filter(session=session).count(),
        "total": 0,
    }
    entries["total"] = sum(v for k, v in entries.items() if k != "total")
    context = ContextItem.objects.filter(session=session).annotate(text=Cast("value", TextField()))
    stored = (
        _bytes(Message.objects.filter(session=session), "content")
        + _bytes(ToolCall.objects.filter(session=session), "query", "output_excerpt")
        + _bytes(Finding.objects.filter(session=session), "fact")
        + _bytes(context, "text")
        + _bytes(Memory.objects.filter(session=session), "content")
    )
    turns = session.turn_count or 1
    return {
        "entries": entries,
        "bytes": stored,
        "average_turn_tokens": {
            "messages": round(session.token_count / turns, 1),
            "input": round(session.input_tokens / turns, 1),
            "output": round(session.output_tokens / turns, 1),
        },
        "redundant_tool_calls_avoided": calls["avoided"],
    }
