"""Working context inferred from evidence: what the agent did (files read and edited,
manifests, test runs, claimed issues) and what it was told (prompts), with confidences that
grow with the evidence and the references they rest on."""

import json

import pytest

from memoryapp.lib.extraction import ToolCallData, extract
from memoryapp.lib.extraction.context import (
    base_test_command,
    decide,
    observations_for_call,
    observations_for_message,
    observe,
    task_from_prompt,
)
from tests.conftest import TOOL_OUTPUTS

OUTPUTS = TOOL_OUTPUTS


def observe_call(tally, turn, tool, query, output, success=None, details=None, cwd="/app"):
    found = extract(ToolCallData(tool, query, output, success, details=details))
    args = json.loads(query) if query.startswith("{") else {}
    observations = observations_for_call(
        kind=found.kind,
        file_path=found.file_path,
        success=found.success,
        details=found.details,
        command=args.get("command", ""),
        output=output,
        cwd=cwd,
    )
    return observe(tally, observations, {"turn": turn, "seq": turn * 2})


def read(path, body="defmodule A do\nend\n"):
    return ("Read", json.dumps({"file_path": path}), body)


def edit(path):
    return ("Edit", json.dumps({"file_path": path, "old_string": "a", "new_string": "b"}), "ok")


def test_the_language_is_the_one_most_files_are_in_each_file_counted_once():
    tally = None
    paths = ["/app/lib/a.ex", "/app/lib/b.ex", "/app/lib/a.ex", "/app/lib/c.ex", "/app/lib/a.ex"]
    for turn, path in enumerate(paths):
        tally = observe_call(tally, turn + 1, *read(path))
    tally = observe_call(tally, 6, *read("/app/assets/app.js", "export const x = 1\n"))
    tally = observe_call(tally, 7, *read("/app/README.md", "# Readme\n"))
    decided = decide(tally)
    assert decided["primary_language"].value == "Elixir"
    # three Elixir files (reads of one file count once), one JavaScript, docs not at all
    weights = tally["weights"]["primary_language"]
    assert {name: entry["w"] for name, entry in weights.items()} == {
        "Elixir": 3.0,
        "JavaScript": 1.0,
    }
    assert decided["primary_language"].evidence[0] == {"turn": 1, "seq": 2, "what": "read lib/a.ex"}


def test_confidence_grows_with_evidence_and_weak_evidence_sets_nothing():
    one = observe_call(None, 1, *read("/app/lib/a.ex"))
    assert "primary_language" not in decide(one)  # one file read is not enough to say
    tally = one
    for n in range(2, 12):
        tally = observe_call(tally, n, *edit(f"/app/lib/m{n}.ex"))
    many = decide(tally)["primary_language"]
    assert many.value == "Elixir" and many.confidence >= 0.9


def test_a_manifest_names_language_framework_and_test_command():
    mix = (
        "defmodule Spotter.MixProject do\n  use Mix.Project\n\n  def project do\n"
        '    [app: :spotter, version: "0.1.0", elixir: "~> 1.15", deps: deps()]\n  end\n\n'
        '  defp deps do\n    [\n      {:phoenix, "~> 1.7.14"},\n      {:phoenix_live_view, "~> 1.0"},\n'
        '      {:ecto_sql, "~> 3.10"},\n      {:credo, "~> 1.7", only: [:dev, :test], runtime: false}\n'
        "    ]\n  end\nend\n"
    )
    decided = decide(observe_call(None, 1, "Read", json.dumps({"file_path": "/app/mix.exs"}), mix))
    assert decided["primary_language"].value == "Elixir"
    assert decided["framework"].value == "Phoenix"
    assert decided["framework"].evidence[0]["what"] == "mix.exs depends on it"


def test_a_library_beside_the_framework_is_not_the_framework():
    mix = (
        "defmodule Spotter.MixProject do\n  use Mix.Project\n  defp deps do\n    [\n"
        '      {:oban, "~> 2.17"},\n      {:ecto_sql, "~> 3.10"},\n      {:phoenix, "~> 1.7"}\n'
        "    ]\n  end\nend\n"
    )
    decided = decide(observe_call(None, 1, "Read", json.dumps({"file_path": "/app/mix.exs"}), mix))
    assert decided["framework"].value == "Phoenix"  # Oban is a job queue, Ecto its database


