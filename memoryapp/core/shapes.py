"""The typed values the core answers: what a session, a turn, the pruned history, a
finding, a memory and the assembled context look like, as the API sends them and the
dashboard reads them. The API's output schemas (memoryapp/api/schemas.py) declare the
same fields; tests/test_shapes.py keeps the two identical, so a field added on one side
only fails a test instead of being dropped from the answer or the document."""

from typing import Any, NotRequired, TypedDict


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
    created_at: str
    last_activity_at: str
    expires_at: str
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
    created_at: str
    name: NotRequired[str]
    tool_call_id: NotRequired[str]
    tool_calls: NotRequired[list[dict[str, Any]]]
    # A client's own id for the message, when it left the client's list, and its earlier
    # versions, removals and restorations ({"action", "at", "actor", ...}), oldest first.
    client_id: NotRequired[str]
    removed_at: NotRequired[str]
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
    updated_at: str


class WhyShape(TypedDict):
    """Why recall answered a memory (memoryapp.core.recall.Why)."""

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
    created_at: str
    updated_at: str


class RecalledMemory(MemoryShape):
    """A memory as recall answers it (memoryapp.core.recall)."""

    why: NotRequired[WhyShape]  # recalled for a query, or for the context


class WorkingItem(TypedDict):
    key: str
    value: Any
    source: str
    confidence: float


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
    message_tokens: int
    working_items: int
    findings: int
    folded_findings: int
    memories: int


class Context(TypedDict):
    """Everything the agent gets back before a model call (`assemble_context`)."""

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
