"""The typed values the core answers, defined once: what a session, a turn, the pruned
history, a finding, a memory and the assembled context look like. The dashboard and the
export read them as they are; the API's output schemas are made from them
(memoryapp.http.schemas.output_of), so a field added here is in the answer and in the
OpenAPI document, and a docstring here is the schema's description there."""

from typing import Annotated, Any, NotRequired, TypedDict

from pydantic import Field


class _IsoTime:
    """Marks a time: ISO 8601 text of an aware datetime in the core, a `date-time` in
    the API (which writes it in UTC with milliseconds)."""

    def __repr__(self) -> str:
        return "TIME"


TIME = _IsoTime()
Time = Annotated[str, TIME]


class Totals(TypedDict):
    messages: int
    tokens: int
    input_tokens: int
    output_tokens: int
    turns: int


class SessionSummary(TypedDict):
    key: str
    goal: str
    status: str
    metadata: dict[str, Any]
    ttl_seconds: int | None
    created_at: Time
    last_activity_at: Time
    expires_at: Time
    totals: Totals


class TurnStored(TypedDict):
    """What appending a turn answers (and an idempotent replay answers again)."""

    iteration: int
    first_seq: int
    last_seq: int
    token_counts: list[int]
    session: SessionSummary


class HistoryMessage(TypedDict):
    seq: int
    role: str
    content: str
    token_count: int
    created_at: Time
    name: NotRequired[str]
    tool_call_id: NotRequired[str]
    tool_calls: NotRequired[list[dict[str, Any]]]
    # A client's own id for the message, when it left the client's list, and its earlier
    # versions, removals and restorations ({"action", "at", "actor", ...}), oldest first.
    client_id: NotRequired[str]
    removed_at: NotRequired[Time]
    revisions: NotRequired[list[dict[str, Any]]]


class History(TypedDict):
    messages: list[HistoryMessage]
    token_count: int
    pruned_count: int
    pruned_tokens: int


class Summary(TypedDict):
    text: str
    covers_through_seq: int
    stale: bool
    error: str | None


class Provenance(TypedDict):
    turn: int | None
    message_seq: int | None
    tool_call_id: str | None


class FindingShape(TypedDict):
    id: int
    tool: str
    kind: str
    query: str
    fact: str
    step: int | None
    success: bool
    file_path: str
    source: str
    group: str
    stale: bool
    details: dict[str, Any] | None
    provenance: Provenance
    updated_at: Time


class RelatedFinding(TypedDict):
    finding: FindingShape
    why: str


class FindingCheck(TypedDict):
    """Whether a tool call's answer is already known: `known` only for the same call
    exactly; a read of a file changed since is `stale` instead."""

    # memoryapp.core.known.check_call
    known: bool
    stale: bool
    finding: FindingShape | None
    related: Annotated[
        list[RelatedFinding],
        Field(
            description="earlier findings that cover this call without being its answer "
            "(at most 5, newest first), each with why"
        ),
    ]


class WhyShape(TypedDict):
    """Why recall answered this memory: the query's words it holds (stop words never),
    whether it names one of the query's identifiers (those come first), the similarity
    of its vector to the query's (null: not among the nearest, or no vector yet), by how
    much it exceeds the query's similarity to unrelated text (a memory found by meaning
    alone needs 0.045) and the fused score that ordered it."""

    # memoryapp.core.recall.Why, as recall writes it

    terms: list[str]
    identifier: bool
    similarity: float | None
    margin: float | None
    score: float


class MemoryShape(TypedDict):
    id: int
    memory_type: str
    content: str
    confidence: float
    status: str
    source: str
    created_at: Time
    updated_at: Time
    expires_at: Annotated[
        Time | None,
        Field(
            description="when TTL cleanup archives it (null: never); past it, a memory still "
            "active is archived by the next cleanup"
        ),
    ]


class RecalledMemory(MemoryShape):
    """A memory as recall answers it: with why, when recalled for a query or a context
    (null when listed without a query)."""

    why: NotRequired[WhyShape]


class WorkingItem(TypedDict):
    """A working-context item as the context gives it to the agent."""

    key: str
    value: Any
    source: str
    confidence: float


class ContextItemShape(WorkingItem):
    """A working-context item as the session's list answers it: with when it last
    changed."""

    # memoryapp.core.context.context_item_dict
    updated_at: Time


class TokenCounts(TypedDict):
    system: int
    conversation: int
    working: int
    long_term: int
    total: int


class ContextBudget(TypedDict):
    total: int
    system: int
    conversation: int
    working: int
    long_term: int
    conversation_base: int


class Cut(TypedDict):
    messages: int
    messages_over_limit: Annotated[
        int,
        Field(
            description="of `messages`, those the agent's max_messages leaves out whatever "
            "the budget (the rest were left out to fit the conversation's share)"
        ),
    ]
    message_tokens: int
    working_items: int
    findings: int
    folded_findings: Annotated[
        int,
        Field(
            description="findings left out because a later one stands for them (the latest "
            "todo list, the latest run of a command, one line per edited file)"
        ),
    ]
    memories: int


class Context(TypedDict):
    """Everything the agent gets back before a model call."""

    # memoryapp.core.context.assemble_context

    conversation: list[HistoryMessage]
    working_context: dict[str, Any]
    working_context_items: list[WorkingItem]
    long_term_memories: list[RecalledMemory]
    findings: list[FindingShape]
    summary: Summary | None
    token_counts: TokenCounts
    budget: ContextBudget
    cut: Cut
    prompt: str


class Entries(TypedDict):
    messages: int
    turns: int
    tool_calls: int
    findings: int
    context_items: int
    subtasks: int
    memories: int
    total: int


class AverageTurnTokens(TypedDict):
    messages: float
    input: float
    output: float


class SessionStats(TypedDict):
    entries: Entries
    bytes: int
    average_turn_tokens: AverageTurnTokens
    redundant_tool_calls_avoided: int