def test_some_lines_of_a_manifest_do_not_outweigh_the_code():
    """Seen on a real session: a read of mix.exs from line 40 showed Oban and Ash, and
    the framework became Oban in a Phoenix LiveView app whose LiveViews the agent read."""
    lines = '    40\t      {:oban, "~> 2.17"},\n    41\t      {:ash, "~> 3.0"},\n'
    args = json.dumps({"file_path": "/app/mix.exs", "offset": 40, "limit": 2})
    tally = observe_call(None, 1, "Read", args, lines)
    assert "framework" not in decide(tally)  # two lines of the manifest are not enough
    live = "defmodule SpotterWeb.HeaderLive do\n  use SpotterWeb, :live_view\nend\n"
    for turn in (2, 3):
        path = f"/app/lib/spotter_web/live/h{turn}_live.ex"
        tally = observe_call(tally, turn, *read(path, live))
    assert decide(tally)["framework"].value == "Phoenix"


def test_a_whole_read_of_a_manifest_after_a_partial_one_still_counts():
    lines = '    40\t      {:phoenix, "~> 1.7"},\n    41\t      {:oban, "~> 2.17"},\n'
    args = json.dumps({"file_path": "/app/mix.exs", "offset": 40, "limit": 2})
    tally = observe_call(None, 1, "Read", args, lines)
    whole = 'defmodule A.MixProject do\n  defp deps do\n    [{:phoenix, "~> 1.7"}]\n  end\nend\n'
    tally = observe_call(tally, 2, "Read", json.dumps({"file_path": "/app/mix.exs"}), whole)
    assert tally["weights"]["framework"]["Phoenix"]["w"] == 6.0  # 1 seen in part, 5 whole
    assert decide(tally)["framework"].value == "Phoenix"


def test_the_test_command_is_the_runner_the_agent_ran():
    output = "....\nFinished in 0.2 seconds\n12 tests, 0 failures\n"
    tally = None
    for turn, command in enumerate(
        ["mix test test/a_test.exs:12 2>&1 | tail -5", "cd /app && mix test", "mix test --failed"]
    ):
        tally = observe_call(tally, turn + 1, "Bash", json.dumps({"command": command}), output)
    decided = decide(tally)["test_command"]
    assert decided.value == "mix test"
    assert decided.confidence > 0.8
    assert decided.evidence[-1]["what"] == "ran mix test --failed: 12 tests, 0 failures"


@pytest.mark.parametrize(
    "command,base",
    [
        ("mix test test/a_test.exs:12 2>&1 | tail -5", "mix test"),
        ("python -m pytest tests/test_math_utils.py -v", "python -m pytest"),
        ("cargo test 2>&1", "cargo test"),
        ("go test ./...", "go test ./..."),
        ("cd web && npm test -- --watch=false", "npm test"),
    ],
)
def test_base_test_command(command, base):
    assert base_test_command(command) == base


def test_the_active_file_is_the_last_file_edited_never_a_log_or_an_id():
    tally = observe_call(None, 1, *edit("/app/lib/spotter_web/live/transcript_live.ex"))
    tally = observe_call(tally, 2, *edit("/app/tmp/test.log"))
    tally = observe_call(tally, 3, *edit("/app/_build/dev/lib/x.ex"))
    tally = observe(
        tally,
        observations_for_message("assistant", "Now I'm working on `spotter-fum.3`."),
        {"turn": 4, "seq": 8},
    )
    active = decide(tally)["active_file"]
    assert active.value == "lib/spotter_web/live/transcript_live.ex"
    assert active.evidence == [
        {"turn": 1, "seq": 2, "what": "edited lib/spotter_web/live/transcript_live.ex"}
    ]


def test_a_failed_edit_is_not_evidence():
    tally = observe_call(None, 1, *edit("/app/lib/a.ex")[:2], "String to replace not found", False)
    assert "active_file" not in decide(tally)


