"""Pure memory-engine logic: budget split, prompt formats, query matching (summaries are in
test_summarize.py)."""

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryapp.lib import prompt as fmt
from memoryapp.lib.budget import allocate_budget, effective_budget
from memoryapp.lib.matching import NEAR_DUPLICATE_THRESHOLD, normalize_query, queries_match

# --- budget ----------------------------------------------------------------------------


def test_default_split():
    b = allocate_budget(32000)
    assert (b.system, b.conversation, b.working, b.long_term) == (2000, 20000, 4000, 6000)
    b = allocate_budget(1000)
    assert (b.system, b.conversation, b.working, b.long_term) == (62, 625, 125, 187)


def test_system_share_is_capped_at_2000():
    assert allocate_budget(100_000).system == 2000


def test_overrides_and_their_limits():
    b = allocate_budget(1000, {"working": 300, "long_term": None})
    assert (b.working, b.long_term) == (300, 187)
    assert b.conversation == 1000 - 62 - 300 - 187  # shrinks to what is left
    b = allocate_budget(100, {"system": 80, "working": 80})
    assert (b.system, b.working, b.long_term, b.conversation) == (80, 20, 0, 0)
    with pytest.raises(ValueError):
        allocate_budget(100, {"working": -1})
    with pytest.raises(ValueError):
        allocate_budget(100, {"bogus": 1})


def test_unused_working_and_long_term_flow_to_the_conversation():
    b = allocate_budget(1000)
    e = effective_budget(b, {"working": 25, "long_term": 0})
    # 100 unused working + 187 unused long-term + 1 never allocated by integer division
    assert e.conversation == 625 + 100 + 187 + 1
    assert e.system == b.system


overrides = st.one_of(st.none(), st.integers(min_value=0, max_value=50_000))


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(min_value=0, max_value=200_000),
    system=overrides,
    conversation=overrides,
    working=overrides,
    long_term=overrides,
    used_working=st.integers(min_value=0, max_value=50_000),
    used_long_term=st.integers(min_value=0, max_value=50_000),
)
def test_budget_never_exceeds_the_total(
    total, system, conversation, working, long_term, used_working, used_long_term
):
    b = allocate_budget(
        total,
        {
            "system": system,
            "conversation": conversation,
            "working": working,
            "long_term": long_term,
        },
    )
    assert min(b.system, b.conversation, b.working, b.long_term) >= 0
    assert b.system + b.conversation + b.working + b.long_term <= total
    used_w, used_lt = min(used_working, b.working), min(used_long_term, b.long_term)
    e = effective_budget(b, {"working": used_w, "long_term": used_lt})
    assert b.system + e.conversation + used_w + used_lt <= total


# --- prompt formats --------------------------------------------------------------------


def test_working_context_line_humanizes_the_key():
    line = fmt.working_line(fmt.WorkingItem("active_file", "lib/app.ex"))
    assert line == "- **Active file**: lib/app.ex"
    assert fmt.working_line(fmt.WorkingItem("primary-language", "Elixir")) == (
        "- **Primary language**: Elixir"
    )


@pytest.mark.parametrize(
    "confidence,badge",
    [(1.0, "high"), (0.8, "high"), (0.79, "medium"), (0.5, "medium"), (0.49, "low"), (0, "low")],
)
def test_confidence_badges(confidence, badge):
    assert fmt.confidence_badge(confidence) == f"({badge} confidence)"


def test_memory_line_has_type_badge_and_date():
    when = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    line = fmt.memory_line(fmt.MemoryItem("fact", "Tests use pytest", 0.9, when))
    assert line == "- [fact] (high confidence) Tests use pytest (2026-11-20)"


@pytest.mark.parametrize(
    "text",
    [
        "**bold** and _emph_",
        "[click](javascript:alert(1))",
        "<script>alert(1)</script>",
        "line one\n## Injected heading\n- injected item",
        "`code` | table | ~~strike~~",
        "# heading at start",
        "1. numbered",
    ],
)
def test_untrusted_text_cannot_add_markdown_structure(text):
    escaped = fmt.escape_markdown(text)
    assert "\n" not in escaped  # no heading, list item or section of its own
    assert not re.match(r"\s*(?:#|\d+\.|[-*>] )", escaped)
    # Inside the line the text stays verbatim: a model copies commands and ids exactly.
    assert escaped.lstrip("\\") == " ".join(text.split())


