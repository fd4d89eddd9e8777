"""Restoring a session's conversation: the pruned history a model call gets back
(`restore_history`), and where a restore with given limits starts (`pruned_point`, what
the summary of pruned history covers). It reads values, not model instances, and deletes
nothing: pruning hides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Q

from memoryapp.core.models import Message, Session
from memoryapp.core.shapes import History, HistoryMessage
from memoryapp.lib import tokens
from memoryapp.lib.pruning import MessageCost, Run, choose_run, keeps_all

# Non-system messages are read newest first in pages of this size.
_HISTORY_PAGE = 256


def _message_rows(
    session: Session, fields: tuple[str, ...], order: str = "seq", *where: Q, **equal: Any
) -> list[dict[str, Any]]:
    """The `fields` of the session's messages that `where` selects, up to its count as
    read (a concurrent append shows whole or not at all): values, not model instances, as
    a whole history is thousands of rows."""
    messages = Message.objects.filter(*where, session=session, **equal)
    messages = messages.filter(seq__lte=session.message_count)
    return list(messages.order_by(order).values(*fields))


def _newest_first(
    session: Session, limit: int, read: dict[int, dict[str, Any]], fields: tuple[str, ...]
):
    """Yield the newest non-system messages' costs, newest first, reading at most
    `limit` of them. Each message read is kept in `read` by seq (its `fields`, for the
    restore to write): the kept run is never read twice.

    Read in windows of seq, newest first: `seq` is gapless, so a window of n seqs holds
    at most n messages whatever the planner believes. (A keyset page, `seq < x ORDER BY
    seq DESC LIMIT n`, made PostgreSQL read a whole 100,000-message session and sort it
    when its statistics predated the session's growth: 40 ms instead of 0.3.)"""
    high = session.message_count  # bounded by the count as read: see restore_history
    remaining = limit
    while remaining > 0 and high >= 0:
        low = max(0, high - min(_HISTORY_PAGE, remaining) + 1)
        page = _message_rows(
            session, fields, "-seq", ~Q(role=Message.Role.SYSTEM), seq__lte=high, seq__gte=low
        )
        for row in page:
            read[row["seq"]] = row
            yield MessageCost(row["seq"], row["role"], row["token_count"])
        remaining -= len(page)
        high = low - 1


# What choosing the kept run reads of a message (a restore reads the whole message).
_COST_FIELDS = ("seq", "role", "token_count")


def _choose(
    session: Session,
    max_messages: int,
    max_tokens: int,
    fields: tuple[str, ...] = (),
    everything: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]], Run]:
    """The pruning rule over the stored session (memoryapp.lib.pruning): its system
    messages, every message read by seq, and the kept run. A session with no more
    messages than the limit and one is read all at once (restore_history reads one within
    the limit itself, to ask whether it all fits); a longer one reads its system messages,
    then the newest others page by page until the run is chosen. `fields`: what is read
    of each message (MESSAGE_FIELDS by default). `everything`: the session's every
    message (oldest first), already read, for a session read all at once."""
    fields = fields or MESSAGE_FIELDS
    read: dict[int, dict[str, Any]] = {}
    if session.message_count <= max_messages + 1:
        if everything is None:
            everything = _message_rows(session, fields)
        system = [m for m in everything if m["role"] == Message.Role.SYSTEM]
        for m in everything:
            read[m["seq"]] = m
        newest_first: Any = (
            MessageCost(m["seq"], m["role"], m["token_count"])
            for m in reversed(everything)
            if m["role"] != Message.Role.SYSTEM
        )
    else:
        system = _message_rows(session, fields, role=Message.Role.SYSTEM)
        limit = max(0, max_messages - len(system)) + 1
        newest_first = _newest_first(session, limit, read, fields)
    run = choose_run(
        newest_first,
        system_count=len(system),
        system_tokens=sum(m["token_count"] for m in system),
        max_messages=max_messages,
        max_tokens=max_tokens,
    )
    return system, read, run


def restore_history(
    session: Session,
    *,
    max_messages: int,
    max_tokens: int,
    write: Callable[[dict[str, Any]], Any] | None = None,
) -> History:
    """The conversation pruned for the context window (see memoryapp.lib.pruning).
    Values, not model instances: a whole history is thousands of rows. `write`: how each
    kept message (its MESSAGE_FIELDS' values) is written (message_dict by default)."""
    everything = None
    if session.message_count <= max_messages:
        everything = _message_rows(session, MESSAGE_FIELDS)
    if everything is not None:
        every_cost = ((m["role"], m["token_count"]) for m in everything)
        stored = keeps_all(every_cost, max_messages=max_messages, max_tokens=max_tokens)
        if stored is not None:  # it all fits: kept as stored, nothing to choose
            return {
                "messages": [(write or message_dict)(m) for m in everything],
                "token_count": stored + tokens.REPLY_PRIMING_TOKENS if everything else 0,
                "pruned_count": session.message_count - len(everything),
                "pruned_tokens": session.token_count - stored,
            }
    system, read, run = _choose(session, max_messages, max_tokens, MESSAGE_FIELDS, everything)
    system_tokens = sum(m["token_count"] for m in system)
    kept = sorted([*system, *(read[seq] for seq in run.seqs)], key=lambda m: m["seq"])
    kept_tokens = system_tokens + run.tokens
    kept_count = len(system) + len(run.seqs)
    return {
        "messages": [(write or message_dict)(m) for m in kept],
        "token_count": tokens.count_messages(m["token_count"] for m in kept),
        "pruned_count": session.message_count - kept_count,
        "pruned_tokens": session.token_count - kept_tokens,
    }


def pruned_point(session: Session, *, max_messages: int, max_tokens: int) -> tuple[int, int]:
    """(pruned_count, pruned_through) of `restore_history` with these limits, reading only
    what choosing the run needs of each message (no contents): what the worker's
    roll-ahead asks after every turn of a session past its limits."""
    system, _, run = _choose(session, max_messages, max_tokens, _COST_FIELDS)
    pruned_count = session.message_count - len(system) - len(run.seqs)
    return pruned_count, (run.seqs[0] - 1) if run.seqs else session.message_count


def pruned_through(session: Session, kept: list[HistoryMessage]) -> int:
    """The last seq a restore that keeps `kept` prunes: before its first kept message
    that is not a system message (all of them when it keeps none)."""
    others = [m["seq"] for m in kept if m["role"] != "system"]
    return others[0] - 1 if others else session.message_count


# What message_dict reads of a message (a model instance, or these columns' values).
MESSAGE_FIELDS = (
    "seq", "role", "content", "token_count", "created_at", "name", "tool_call_id",
    "tool_calls", "client_id", "removed_at", "revisions",
)  # fmt: skip


def message_dict(message: Message | dict[str, Any]) -> HistoryMessage:
    m = message if isinstance(message, dict) else {f: getattr(message, f) for f in MESSAGE_FIELDS}
    data: HistoryMessage = {
        "seq": m["seq"],
        "role": m["role"],
        "content": m["content"],
        "token_count": m["token_count"],
        "created_at": m["created_at"].isoformat(),
    }
    if m["name"]:
        data["name"] = m["name"]
    if m["tool_call_id"]:
        data["tool_call_id"] = m["tool_call_id"]
    if m["tool_calls"]:
        data["tool_calls"] = m["tool_calls"]
    # Written by clients that name their messages and send the whole list (memoryapp/ams).
    if m["client_id"]:
        data["client_id"] = m["client_id"]
    if m["removed_at"] is not None:
        data["removed_at"] = m["removed_at"].isoformat()
    if m["revisions"]:
        data["revisions"] = m["revisions"]
    return data
