"""The one rule for session keys and item names (http/schemas.check_name) and the pattern
the OpenAPI document states for it (name_pattern) accept exactly the same names."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryapp.http.schemas import MAX_NAME_CHARS, check_name, name_pattern


def matches(pattern: re.Pattern | str, name: str) -> bool:
    """What the schema states: the pattern, and 1 to 200 characters."""
    return 1 <= len(name) <= MAX_NAME_CHARS and re.fullmatch(pattern, name) is not None


def accepted(name: str) -> bool:
    try:
        check_name(name, "a name")
    except ValueError:
        return False
    return True


@pytest.fixture(scope="module")
def pattern() -> re.Pattern:
    return re.compile(name_pattern())


def test_every_character_alone_and_inside_a_name(pattern):
    """Surrogates aside: no UTF-8 text holds one, and they are refused (below)."""
    differ = [
        point
        for point in range(sys.maxunicode + 1)
        if not 0xD800 <= point <= 0xDFFF
        for name in (chr(point), f"a{chr(point)}b")
        if matches(pattern, name) != accepted(name)
    ]
    assert differ == []
    assert not any(accepted(f"a{chr(point)}b") for point in range(0xD800, 0xE000))


@pytest.mark.parametrize(
    "name", ["", ".", "..", "...", ".a", "a" * 200, "a" * 201, "a/b", "é" * 200, "😀" * 200, "x\n"]
)
def test_the_edges(pattern, name):
    assert matches(pattern, name) == accepted(name)


@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=210))
def test_any_text(name):
    assert matches(name_pattern(), name) == accepted(name)


def test_the_published_schema_states_it(client):
    schema = client.get("/api/v1/openapi.json").json()
    put = schema["paths"]["/api/v1/sessions/{key}/context-items/{name}"]["put"]
    for parameter in put["parameters"]:
        if parameter["in"] == "path":
            stated = parameter["schema"]
            assert stated["pattern"] == name_pattern(), parameter["name"]
            assert (stated["minLength"], stated["maxLength"]) == (1, MAX_NAME_CHARS)
