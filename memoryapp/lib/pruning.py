"""Pruning a stored conversation for the context window, without deleting anything.

The rule: every system message is kept. Then the longest contiguous run of the newest
non-system messages is kept such that the kept messages (system ones included) number at
most `max_messages` and cost at most `max_tokens` (the list's cost: the sum of the stored
per-message counts plus 3 for reply priming). System messages are kept even when they
alone exceed a limit; the run is then empty. The run never begins with a `tool` message:
its assistant call was pruned, and providers reject a tool result without its call.

`choose_run` reads the non-system messages newest first and stops as soon as the next
one does not fit, so its cost grows with the limits, not with the stored history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memoryapp.lib.tokens import REPLY_PRIMING_TOKENS


@dataclass(frozen=True)
class MessageCost:
    seq: int
    role: str
    token_count: int


@dataclass(frozen=True)
class Run:
    """The kept newest run: its seqs (ascending) and its tokens."""

    seqs: tuple[int, ...]
    tokens: int


def choose_run(
    newest_first: Iterable[MessageCost],
    *,
    system_count: int,
    system_tokens: int,
    max_messages: int,
    max_tokens: int,
) -> Run:
    """Pick the newest contiguous run of non-system messages that fits the limits."""
    room_messages = max_messages - system_count
    # Reply priming is paid once by any non-empty list.
    room_tokens = max_tokens - system_tokens - REPLY_PRIMING_TOKENS
    kept: list[MessageCost] = []
    used = 0
    if room_messages > 0:
        for message in newest_first:
            if message.role == "system":
                continue
            if len(kept) >= room_messages or used + message.token_count > room_tokens:
                break
            kept.append(message)
            used += message.token_count
    kept.reverse()
    # Drop leading tool results whose assistant call fell outside the run.
    while kept and kept[0].role == "tool":
        used -= kept[0].token_count
        kept.pop(0)
    return Run(seqs=tuple(m.seq for m in kept), tokens=used)


def keeps_all(
    oldest_first: Iterable[tuple[str, int]], *, max_messages: int, max_tokens: int
) -> int | None:
    """The tokens of a whole conversation (each message's role and count, oldest first)
    when the rule keeps every message of it (as `prune` applies it), else None: all its
    system messages, and all the others when they number and cost within the limits
    (reply priming included) and the oldest of them is not a tool result. A restore whose
    session fits is then written as it is stored, without choosing the run."""
    count = tokens = 0
    first_other = None
    for role, token_count in oldest_first:
        count += 1
        tokens += token_count
        if first_other is None and role != "system":
            first_other = role
    if first_other is None:  # system messages only: kept whatever they cost
        return tokens
    if first_other == "tool" or count > max_messages:
        return None
    return tokens if tokens + REPLY_PRIMING_TOKENS <= max_tokens else None


def prune(
    messages: Iterable[MessageCost], *, max_messages: int, max_tokens: int
) -> tuple[list[int], int]:
    """Reference implementation over a whole list (ascending seq): the kept seqs in order
    and the list's cost. Used by tests and by callers that already hold the history."""
    ordered = sorted(messages, key=lambda m: m.seq)
    system = [m for m in ordered if m.role == "system"]
    run = choose_run(
        reversed(ordered),
        system_count=len(system),
        system_tokens=sum(m.token_count for m in system),
        max_messages=max_messages,
        max_tokens=max_tokens,
    )
    kept = sorted({m.seq for m in system} | set(run.seqs))
    tokens = sum(m.token_count for m in system) + run.tokens
    return kept, (tokens + REPLY_PRIMING_TOKENS if kept else 0)
