"""Context assembly: what an agent gets back before each model call.

The token budget is split by memoryapp.lib.budget. Sections are filled by priority, each
a prefix of its priority order, so truncation always drops the least important first:
- working: working-context items by confidence (then recency), then findings by
  usefulness (memoryapp.lib.usefulness: the latest todo list, the latest run of a command
  and one line per edited file; what bears on the active files first, bookkeeping last),
  in the working share (findings are execution memory: working memory);
- long-term: the active memories that bear on the task, best first by recall's fused
  ranking of words and meaning (memoryapp.core.recall), in the long-term share: with a
  `query_hint`, its 10 best; without one, a hint is derived from the session (its goal,
  the current subtask, the latest user message, the active file) and the 5 best that
  share three of its words or an identifier (memoryapp.lib.relevance's floor) or are
  close enough in meaning are kept, except a memory about another language's project than
  the session's (`python -m pytest` in a Rust session: relevance.of_another_ecosystem)
  (none when none is: an empty section beats a wrong one);
- conversation: the pruned-history rule within its share plus what working and long-term
  left unused;
- system: session state (goal, current subtask, active files, recent tools) and the
  summary of pruned history, in the system share.
Every count is exact: the stored per-message counts for the conversation, tiktoken over
the formatted markdown for the rest. The cost is bounded by the budget and the limits,
not by how much the session holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F
from django.utils import timezone

from memoryapp.core import recall
from memoryapp.core.dispatch import after_answer
from memoryapp.core.models import (
    ContextItem,
    Finding,
    Memory,
    Session,
    Subtask,
    ToolCall,
)
from memoryapp.core.restore import pruned_through, restore_history
from memoryapp.core.shapes import (
    Context,
    ContextItemShape,
    Cut,
    FindingShape,
    RecalledMemory,
    WorkingItem,
)
from memoryapp.core.summaries import summarize_pruned
from memoryapp.lib import prompt as fmt
from memoryapp.lib import relevance, tokens, usefulness
from memoryapp.lib.budget import allocate_budget, effective_budget
from memoryapp.lib.code.languages import language_of
from memoryapp.lib.extraction import kinds
from memoryapp.lib.extraction.context import relative

MEMORIES_WITH_HINT = 10
MEMORIES_WITHOUT_HINT = 5
# Without a hint, a memory must share this many of the session's content words (or one of
# its identifiers), or be this much closer to it than unrelated text
# (memoryapp.core.recall.MARGIN); both set on bench/probes/recall.json's tune sessions
# (bench/recall.py): the hint joins goal, task and message, so two words were too easy.
DERIVED_WORDS = 3
DERIVED_MARGIN = 0.10
MAX_WORKING_ITEMS = 500
MAX_FINDINGS = 200
RECENT_TOOL_CALLS = 50


@dataclass
class Fitted:
    """A section's kept items (a prefix of the candidates) and its exact token count."""

    kept: list = field(default_factory=list)
    text: str = ""
    tokens: int = 0
    dropped: int = 0


def fit_lines(encoding, header: str, candidates: list, line_of, budget: int) -> Fitted:
    """Keep the longest prefix of `candidates` whose section fits `budget` tokens."""
    if not candidates:
        return Fitted()
    kept, lines = [], []
    # Lines are separate pre-tokens for tiktoken (split at newlines), so per-line counts add
    # up; the exact count of the final text is checked below all the same.
    used = tokens.count_text(encoding, header + "\n\n")
    for item in candidates:
        line = line_of(item)
        cost = tokens.count_text(encoding, line + "\n")
        if used + cost > budget:
            break
        kept.append(item)
        lines.append(line)
        used += cost
    while kept:
        text = header + "\n" + "\n".join(lines)
        exact = tokens.count_text(encoding, text + "\n\n")
        if exact <= budget:
            return Fitted(kept, text, exact, len(candidates) - len(kept))
        kept.pop()
        lines.pop()
    return Fitted(dropped=len(candidates))


# Where a project's dependencies live: read to learn, never the files being worked on.
_DEPENDENCY = re.compile(
    r"/(?:site-packages|dist-packages|node_modules|deps|_build|\.venv|venv|vendor|target)/"
    r"|^/usr/(?:lib|include|share)/"
)


