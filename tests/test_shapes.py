"""The core's typed values (memoryapp/core/shapes.py) and the API's output schemas declare
the same fields, and the values the core builds hold exactly those fields."""

from __future__ import annotations

import pytest

from memoryapp.api import schemas
from memoryapp.core import shapes
from memoryapp.core.context import assemble_context
from memoryapp.core.models import Session
from tests.conftest import turn

PAIRS = [
    (shapes.Totals, schemas.TotalsOut, set()),
    (shapes.SessionSummary, schemas.SessionOut, set()),
    (shapes.TurnStored, schemas.TurnOut, set()),
    (shapes.HistoryMessage, schemas.HistoryMessageOut, set()),
    # The API adds the summary and the limits it applied to the core's history.
    (shapes.History, schemas.HistoryOut, {"summary", "max_messages", "max_tokens"}),
    (shapes.Summary, schemas.SummaryOut, set()),
    (shapes.Provenance, schemas.ProvenanceOut, set()),
    (shapes.FindingShape, schemas.FindingOut, set()),
    (shapes.MemoryShape, schemas.MemoryOut, set()),
    (shapes.RecalledMemory, schemas.MemoryHit, set()),
    (shapes.WhyShape, schemas.WhyOut, set()),
    (shapes.WorkingItem, schemas.WorkingItemOut, set()),
    (shapes.TokenCounts, schemas.TokenCountsOut, set()),
    (shapes.ContextBudget, schemas.BudgetOut, set()),
    (shapes.Cut, schemas.CutOut, set()),
    (shapes.Context, schemas.ContextOut, set()),
    (shapes.Entries, schemas.EntriesOut, set()),
    (shapes.AverageTurnTokens, schemas.AverageTurnTokensOut, set()),
    (shapes.SessionStats, schemas.SessionStatsOut, set()),
]


@pytest.mark.parametrize("shape, schema, added", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_a_core_shape_and_its_api_schema_declare_the_same_fields(shape, schema, added):
    assert set(shape.__annotations__) | added == set(schema.model_fields)
    optional = {n for n, f in schema.model_fields.items() if not f.is_required()}
    assert shape.__optional_keys__ <= optional  # what the core may leave out has a default


def test_the_values_the_core_builds_hold_exactly_their_shapes_fields(api):
    api.post(
        "/api/v1/sessions/s/turns",
        turn(("system", "You fix bugs."), ("user", "Fix the lexer."), ("assistant", "On it.")),
    )
    for i in range(6):  # enough to prune within the small budget below: a summary
        api.post(
            "/api/v1/sessions/s/turns",
            turn(("user", f"Step {i}: read lexer.py"), ("assistant", f"Done {i}.")),
        )
    api.post("/api/v1/sessions/s/findings", {"tool": "Read", "query": "a.py", "fact": "a.py: 3"})
    api.post("/api/v1/memories", {"content": "lexer.py: the lexer splits on dots"})
    api.put("/api/v1/sessions/s/context-items/branch", {"value": "main"})
    api.patch("/api/v1/agent", {"max_messages": 4})
    context = assemble_context(Session.objects.get(key="s"), token_budget=4000)
    assert context["summary"] is not None and context["findings"] and context["long_term_memories"]
    assert set(context) == set(shapes.Context.__annotations__)
    for name, shape in [
        ("token_counts", shapes.TokenCounts),
        ("budget", shapes.ContextBudget),
        ("cut", shapes.Cut),
        ("summary", shapes.Summary),
    ]:
        assert set(context[name]) == set(shape.__annotations__), name
    assert set(context["findings"][0]) == set(shapes.FindingShape.__annotations__)
    assert set(context["long_term_memories"][0]) == set(shapes.RecalledMemory.__annotations__)
    for message in context["conversation"]:
        assert shapes.HistoryMessage.__required_keys__ <= set(message)
        assert set(message) <= set(shapes.HistoryMessage.__annotations__)
