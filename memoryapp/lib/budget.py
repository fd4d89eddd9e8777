"""Splitting a context's token budget between its sections.

`allocate_budget(total)` gives the default shares: system = min(2000, total/16),
conversation = total·5/8, working = total/8, long-term = total·3/16 (integer division).
An agent may override any section. The shares never add up to more than `total`: with
overrides that would, the conversation share shrinks to what is left.

Unused share flows to the conversation: context assembly fills working context and
long-term memory first, then gives the conversation its own share plus what those two
left unused and what integer division (or the 2000-token system cap) left unallocated
(`effective_budget`). The system share does not flow: it holds the session state and
the summary of pruned history, whose size depends on what the conversation prunes. So
the conversation keeps more history when there is little working context or memory, no
section exceeds its effective budget, and the total never exceeds `total`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SECTIONS = ("system", "conversation", "working", "long_term")


@dataclass(frozen=True)
class Budget:
    total: int
    system: int
    conversation: int
    working: int
    long_term: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def allocate_budget(total: int, overrides: dict[str, int | None] | None = None) -> Budget:
    if total < 0:
        raise ValueError("a token budget cannot be negative")
    shares = {
        "system": min(2000, total // 16),
        "conversation": total * 5 // 8,
        "working": total // 8,
        "long_term": total * 3 // 16,
    }
    for name, value in (overrides or {}).items():
        if value is not None:
            if name not in shares:
                raise ValueError(f"unknown budget section {name!r}")
            if value < 0:
                raise ValueError(f"the {name} budget cannot be negative")
            shares[name] = value
    # Overrides may not push the sum past the total: the others are fixed by intent, the
    # conversation takes what is left.
    others = shares["system"] + shares["working"] + shares["long_term"]
    if others > total:
        # Even the fixed sections do not fit: scale them down in order of priority.
        remaining = total
        for name in ("system", "working", "long_term"):
            shares[name] = min(shares[name], remaining)
            remaining -= shares[name]
        shares["conversation"] = 0
    else:
        shares["conversation"] = min(shares["conversation"], total - others)
    return Budget(total=total, **shares)


def effective_budget(budget: Budget, used: dict[str, int]) -> Budget:
    """The conversation's budget after working's and long-term's unused shares and the
    unallocated remainder flowed to it (the system share is reserved, see above)."""
    unused = sum(
        max(0, getattr(budget, name) - used.get(name, 0)) for name in ("working", "long_term")
    )
    leftover = budget.total - (
        budget.system + budget.conversation + budget.working + budget.long_term
    )
    return Budget(
        total=budget.total,
        system=budget.system,
        conversation=budget.conversation + unused + leftover,
        working=budget.working,
        long_term=budget.long_term,
    )