def _session_state(session: Session, items: list[ContextItem]) -> fmt.SessionState:
    subtasks = list(
        Subtask.objects.filter(
            session=session, status__in=(Subtask.Status.IN_PROGRESS, Subtask.Status.PENDING)
        ).order_by("position", "id")[:20]
    )
    current = next((t for t in subtasks if t.status == Subtask.Status.IN_PROGRESS), None) or (
        subtasks[0] if subtasks else None
    )
    calls = list(
        ToolCall.objects.filter(session=session)
        .order_by("-id")
        .values_list("tool", "file_path", "kind")[:RECENT_TOOL_CALLS]
    )
    cwd = session.cwd
    files: list[str] = []
    for item in items:
        if item.key in ("active_file", "active_files"):
            values = item.value if isinstance(item.value, list) else [item.value]
            files.extend(str(v) for v in values if v)
    # Files it changed first, then files of the project it read (not its dependencies').
    files += [relative(path, cwd) for _, path, kind in calls if path and kind == kinds.EDIT]
    files += [
        relative(path, cwd)
        for _, path, kind in calls
        if path
        and kind != kinds.EDIT
        and not _DEPENDENCY.search(path)
        and (not cwd or path.startswith(cwd.rstrip("/") + "/") or not path.startswith("/"))
    ]
    tools: list[str] = []
    for tool, _, _ in calls:
        if tool not in tools:
            tools.append(tool)
    return fmt.SessionState(
        goal=session.goal,
        subtask=current.title if current else "",
        subtask_status=current.status if current else "",
        active_files=list(dict.fromkeys(files))[:5],
        recent_tools=tools[:5],
    )


def derived_hint(session: Session) -> str:
    """What the session is about, for choosing memories without a hint: its goal, the
    current subtask, the current task and active file of its working context, and the
    latest user message (its first 1,000 characters)."""
    parts = [session.goal]
    subtask = (
        Subtask.objects.filter(
            session=session, status__in=(Subtask.Status.IN_PROGRESS, Subtask.Status.PENDING)
        )
        .order_by("status", "position", "id")  # in_progress sorts before pending
        .values_list("title", flat=True)
        .first()
    )
    parts.append(subtask or "")
    for item in ContextItem.objects.filter(
        session=session, key__in=("current_task", "active_file")
    ).order_by("key"):
        parts.append(item.value if isinstance(item.value, str) else "")
    latest = (
        session.messages.filter(role="user").order_by("-seq").values_list("content", flat=True)
    ).first()
    parts.append((latest or "")[:1000])
    return "\n".join(p for p in parts if p)


def _memory_candidates(session: Session, query_hint: str) -> list[Memory]:
    """The memories for the prompt, best first (memoryapp.core.recall, each with `.why`):
    for a query hint its MEMORIES_WITH_HINT best; without one, of the memories that bear
    on the session (derived_hint) by DERIVED_WORDS of its words (relevance.Query.clears) or
    by a similarity DERIVED_MARGIN above unrelated text, the MEMORIES_WITHOUT_HINT best."""
    if query_hint.strip():
        return recall.rank(session.agent, query_hint, status="active")[:MEMORIES_WITH_HINT]
    hint = derived_hint(session)
    if not hint.strip():
        return []
    asked = relevance.Query.of(hint)
    ecosystem = session_ecosystem(session)
    found = [
        m
        for m in recall.rank(session.agent, hint, status="active")
        if (asked.clears(m.why.terms, DERIVED_WORDS) or (m.why.margin or 0.0) >= DERIVED_MARGIN)
        and not relevance.of_another_ecosystem(m.content, ecosystem)
    ]
    return found[:MEMORIES_WITHOUT_HINT]


def session_ecosystem(session: Session) -> str | None:
    """The language ecosystem the session works in (relevance.ECOSYSTEM_WORDS): its working
    context's primary language, else the language of its active file; None when unknown."""
    values = dict(
        ContextItem.objects.filter(
            session=session, key__in=("primary_language", "language", "active_file")
        ).values_list("key", "value")
    )
    for key in ("primary_language", "language"):
        if isinstance(values.get(key), str) and (found := relevance.ecosystem_of(values[key])):
            return found
    active = values.get("active_file")
    language = language_of(active) if isinstance(active, str) else None
    return relevance.ecosystem_of(language) if language else None