@pytest.mark.parametrize(
    "prompt,task",
    [
        (
            'Write a shell script called hello.sh that prints "Hello world" and run it.',
            'Write a shell script called hello.sh that prints "Hello world" and run it.',
        ),
        ("yes", ""),
        ("continue", ""),
        ("Stop hook feedback:\n[stop.sh]: # Task Completion Check", ""),
        ("[Request interrupted by user]", ""),
        (
            "<command-message>beads:work is running…</command-message>\n<command-name>/beads:work</command-name>\n<command-args>spotter-fum.3</command-args>",
            "/beads:work spotter-fum.3",
        ),
        # A subagent's task that introduces its list: the list is the task.
        (
            "I need to understand:\n1. How the router mounts LiveView sessions\n"
            "2. Where the Ash resources are defined.\n\nReport file paths.",
            "I need to understand: How the router mounts LiveView sessions; "
            "Where the Ash resources are defined",
        ),
        ("Fix the lexer: it splits on dots.", "Fix the lexer: it splits on dots."),
        # What follows a colon after a blank line or in a code fence is not a list of it.
        ("Fix this error:\n```\nTraceback (most recent call last):\n```", "Fix this error:"),
        ("Fix this error:\n\nTraceback (most recent call last):", "Fix this error:"),
    ],
)
def test_the_task_a_prompt_gives(prompt, task):
    assert task_from_prompt(prompt) == task


def test_the_current_task_is_the_latest_prompt_or_claimed_issue():
    tally = observe(
        None,
        observations_for_message("user", "Port the Python utils to Rust."),
        {"turn": 1, "seq": 1},
    )
    tally = observe(
        tally,
        observations_for_message("assistant", "I'm implementing the string utils module now."),
        {"turn": 2, "seq": 3},
    )
    assert (
        decide(tally)["current_task"].value == "Port the Python utils to Rust."
    )  # the agent's own words never override the user's
    # An issue tracker's claim: its id and the title the tracker printed.
    shown = "spotter-fum.3: Add transcript header component [P1] [task]\nStatus: in_progress"
    tally = observe_call(
        tally,
        3,
        "Bash",
        json.dumps({"command": "bd update spotter-fum.3 --status in_progress"}),
        shown,
    )
    current = decide(tally)["current_task"]
    assert current.value == "spotter-fum.3: Add transcript header component"
    assert current.evidence[-1]["what"] == "ran bd update spotter-fum.3 --status in_progress"


@pytest.mark.parametrize(
    "prompt,task",
    [
        # SWE-agent's framing (real text from its demonstration trajectories), then the issue.
        (
            "We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\nTimeDelta serialization precision\nHi there!",
            "TimeDelta serialization precision",
        ),
        (
            'We\'re currently solving the following CTF challenge. The CTF challenge is a crypto problem named "BabyEncryption".',
            'The CTF challenge is a crypto problem named "BabyEncryption".',
        ),
        # OpenHands' resolver framing.
        (
            "Please fix the following issue for the repository in /workspace.\nAn environment has been set up for you to start working. You may assume all necessary tools are installed.\n\n# Problem Statement\nAdd a dark mode toggle",
            "You may assume all necessary tools are installed.",
        ),
    ],
)
def test_the_task_skips_the_framing_agent_harnesses_add(prompt, task):
    assert task_from_prompt(prompt) == task


def test_framework_from_paths_and_source_when_no_manifest_was_read():
    heex = '<div class="header"><%= @title %></div>'
    live = "defmodule SpotterWeb.HeaderLive do\n  use SpotterWeb, :live_view\nend\n"
    tally = observe_call(
        None, 1, "Read", json.dumps({"file_path": "/app/lib/spotter_web/live/header_live.ex"}), live
    )
    assert "framework" not in decide(tally)  # one file is not enough
    tally = observe_call(
        tally,
        2,
        "Read",
        json.dumps({"file_path": "/app/lib/spotter_web/components/header.html.heex"}),
        heex,
    )
    assert decide(tally)["framework"].value == "Phoenix"


def test_a_runner_named_for_tests_outweighs_a_wrapper_that_also_runs_them():
    cargo = "running 3 tests\n\ntest result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
    tally = observe_call(None, 1, "Bash", json.dumps({"command": "cargo test 2>&1"}), cargo)
    tally = observe_call(tally, 2, "Bash", json.dumps({"command": "cargo llvm-cov --html"}), cargo)
    tally = observe_call(
        tally, 3, "Bash", json.dumps({"command": "cargo llvm-cov --fail-under-lines 100"}), cargo
    )
    assert decide(tally)["test_command"].value == "cargo test"