def test_commands_and_ids_reach_the_model_verbatim():
    for text in [
        "mix credo --strict 2>&1 | tail -5",
        "uuid 5k-_VTxqtCEI",
        "**/*redirect*.py",
        "__init__",
    ]:
        assert fmt.escape_markdown(text) == text


def test_underscores_inside_words_are_left_alone():
    assert fmt.escape_markdown("src/my_module.py") == "src/my_module.py"


def test_findings_grouped_for_execution_memory_by_kind():
    text = fmt.findings_section(
        [
            fmt.FindingItem("fs:read", "src/a.ts", "exports A, B", "src/a.ts", kind="read"),
            fmt.FindingItem("Grep", "VectorStore", "3 matches: a.ts, b.ts, c.ts", kind="search"),
            fmt.FindingItem("find_file", "missing_colon.py", "1 match", kind="search"),
            fmt.FindingItem(
                "bash", "pytest -q", "`pytest -q` exit 1: 2 failed", success=False, kind="shell"
            ),
            fmt.FindingItem("fs:read", "src/b.ts", "12 lines", "src/b.ts", kind="read", stale=True),
            fmt.FindingItem("lookup", "x", "42", kind="other"),
        ]
    )
    assert text.startswith(
        "# Execution Memory\n\n**Files Already Read:**\n- src/a.ts: exports A, B"
    )
    assert "- src/b.ts: 12 lines (edited since; read it again)" in text
    assert "**Previous Search Results:**\n- VectorStore: 3 matches" in text
    assert "- missing_colon.py: 1 match" in text
    assert "**Commands Run:**\n- `pytest -q` exit 1: 2 failed (failed)" in text
    assert "**Other Findings:**\n- lookup (x): 42" in text


def test_bookkeeping_comes_last_and_never_more_than_two_lines():
    todos = [
        fmt.FindingItem("TodoWrite", f"t{i}", f"{i} todos", kind="bookkeeping") for i in range(5)
    ]
    text = fmt.findings_section([*todos, fmt.FindingItem("Read", "a.py", "1 line", kind="read")])
    assert text.index("**Files Already Read:**") < text.index("**Bookkeeping:**")
    assert text.count("todos") == 2


def test_empty_sections_are_left_out():
    assert fmt.findings_section([]) == ""
    assert fmt.working_section([]) == ""
    assert fmt.memories_section([]) == ""
    assert fmt.state_section(fmt.SessionState()) == ""
    assert fmt.summary_section("  ") == ""
    assert fmt.join_sections(["", "", ""]) == ""


def test_session_state_section():
    text = fmt.state_section(
        fmt.SessionState(
            goal="Fix the login bug",
            subtask="Write a failing test",
            subtask_status="in_progress",
            active_files=["lib/auth.ex"],
            recent_tools=["grep", "read_file"],
        )
    )
    assert text == (
        "## Session State\n- **Goal**: Fix the login bug\n"
        "- **Current subtask**: Write a failing test (in_progress)\n"
        "- **Active files**: lib/auth.ex\n- **Recent tools**: grep, read_file"
    )


# --- matching --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b,same",
    [
        ("./src/a.ts", "src/a.ts", True),
        ("src//a.ts", "src/a.ts", True),
        ("src\\a.ts", "src/a.ts", True),
        ("src/a.ts/", "src/a.ts", True),
        ('"VectorStore"', "vectorstore", True),
        ("VectorStore", "VectorStore interface", True),
        ("  user   auth ", "User Auth", True),
        ("src/a.ts", "src/b.ts", False),
        ("user auth flow", "payment flow", False),
        ("VectorStore", "EmbeddingCache", False),
    ],
)
def test_query_matching(a, b, same):
    assert queries_match(a, b) is same


def test_threshold_is_documented_and_applied():
    assert NEAR_DUPLICATE_THRESHOLD == 0.5
    assert queries_match("alpha beta", "alpha gamma delta") is False  # 1/4 < 0.5
    assert queries_match("alpha beta", "alpha beta gamma") is True  # 2/3
    assert normalize_query("./A/B.ts") == "a/b.ts"


def test_a_quote_is_cut_after_a_whole_word():
    from memoryapp.lib.extraction.text import at_word

    long = "The staging database is read-only on Sundays while the backup job runs"
    assert at_word(long, 60) == "The staging database is read-only on Sundays while the…"
    assert at_word(long, 200) == long
    assert at_word("a" * 90, 60) == "a" * 59 + "…"  # no word ends late enough: cut there