def working_item_dict(item: ContextItem) -> WorkingItem:
    return {
        "key": item.key,
        "value": item.value,
        "source": item.source,
        "confidence": item.confidence,
    }


def context_item_dict(item: ContextItem) -> ContextItemShape:
    return {**working_item_dict(item), "updated_at": item.updated_at.isoformat()}


def memory_dict(memory: Memory) -> RecalledMemory:
    """A memory's JSON shape, with `why` when recall chose it."""
    return {
        "id": memory.id,
        "memory_type": memory.memory_type,
        "content": memory.content,
        "confidence": memory.confidence,
        "status": memory.status,
        "source": memory.source,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "expires_at": memory.expires_at.isoformat() if memory.expires_at else None,
        **({"why": memory.why.as_dict()} if hasattr(memory, "why") else {}),
    }


def finding_dict(finding: Finding, stale: bool | None = None) -> FindingShape:
    """A finding's JSON shape, with its provenance: the turn, message and tool call it
    last came from (select_related("turn", "message", "tool_call") for lists)."""
    return {
        "id": finding.id,
        "tool": finding.tool,
        "kind": finding.kind,
        "query": finding.query,
        "fact": finding.fact,
        "step": finding.step,
        "success": finding.success,
        "file_path": finding.file_path,
        "source": finding.source,
        "group": fmt.finding_group(finding.kind),
        "stale": finding.is_stale() if stale is None else stale,
        "details": finding.details,
        "provenance": {
            "turn": finding.turn.iteration if finding.turn_id else None,
            "message_seq": finding.message.seq if finding.message_id else None,
            "tool_call_id": finding.tool_call.call_id or None if finding.tool_call_id else None,
        },
        "updated_at": finding.updated_at.isoformat(),
    }


# What finding_dict reads of a finding's turn, message and tool call.
FINDING_PROVENANCE = ("turn__iteration", "message__seq", "tool_call__call_id")


def findings_for_prompt(
    session: Session, newest: list[Finding], active_files: list[str]
) -> PromptFindings:
    """`newest` (the session's findings newest first, by updated_at then id, with
    FINDING_PROVENANCE) folded and ordered by usefulness for the prompt."""
    stale = Finding.stale_among(session, newest)
    candidates = [
        usefulness.Candidate(f.kind, f.tool, f.query, f.fact, f.file_path, f.success, f.id in stale)
        for f in newest
    ]
    picks = usefulness.by_usefulness(candidates, active_files)
    return PromptFindings(
        [newest[p.index] for p in picks],
        {newest[p.index].id: p.earlier for p in picks},
        stale,
        len(newest) - len(picks),
    )


@dataclass
class PromptFindings:
    findings: list[Finding]  # in the prompt's order
    earlier: dict[int, int]  # by id: how many earlier findings each stands for
    stale: set[int]  # ids of reads of files changed since
    folded: int  # how many findings a later one stands for


def read_findings(
    session: Session,
    limit: int,
    *,
    after: int | None = None,
    call_columns: tuple[str, ...] = ("call_id",),
) -> list[Finding]:
    """The session's findings, newest first (by updated_at, then id), or with `after` the
    first ones after that id (by id). Of the related rows only what the provenance names
    (finding_dict; the dashboard also shows the call's tool and query), not a message's
    content or a tool call's output; the session is the one given."""
    own = [f.name for f in Finding._meta.concrete_fields]
    found = (
        Finding.objects.filter(session=session)
        .select_related("turn", "message", "tool_call")
        .only(*own, "turn__iteration", "message__seq", *(f"tool_call__{c}" for c in call_columns))
    )
    if after is None:
        found = found.order_by("-updated_at", "-id")
    else:
        found = found.filter(id__gt=after).order_by("id")
    newest = list(found[:limit])
    for finding in newest:
        finding.session = session
    return newest


