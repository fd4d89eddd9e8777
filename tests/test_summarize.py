"""The extractive summary of pruned history: it covers the whole pruned span, rolls
forward without re-reading, and stays bounded."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryapp.lib.extraction import extract
from memoryapp.lib.summarize import MAX_CHARS, MAX_LINES, Did, Said, render, roll
from tests.conftest import tool_call


def did(seq, name):
    """A real tool call from the fixtures, as the summary sees it."""
    found = extract(tool_call(name))
    return Did(
        seq,
        found.kind,
        found.tool,
        found.query,
        found.fact,
        found.success,
        found.file_path,
        found.details,
    )


SESSION = [
    Said(1, "user", "Add a multiply_numbers function with a test, and keep coverage at 100%."),
    did(2, "cc_glob"),
    did(3, "cc_read_python"),
    Said(4, "assistant", "I'll use the same style as add_numbers instead of a lambda."),
    did(5, "cc_edit_python"),
    did(6, "aider_pytest_failed"),
    did(7, "cc_pytest"),
    did(8, "cc_write_create"),
    Said(9, "assistant", "Done. All tests pass and coverage is 100%."),
    Said(10, "user", "Now commit it please."),
    did(11, "cc_commit_failed"),
]


def test_the_summary_says_task_files_tests_decisions_and_problems():
    lines = render(roll(None, "", SESSION, cwd="/tmp/tmpw6sk2trg"))
    assert lines[0] == (
        "Task: Add a multiply_numbers function with a test, and keep coverage at 100%."
    )
    assert lines[1] == "Covers messages 1–11: 4 said, 7 tool calls (1 reads, 1 searches)."
    text = "\n".join(lines)
    assert "Files created: /tmp/tmp74wiyiny/hello.sh" in text
    assert "Files edited: src/math_utils.py" in text
    # The last test run wins: the earlier failure is no longer an open problem.
    assert (
        "Tests (passing, message 7): `python -m pytest tests/test_math_utils.py -v`: 2 passed"
        in text
    )
    assert "Open problem: `git add .gitignore && git commit" in text
    assert "2 failed, 25 passed" not in text
    assert "Decision: I'll use the same style as add_numbers instead of a lambda." in text
    assert "Progress: All tests pass and coverage is 100%." in text
    assert "Later instruction: Now commit it please. (message 10)" in text


def test_a_failing_last_test_run_is_an_open_problem_with_its_first_failure():
    lines = render(roll(None, "Fix it", [did(3, "cc_pytest"), did(5, "aider_pytest_failed")]))
    text = "\n".join(lines)
    assert (
        "Tests (failing, message 5): `pytest tests/basic/test_main.py`: 2 failed, 25 passed; first failure: "
        in text
    )
    assert "Open problem: `pytest tests/basic/test_main.py`: 2 failed, 25 passed" in text


def test_rolling_in_pieces_equals_rolling_at_once():
    once = roll(None, "", SESSION)
    state = None
    for start in range(0, len(SESSION), 3):
        state = roll(
            json.loads(json.dumps(state)) if state else None, "", SESSION[start : start + 3]
        )
    assert render(state) == render(once)


def test_the_whole_span_is_covered_not_its_tail():
    early = [Said(1, "user", "Port the parser to Rust."), did(2, "cc_write_create")]
    filler = [Said(n, "assistant", f"Looking at step {n} now.") for n in range(3, 500)]
    lines = render(roll(None, "", early + filler))
    assert lines[0] == "Task: Port the parser to Rust."
    assert any(line.startswith("Files created: /tmp/tmp74wiyiny/hello.sh") for line in lines)
    assert "Covers messages 1–499" in lines[1]


def test_a_span_not_read_yet_is_named_never_hidden_until_it_is_read():
    first = roll(None, "task", [Said(1, "user", "Do the task now please.")], pending=(2, 9000))
    assert "Messages 2–9000 are not summarised yet." in render(first)
    later = roll(first, "task", [Said(9000, "assistant", "Done. All tests pass now.")])
    assert not any("not summarised" in line for line in render(later))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(
                Said,
                st.integers(1, 10**6),
                st.sampled_from(["user", "assistant"]),
                st.text(max_size=600),
            ),
            st.builds(
                Did,
                st.integers(1, 10**6),
                st.sampled_from(["read", "edit", "shell", "search", "other"]),
                st.text(max_size=20),
                st.text(max_size=200),
                st.text(max_size=300),
                st.booleans(),
                st.text(max_size=200),
            ),
        ),
        max_size=200,
    )
)
def test_the_summary_is_always_bounded(events):
    lines = render(roll(None, "task " * 100, events))
    assert len(lines) <= MAX_LINES
    assert len("\n".join(lines)) <= MAX_CHARS


def test_a_failing_command_is_an_open_problem_once_not_also_a_command_run():
    lines = render(roll(None, "task", [did(3, "swe_python_traceback")]))
    assert sum("reproduce_bug.py" in line for line in lines) == 1
    assert [line for line in lines if "reproduce_bug.py" in line][0].startswith(
        "Open problem: `reproduce_bug.py` failed:"
    )


def test_an_equivalent_command_that_succeeds_resolves_the_failure_and_completions_are_said():
    def did(seq, command, fact, ok=True):
        return Did(seq, "shell", "Bash", command, f"`{command}` {fact}", ok)

    state = roll(
        None,
        "Ship the epic",
        [
            did(1, "node assets/build.js", 'exit 1: Could not resolve "js/app.js"', ok=False),
            did(2, "git add .beads/issues.jsonl", "exit 1: ignored by .gitignore", ok=False),
            did(3, "npm run lint", "exit 1: 3 problems", ok=False),
            did(4, "cd assets && node build.js", "ok: built app.js"),
            did(5, "git add -f .beads/issues.jsonl", "ok: no output"),
            did(6, "bd close app-12", "ok: Closed app-12"),
            did(
                7, 'git commit -m "Close the epic" && git push', "ok: [main 1a2b3c4] Close the epic"
            ),
        ],
    )
    lines = render(state)
    problems = [line for line in lines if line.startswith("Open problem")]
    assert problems == ["Open problem: `npm run lint` exit 1: 3 problems"]
    assert (
        'Committed and pushed: `git commit -m "Close the epic" && git push` ok: [main 1a2b3c4] Close the epic'
        in lines
    )
    assert "Closed: `bd close app-12` ok: Closed app-12" in lines
