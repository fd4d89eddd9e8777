"""The core's typed values (memoryapp/core/shapes.py) are the one definition of each
shape: the API's output schemas are made from them (http.schemas.output_of), and the values
the core builds hold exactly their fields."""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Annotated, NotRequired, TypedDict

import pytest
from pydantic import Field, ValidationError

from memoryapp.api import schemas
from memoryapp.core import shapes
from memoryapp.core.context import assemble_context
from memoryapp.core.models import Session
from memoryapp.http import schemas as http_schemas
from memoryapp.http.schemas import Output, output_of
from tests.conftest import turn


class Inner(TypedDict):
    at: shapes.Time


class Outer(TypedDict):
    """An outer shape."""

    n: Annotated[int, Field(description="how many")]
    inner: Inner
    inners: list[Inner]
    maybe: Inner | None
    note: NotRequired[str]


def test_a_schema_made_from_a_shape_declares_its_fields_in_the_api_types():
    inner = output_of(Inner, "InnerOut")
    outer = output_of(Outer, "OuterOut")
    assert list(outer.model_fields) == ["n", "inner", "inners", "maybe", "note"]
    assert issubclass(outer, Output) and outer.__doc__ == "An outer shape."
    schema = outer.model_json_schema()
    assert schema["properties"]["n"]["description"] == "how many"
    assert schema["$defs"]["InnerOut"]["properties"]["at"]["format"] == "date-time"
    assert set(schema["required"]) == {"n", "inner", "inners", "maybe"}  # note may be left out
    value = outer.model_validate(
        {"n": 1, "inner": {"at": "2026-01-02T03:04:05+00:00"}, "inners": [], "maybe": None}
    )
    assert value.note is None and isinstance(value.inner, inner)
    assert value.inner.at == datetime.fromisoformat("2026-01-02T03:04:05+00:00")
    with pytest.raises(ValidationError):  # a key the shape does not declare
        outer.model_validate({"n": 1, "inner": {"at": "2026-01-02T03:04:05Z", "x": 1}})


class Lone(TypedDict):
    x: int


class Holder(TypedDict):
    lone: Lone


def test_a_shape_inside_another_needs_its_own_schema_first():
    with pytest.raises(LookupError, match="Lone"):
        output_of(Holder, "HolderOut")


def _core_shapes() -> list[type]:
    return [
        c
        for _, c in inspect.getmembers(shapes, inspect.isclass)
        if c.__module__ == shapes.__name__ and hasattr(c, "__required_keys__")
    ]


@pytest.mark.parametrize("shape", _core_shapes(), ids=lambda c: c.__name__)
def test_each_core_shape_is_an_api_schema_and_none_is_written_again(shape):
    made = http_schemas._OUTPUTS.get(shape)
    assert made is not None, f"no API schema is made from {shape.__name__}"
    assert getattr(schemas, made.__name__) is made
    # A schema written by hand beside the one made from the shape, with the same fields.
    by_hand = [
        s
        for s in vars(schemas).values()
        if isinstance(s, type)
        and issubclass(s, Output)
        and s.__module__ == schemas.__name__
        and set(s.model_fields) == set(shape.__annotations__)
    ]
    assert not by_hand, by_hand


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