def assemble_context(
    session: Session,
    *,
    token_budget: int | None = None,
    query_hint: str = "",
    record_access: bool = True,
    newest_findings: list[Finding] | None = None,
    write: Callable[[dict[str, Any]], Any] | None = None,
) -> Context:
    """`record_access=False` for people looking (the dashboard): reading then does not
    count as the agent accessing its memories. The summary of pruned history is computed
    either way, so a person sees exactly what the agent would get. `newest_findings`: the
    caller has read them already (see findings_for_prompt). `write`: how the
    conversation's messages are written (restore_history's; message_dict's shape by
    default)."""
    agent = session.agent
    encoding = tokens.get_encoding(agent.encoding)
    budget = _budget(agent, token_budget)

    working = _working(session, encoding, budget.working, newest_findings)
    working_tokens = working.items.tokens + working.findings_tokens

    memories = _long_term(session, encoding, query_hint, budget.long_term)

    # Conversation, with what working and long-term left unused.
    effective = effective_budget(budget, {"working": working_tokens, "long_term": memories.tokens})
    history = restore_history(
        session, max_messages=agent.max_messages, max_tokens=effective.conversation, write=write
    )
    conversation, conversation_tokens = _within(history, effective.conversation)

    # System: session state and the summary of what the conversation pruned.
    summary = (
        summarize_pruned(
            session,
            pruned_through(session, conversation),
            # The agent's own call: its worker rolls ahead for these limits from now on
            # (a person looking does not change what the agent's worker prepares).
            (agent.max_messages, effective.conversation) if record_access else None,
        )
        if history["pruned_count"]
        else None
    )
    system_text, system_tokens = _fit_system(
        encoding,
        fmt.state_section(working.state),
        summary,
        budget.system,
    )

    if memories.kept and record_access:
        _record_access(memories.kept)
    counts = {"system": system_tokens, "conversation": conversation_tokens}
    counts |= {"working": working_tokens, "long_term": memories.tokens}
    counts["total"] = sum(counts.values())
    return {
        "conversation": conversation,
        "working_context": {i.key: i.value for i in working.items.kept},
        "working_context_items": [working_item_dict(i) for i in working.items.kept],
        "long_term_memories": [memory_dict(m) for m in memories.kept],
        "findings": [
            finding_dict(f, f.id in working.findings.stale) for f in working.kept_findings
        ],
        "summary": summary,
        "token_counts": counts,
        "budget": {**effective.as_dict(), "conversation_base": budget.conversation},
        "cut": _cut(session, history, conversation, working, memories),
        "prompt": fmt.join_sections(
            [system_text, working.items.text, working.findings_text, memories.text]
        ),
    }


def _cut(
    session: Session,
    history: dict[str, Any],
    conversation: list,
    working: Working,
    memories: Fitted,
) -> Cut:
    """What was left out: to fit the budget, by the limits, or folded into a later finding."""
    messages = history["pruned_count"] + len(history["messages"]) - len(conversation)
    # Every system message is kept, so those of the history are all of them; the others
    # beyond the room the limit leaves them are left out whatever the budget.
    system = sum(1 for m in history["messages"] if m["role"] == "system")
    room = max(0, session.agent.max_messages - system)
    over_limit = max(0, session.message_count - system - room)
    return {
        "messages": messages,
        "messages_over_limit": min(messages, over_limit),
        "message_tokens": history["pruned_tokens"],
        "working_items": working.items.dropped,
        "findings": len(working.findings.findings) - len(working.kept_findings),
        "folded_findings": working.findings.folded,
        "memories": memories.dropped,
    }


@dataclass
class Working:
    """The working section: context items, then findings, within the working share."""

    all_items: list[ContextItem]  # the candidates (the session state reads them too)
    state: fmt.SessionState
    items: Fitted
    findings: PromptFindings  # the candidates
    kept_findings: list[Finding]
    findings_text: str
    findings_tokens: int


def _working(
    session: Session, encoding, budget: int, newest_findings: list[Finding] | None
) -> Working:
    """Context items by confidence (then recency), then findings by usefulness, in what
    the items left of `budget`."""
    items = list(
        ContextItem.objects.filter(session=session).order_by("-confidence", "-updated_at", "-id")[
            :MAX_WORKING_ITEMS
        ]
    )
    fitted = fit_lines(
        encoding,
        "## Session Context",
        items,
        lambda i: fmt.working_line(fmt.WorkingItem(i.key, i.value, i.confidence)),
        budget,
    )
    state = _session_state(session, items)
    if newest_findings is None:
        newest_findings = read_findings(session, MAX_FINDINGS)
    found = findings_for_prompt(session, newest_findings[:MAX_FINDINGS], state.active_files)
    kept, text, cost = _fit_findings(encoding, found, budget - fitted.tokens)
    return Working(items, state, fitted, found, found.findings[:kept], text, cost)


def _long_term(session: Session, encoding, query_hint: str, budget: int) -> Fitted:
    """The long-term memories that fit `budget` tokens, of _memory_candidates."""
    return fit_lines(
        encoding,
        "## Remembered Information",
        _memory_candidates(session, query_hint),
        lambda m: fmt.memory_line(
            fmt.MemoryItem(m.memory_type, m.content, m.confidence, m.updated_at)
        ),
        budget,
    )


def _budget(agent, token_budget: int | None):
    """The agent's budget (or `token_budget`) split by its shares."""
    return allocate_budget(
        agent.token_budget if token_budget is None else token_budget,
        {
            "system": agent.system_budget,
            "conversation": agent.conversation_budget,
            "working": agent.working_budget,
            "long_term": agent.long_term_budget,
        },
    )


def _fit_findings(encoding, found: PromptFindings, room: int) -> tuple[int, str, int]:
    """The longest prefix of the findings (in the prompt's order) whose section fits `room`
    tokens: (its length, its text, its tokens). All of them, most often (one exact count);
    else, as its cost only grows with its length, a binary search of a few exact counts."""
    findings = found.findings

    def section(count: int) -> tuple[str, int]:
        text = fmt.findings_section(_finding_items(findings[:count], found))
        return text, tokens.count_text(encoding, text + "\n\n") if text else 0

    low = len(findings)
    text, cost = section(low)
    if cost <= room:
        return low, text, cost
    low, high = 0, len(findings) - 1
    best_text, best_cost = "", 0  # the prefix `low` is: none fits yet
    while low < high:
        middle = (low + high + 1) // 2
        text, cost = section(middle)
        if cost <= room:
            low, best_text, best_cost = middle, text, cost
        else:
            high = middle - 1
    return low, best_text, best_cost


def _within(history: dict[str, Any], limit: int) -> tuple[list, int]:
    """The restored conversation and its tokens, within `limit`. Only system messages can
    overflow (the history rule always keeps them); the budget is strict here, so the
    oldest of them that fit are kept."""
    if history["token_count"] <= limit:
        return history["messages"], history["token_count"]
    conversation, used = [], 0
    for message in history["messages"]:
        if message["role"] != "system":
            break
        if used + message["token_count"] + tokens.REPLY_PRIMING_TOKENS > limit:
            break
        conversation.append(message)
        used += message["token_count"]
    return conversation, used + tokens.REPLY_PRIMING_TOKENS if conversation else 0


def _fit_system(encoding, state_text: str, summary, budget: int) -> tuple[str, int]:
    """The system section (session state, then the summary of pruned history) cut to
    `budget` tokens: the summary's last lines first (it lists what matters most first),
    then the state's."""
    summary_lines = summary["text"].splitlines() if summary and summary["text"] else []
    while True:
        candidate = fmt.join_sections([state_text, fmt.summary_section("\n".join(summary_lines))])
        cost = tokens.count_text(encoding, candidate + "\n\n") if candidate else 0
        if cost <= budget:
            return candidate, cost
        if summary_lines:
            summary_lines.pop()
        elif state_text:
            state_text = "\n".join(state_text.splitlines()[:-1])
            if state_text.count("\n") == 0:
                state_text = ""
        else:
            return "", 0


def _record_access(kept: list[Memory]) -> None:
    """The memories given to the agent counted as accessed: bookkeeping the answer does
    not depend on, after it is sent."""
    kept_ids, now = [m.id for m in kept], timezone.now()
    after_answer(
        lambda: Memory.objects.filter(id__in=kept_ids).update(
            last_accessed_at=now, access_count=F("access_count") + 1
        )
    )


def _finding_items(findings: list[Finding], found: PromptFindings) -> list[fmt.FindingItem]:
    return [
        fmt.FindingItem(
            f.tool,
            f.query,
            f.fact,
            f.file_path,
            f.success,
            f.kind,
            f.id in found.stale,
            found.earlier.get(f.id, 0),
        )
        for f in findings
    ]
