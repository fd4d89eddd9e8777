"""Extraction, kind by kind, on real tool outputs (tests/fixtures/tool_outputs.json, copied
from Claude Code, SWE-agent, OpenHands and aider transcripts; see tests/fixtures/SOURCE.txt).
Where none of those transcripts has a tool's output (Grep's content and count modes, mix
test, credo, WebSearch, ToolBench's APIs), the output is written here in that tool's exact
format and says so."""

import json
from pathlib import Path

import pytest

from memoryapp.lib.extraction import call_key, extract, finding_from_tool, kind_of
from memoryapp.lib.extraction.base import ToolCallData
from memoryapp.lib.extraction.kinds import TOOL_KINDS, group_of, shell_words
from tests.conftest import TOOL_OUTPUTS, tool_call

HERE = Path(__file__).resolve().parent
OUTPUTS = TOOL_OUTPUTS


def real(name, **overrides):
    return extract(tool_call(name, **overrides))


def claude(tool, args, output, success=None, details=None):
    return extract(ToolCallData(tool, json.dumps(args), output, success, details=details))


# --- kinds: one table -------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool,query,kind",
    [
        ("Read", '{"file_path": "a.py"}', "read"),
        ("str_replace_editor", '{"command": "view", "path": "a.py"}', "read"),
        ("str_replace_editor", '{"command": "str_replace", "path": "a.py"}', "edit"),
        ("Grep", '{"pattern": "x"}', "search"),
        ("Glob", '{"pattern": "**/*.ex"}', "search"),
        ("Bash", '{"command": "mix test"}', "shell"),
        ("Bash", '{"command": "bd update spotter-fum.3 --status in_progress"}', "bookkeeping"),
        ("Edit", "{}", "edit"),
        ("MultiEdit", "{}", "edit"),
        ("Write", "{}", "edit"),
        ("WebFetch", '{"url": "https://hex.pm"}', "web_fetch"),
        ("open_url", "https://hex.pm", "web_fetch"),
        ("WebSearch", '{"query": "phoenix 1.8"}', "web_search"),
        ("Task", '{"description": "x"}', "subagent"),
        ("TodoWrite", '{"todos": []}', "bookkeeping"),
        ("mcp__beads__show", "{}", "bookkeeping"),
        ("mcp__filesystem__read_file", '{"path": "a"}', "read"),
        ("get_weather_for_weatherapi", '{"q": "Paris"}', "other"),
    ],
)
def test_one_table_decides_the_kind(tool, query, kind):
    assert kind_of(tool, query) == kind


def test_the_prompt_and_the_dashboard_group_by_the_same_kinds():
    # SWE-agent's editor `view` is a read and is shown as one (it was "Other Findings").
    assert group_of(kind_of("str_replace_editor", '{"command": "view", "path": "a"}')) == (
        "Files Already Read"
    )
    assert group_of(kind_of("open_url", "https://x.org")) == "Web Pages and Searches"
    assert group_of(kind_of("TodoWrite", "{}")) == "Bookkeeping"
    assert all(group_of(kind) for kind in set(TOOL_KINDS.values()))


def test_shell_words_find_the_command_that_does_the_work():
    assert shell_words("cd /app && mix test test/a_test.exs 2>&1 | tail -5")[:2] == ["mix", "test"]
    assert shell_words("FOO=1 timeout 60 pytest -x") == ["pytest", "-x"]
    commit = "git add -A && git commit -m \"$(cat <<'EOF'\nPort it\n\n- x\nEOF\n)\""
    assert shell_words(commit)[:2] == ["git", "commit"]


# --- identity: exact, per kind ---------------------------------------------------------


def key(tool, query):
    return call_key(kind_of(tool, query), tool, query).key


@pytest.mark.parametrize(
    "a,b",
    [
        (("Read", "src/a.ex"), ("Read", '{"file_path": "src/a.ex"}')),
        (("Read", "./src//a.ex"), ("read_file", "src/a.ex")),
        (("Bash", "git status"), ("Bash", '{"command": "git status", "description": "Check"}')),
        (("Bash", '{"command": "mix test", "timeout": 120000}'), ("Bash", "mix test")),
        (("Grep", '{"pattern": "TODO"}'), ("Grep", "TODO")),
        (("Grep", '{"pattern": "x", "-n": true, "-C": 3}'), ("Grep", '{"pattern": "x"}')),
        (
            ("WebFetch", '{"url": "https://HEX.pm/packages/ecto#x"}'),
            ("WebFetch", "https://hex.pm/packages/ecto"),
        ),
        (
            ("WebFetch", '{"url": "https://hex.pm/x", "prompt": "Latest  version?"}'),
            ("WebFetch", '{"url": "https://hex.pm/x", "prompt": "latest version?"}'),
        ),
        (("lookup", '{"q": "Paris"}'), ("lookup", "Paris")),
        (("lookup", '{"b": 1, "a": 2}'), ("lookup", '{"a": 2, "b": 1}')),
    ],
)
def test_both_forms_of_one_call_are_the_same_call(a, b):
    assert key(*a) == key(*b)


def test_relative_paths_are_taken_from_the_session_s_directory():
    read = kind_of("Read", "x")
    assert (
        call_key(read, "Read", "lib/x.ex", "/app").key
        == call_key(read, "Read", '{"file_path": "/app/lib/x.ex"}', "/app").key
    )
    assert call_key(read, "Read", "lib/x.ex").key != call_key(read, "Read", "/app/lib/x.ex").key
    grep = kind_of("Grep", "{}")
    assert (
        call_key(grep, "Grep", '{"pattern": "x", "path": "lib"}', "/app").key
        == call_key(grep, "Grep", '{"pattern": "x", "path": "/app/lib/"}', "/app").key
    )


@pytest.mark.parametrize(
    "a,b",
    [
        (("Read", "src/a.ex"), ("Read", "src/b.ex")),
        (("Read", "src/a.ex"), ("Read", '{"file_path": "src/a.ex", "offset": 193, "limit": 60}')),
        (("Bash", "git status"), ("Bash", "git diff --stat")),
        (("Bash", "mix test | tail -5"), ("Bash", "mix credo --strict | tail -5")),
        (("Grep", '{"pattern": "Header"}'), ("Grep", '{"pattern": "Header", "path": "lib/a.ex"}')),
        (
            ("Grep", '{"pattern": "x", "output_mode": "content"}'),
            ("Grep", '{"pattern": "x", "output_mode": "count"}'),
        ),
        (("Grep", '{"pattern": "x"}'), ("Glob", '{"pattern": "x"}')),
        (
            ("WebFetch", "https://hex.pm/packages/ecto"),
            ("WebFetch", "https://hex.pm/packages/ecto_sql"),
        ),
        (
            ("Edit", '{"file_path": "a.ex", "old_string": "a", "new_string": "b"}'),
            ("Edit", '{"file_path": "a.ex", "old_string": "b", "new_string": "c"}'),
        ),
        (("lookup", '{"q": "Paris"}'), ("lookup", '{"q": "Lyon"}')),
        (("lookup", "x"), ("other_tool", "x")),
        (
            ("WebFetch", '{"url": "https://hex.pm/x", "prompt": "latest version?"}'),
            ("WebFetch", '{"url": "https://hex.pm/x", "prompt": "what licence?"}'),
        ),
    ],
)
def test_different_calls_never_share_an_identity(a, b):
    assert key(*a) != key(*b)


# --- reads ------------------------------------------------------------------------------


def test_claude_code_read_strips_arrows_and_reminders_and_names_definitions():
    finding = real("cc_read_python")
    assert finding.kind == "read"
    assert finding.file_path == "/tmp/tmpw6sk2trg/src/math_utils.py"
    assert finding.fact == "7 lines; defines add_numbers"
    assert finding.query == "/tmp/tmpw6sk2trg/src/math_utils.py"


def test_a_manifest_names_the_project_and_its_test_command():
    assert (
        real("cc_read_cargo_toml").fact
        == "7 lines; Rust project python_utils 0.1.0; tests: cargo test"
    )


def test_rust_read_names_modules_and_functions():
    fact = real("cc_read_rust").fact
    assert fact.startswith("15 lines; defines ") and "add" in fact and "it_works" in fact


def test_swe_agent_window_and_openhands_cat_n_reads():
    assert real("swe_open_python").fact == "10 lines; defines division"
    assert real("swe_open_ctf_python").fact.startswith("76 lines; defines TimeCapsule")
    assert real("oh_editor_view").fact == "1 line"


def test_a_partial_read_says_which_lines_of_how_many():
    source = "\n".join(f"{n:>6}→  def helper_{n}(x), do: x" for n in range(193, 253))
    body = "defmodule Spotter.Transcripts do\n" if False else ""
    finding = claude(
        "Read",
        {"file_path": "/app/lib/spotter/transcripts.ex", "offset": 193, "limit": 60},
        body + source,
        details={
            "file": {
                "filePath": "/app/lib/spotter/transcripts.ex",
                "startLine": 193,
                "numLines": 60,
                "totalLines": 338,
            }
        },
    )
    assert finding.fact.startswith("lines 193–252 of 338; defines helper_193/1")
    assert finding.query == "/app/lib/spotter/transcripts.ex (offset 193, limit 60)"


def test_an_elixir_read_with_claude_code_prefixes_names_modules_and_private_functions():
    # Claude Code's Read format, on an Elixir module of the kind a Phoenix app holds.
    code = [
        "defmodule SpotterWeb.TranscriptLive do",
        "  use SpotterWeb, :live_view",
        "",
        "  def mount(params, _session, socket) do",
        "    {:ok, assign(socket, rows: build_rows(params))}",
        "  end",
        "",
        "  defp build_rows(params), do: params",
        "end",
    ]
    output = "\n".join(f"{n:>6}→{line}" for n, line in enumerate(code, 1))
    finding = claude("Read", {"file_path": "/app/lib/spotter_web/live/transcript_live.ex"}, output)
    assert finding.fact == "9 lines; defines SpotterWeb.TranscriptLive; mount/3, build_rows/1"


def test_a_failed_read_keeps_the_error_and_is_unsuccessful():
    # Claude Code's answer to a Read of a missing file (is_error: true).
    finding = claude(
        "Read",
        {"file_path": "/app/lib/nope.ex"},
        "<tool_use_error>File does not exist.</tool_use_error>",
        success=False,
    )
    assert (finding.fact, finding.success) == ("File does not exist.", False)
    assert finding.file_path == "/app/lib/nope.ex"


def test_openhands_invalid_path_view_is_a_failed_read_not_one_line():
    # OpenHands' editor answers this way when the path is missing (see issue 10).
    output = "ERROR:\nInvalid `path` parameter: /workspace/hello.py. The path /workspace/hello.py does not exist. Please provide a valid path."
    finding = extract(
        ToolCallData(
            "str_replace_editor", '{"command": "view", "path": "/workspace/hello.py"}', output
        )
    )
    assert finding.success is False
    assert finding.fact.startswith("Invalid `path` parameter: /workspace/hello.py")


# --- searches ---------------------------------------------------------------------------


def test_glob_lists_files_under_their_common_directory():
    finding = real("cc_glob")
    assert finding.kind == "search" and finding.query == "**/*.py"
    assert finding.fact.startswith("6 files under /tmp/tmpw6sk2trg: ")


def test_swe_agent_find_file():
    assert (
        real("swe_find_file").fact == "1 file: /klieret__swe-agent-test-repo/tests/missing_colon.py"
    )
    assert real("swe_find_file_3").fact.startswith("3 files under /pydicom__pydicom/pydicom: ")


def test_grep_content_mode_counts_matches_not_context_lines_in_one_file():
    # Claude Code's Grep, output_mode content with -n and -C 1, path = one CSS file:
    # ripgrep prints `N:` for matches, `N-` for context and `--` between groups.
    output = "935-\n936:/* --- Transcript header --- */\n937-.transcript-header {\n--\n1001-}\n1002:.transcript-header h1 { margin: 0 }\n1003-"
    args = {
        "pattern": "transcript-header|Transcript header",
        "path": "assets/css/app.css",
        "output_mode": "content",
        "-n": True,
        "-C": 1,
    }
    finding = claude(
        "Grep",
        args,
        output,
        details={"mode": "content", "numFiles": 0, "filenames": [], "numLines": 7},
    )
    assert finding.fact == "2 matches in assets/css/app.css (lines 936, 1002)"
    assert finding.query == "transcript-header|Transcript header in assets/css/app.css (content)"


def test_grep_content_mode_over_files_counts_per_file():
    output = 'lib/a.ex:12:  def header(assigns) do\nlib/a.ex-13-    ~H"""\n--\nlib/a.ex:40:  header(x)\nlib/b.ex:7:  import A, only: [header: 1]'
    finding = claude("Grep", {"pattern": "header", "output_mode": "content", "-n": True}, output)
    assert finding.fact == "3 matches in 2 files: lib/a.ex (2), lib/b.ex (1)"


def test_grep_files_and_count_modes_and_no_matches():
    files = "Found 3 files\n/app/lib/a.ex\n/app/lib/b.ex\n/app/test/a_test.exs"
    assert claude("Grep", {"pattern": "Repo"}, files).fact == (
        "3 files under /app: lib/a.ex, lib/b.ex, test/a_test.exs"
    )
    count = "lib/a.ex:3\nlib/b.ex:1\n\nFound 4 total occurrences across 2 files."
    finding = claude("Grep", {"pattern": "Repo", "output_mode": "count"}, count)
    assert finding.fact == "4 matches in 2 files: lib/a.ex (3), lib/b.ex (1)"
    assert claude("Grep", {"pattern": "zzz"}, "No files found").fact == "No files found"
    none = claude("Grep", {"pattern": "zzz", "output_mode": "content"}, "No matches found")
    assert (none.fact, none.success) == ("No matches", True)


def test_grep_count_of_one_file_and_content_without_line_numbers():
    # ripgrep prints a bare count when one file was searched, and `path:text` without -n.
    one = claude("Grep", {"pattern": "x", "path": "lib/a.ex", "output_mode": "count"}, "5")
    assert one.fact == "5 matches in lib/a.ex"
    output = "lib/a.ex:  x = 1\nlib/b.ex:  x = 2\nlib/b.ex:  y(x)"
    lines = claude("Grep", {"pattern": "x", "output_mode": "content"}, output)
    assert lines.fact == "3 matches in 2 files: lib/b.ex (2), lib/a.ex (1)"


def test_a_shell_find_is_summarised_like_a_search():
    assert real("cc_find").fact.endswith(
        "ok: 9 files under /tmp/tmpqwh7888i: Justfile, .gitignore, Cargo.toml, src/list_utils.rs, …"
    )


# --- shell ------------------------------------------------------------------------------


def test_git_digests():
    assert real("cc_git_status_dirty").fact == (
        "`git status` ok: on master: 2 modified (src/math_utils.py, tests/test_math_utils.py); "
        "3 untracked (.coverage, src/__pycache__/, tests/__pycache__/)"
    )
    # a here-document's body (the commit message) is left out of the command shown
    assert real("cc_git_commit").fact.startswith(
        '`git add src/math_utils.py tests/test_math_utils.py && git commit -m "$(cat <<EOF … EOF )"` ok:'
    )
    assert real("cc_git_commit").fact.endswith(
        "ok: [master 6322cf4] Add multiply_numbers function with test; "
        "2 files changed, 13 insertions(+), 1 deletion(-)"
    )
    assert real("cc_git_log").fact.endswith(
        "ok: b0cdc5a Update .gitignore for claude-reliability / e6225ab Add claude-reliability config (+1 more)"
    )


def test_a_failed_command_keeps_exit_status_and_the_end_of_its_output():
    finding = real("cc_commit_failed")
    assert finding.success is False
    assert finding.fact.endswith("exit 1: On branch master / nothing to commit, working tree clean")


def test_test_runner_summaries_are_stated():
    assert real("cc_pytest").fact == "`python -m pytest tests/test_math_utils.py -v` ok: 2 passed"
    assert real("cc_cargo_test").fact == "`cargo test 2>&1` ok: 34 passed, 0 failed"
    finding = real("aider_pytest_failed")
    assert finding.fact == (
        "`pytest tests/basic/test_main.py` failed: 2 failed, 25 passed; first: "
        "tests/basic/test_main.py::TestMain::test_map_tokens_option - Attribute..."
    )
    assert finding.details["run"][0]["passed"] is False


def test_mix_test_summary_comes_from_the_end_not_the_dots():
    # mix test's format: progress dots, numbered failures, then the summary and the seed.
    output = (
        "Exit code 2\n....F..\n\n  1) test renders the transcript header (SpotterWeb.TranscriptLiveTest)\n"
        "     test/spotter_web/live/transcript_live_test.exs:42\n     Assertion with == failed\n"
        "\nFinished in 1.9 seconds (0.4s async, 1.5s sync)\n65 tests, 11 failures\n\nRandomized with seed 12345\n"
    )
    finding = claude("Bash", {"command": "mix test 2>&1 | tail -40"}, output, success=False)
    assert finding.fact == (
        "`mix test 2>&1 | tail -40` exit 2: 65 tests, 11 failures; first: test renders the "
        "transcript header (SpotterWeb.TranscriptLiveTest) test/spotter_web/live/transcript_live_test.exs:42"
    )
    assert finding.success is False


@pytest.mark.parametrize(
    "command,output,summary",
    [
        (
            "mix credo --strict",
            "Checking 42 source files ...\n\nAnalysis took 0.5 seconds (0.1s to load, 0.4s running 55 checks on 42 files)\n120 mods/funs, found 3 code readability issues, 1 warning.",
            "found 3 code readability issues, 1 warning",
        ),
        (
            "mix credo",
            "Analysis took 0.4 seconds\n98 mods/funs, found no issues.",
            "found no issues",
        ),
        (
            "npx tsc --noEmit",
            "src/a.ts(12,5): error TS2322: Type 'string' is not assignable to type 'number'.\n\nFound 1 error in src/a.ts:12\n",
            "1 type error",
        ),
        (
            "npx jest",
            "FAIL src/a.test.ts\n  ● math › adds\n\nTests:       1 failed, 24 passed, 25 total\nTime: 2 s",
            "1 failed, 24 passed, 25 total",
        ),
        (
            "go test ./...",
            "--- FAIL: TestAdd (0.00s)\nFAIL\nFAIL\texample.com/m\t0.01s\nok  \texample.com/m/util\t0.02s",
            "1 package ok, 1 package failed, 1 failing test",
        ),
        (
            "ruff check .",
            "a.py:1:1: F401 [*] `os` imported but unused\nFound 1 error.\n[*] 1 fixable with the `--fix` option.",
            "1 error",
        ),
        (
            "npx eslint src",
            "/app/src/a.js\n  1:1  error  'x' is defined but never used  no-unused-vars\n\n✖ 1 problem (1 error, 0 warnings)",
            "1 problem (1 error, 0 warnings)",
        ),
    ],
)
def test_lint_and_type_check_summaries(command, output, summary):
    assert summary in claude("Bash", {"command": command}, output).fact


def test_openhands_exit_codes_and_swe_agent_tracebacks():
    assert real("oh_terminal_python").fact == "`python hello.py` exit 0: Hello, World!"
    traceback = real("swe_python_traceback")
    assert traceback.success is False and "AttributeError" in traceback.fact


def test_grep_finding_nothing_from_the_shell_is_not_a_failure():
    finding = claude("Bash", {"command": "grep -rn TODO lib/"}, "Exit code 1\n", success=False)
    assert (finding.fact, finding.success) == ("`grep -rn TODO lib/` exit 1: No matches", True)


# --- edits ------------------------------------------------------------------------------


def test_edits_say_what_changed_where():
    assert real("cc_edit_python").fact == (
        "edited /tmp/tmpw6sk2trg/src/math_utils.py (+5/−0 lines); touches add_numbers, multiply_numbers"
    )
    assert real("cc_write_create").fact == "created /tmp/tmp74wiyiny/hello.sh (2 lines)"
    assert real("cc_write_update").fact.startswith(
        "edited /tmp/tmpqwh7888i/src/lib.rs (+9/−13 lines)"
    )
    assert (
        real("swe_edit").fact
        == "edited /klieret__swe-agent-test-repo/tests/missing_colon.py, now 10 lines"
    )


def test_failed_edits_are_failed_findings_with_their_reason():
    rejected = real("swe_edit_syntax_error")
    assert (rejected.fact, rejected.success) == (
        "edit of /pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py rejected: "
        "E999 SyntaxError: unmatched ']'",
        False,
    )
    assert real("oh_editor_create_failed").success is False
    # Claude Code's answer when old_string is not in the file.
    missing = claude(
        "Edit",
        {"file_path": "/app/lib/a.ex", "old_string": "foo", "new_string": "bar"},
        "<tool_use_error>String to replace not found in file.\nString: foo</tool_use_error>",
        success=False,
    )
    assert missing.success is False
    assert (
        missing.fact
        == "edit of /app/lib/a.ex failed: String to replace not found in file. String: foo"
    )
    assert missing.file_path == "/app/lib/a.ex"


# --- web, subagents, bookkeeping, JSON ------------------------------------------------


def test_subagent_result_skips_the_preamble():
    finding = real("cc_task")
    assert finding.kind == "subagent"
    assert finding.fact.startswith(
        "Explore Python project structure: Comprehensive Python Project Overview: "
    )
    assert "Excellent" not in finding.fact and "complete picture" not in finding.fact


def test_web_search_lists_result_titles():
    # Claude Code's WebSearch output format.
    output = (
        'Web search results for query: "phoenix liveview 1.1 release"\n\n'
        'Links: [{"title":"Phoenix LiveView 1.1 released!","url":"https://www.phoenixframework.org/blog/phoenix-liveview-1-1-released"},'
        '{"title":"Changelog — Phoenix LiveView","url":"https://hexdocs.pm/phoenix_live_view/changelog.html"}]\n\n'
        "Perfect! Based on the search results, LiveView 1.1 adds colocated hooks."
    )
    finding = claude("WebSearch", {"query": "phoenix liveview 1.1 release"}, output)
    assert finding.fact == (
        "2 results: Phoenix LiveView 1.1 released! (phoenixframework.org); "
        "Changelog — Phoenix LiveView (hexdocs.pm)"
    )


def test_web_fetch_keeps_url_and_first_substance():
    output = "Perfect! Here is the information.\n\n# ecto_sql 3.12.1\n\nSQL-based adapters for Ecto and database migrations. Latest version 3.12.1."
    finding = claude(
        "WebFetch",
        {"url": "https://hex.pm/packages/ecto_sql", "prompt": "latest version?"},
        output,
        details={"url": "https://hex.pm/packages/ecto_sql", "code": 200, "codeText": "OK"},
    )
    assert finding.fact.startswith(
        "https://hex.pm/packages/ecto_sql: ecto_sql 3.12.1: SQL-based adapters"
    )
    failed = claude(
        "WebFetch",
        {"url": "https://hex.pm/x"},
        "Not found",
        details={"code": 404, "codeText": "Not Found"},
    )
    assert failed.success is False and failed.fact.startswith("https://hex.pm/x (404 Not Found)")


def test_todo_lists_are_bookkeeping_with_the_item_in_progress():
    finding = real("cc_todo")
    assert finding.kind == "bookkeeping" and finding.query == "todo list of 10"
    assert (
        finding.fact
        == "10 todos: 1 in progress, 9 pending; now: Initialize Rust library project structure"
    )


def test_json_api_outputs_are_unwrapped_and_summarised():
    # ToolBench's API answers: an {"error", "response"} envelope around a Python literal.
    output = json.dumps(
        {
            "error": "",
            "response": str(
                {
                    "result": [
                        {"type": "hotel", "name": "Hotel Lux", "price": 120},
                        {"type": "hotel", "name": "Inn", "price": 80},
                    ]
                }
            ),
        }
    )
    finding = finding_from_tool("search_hotels_for_booking", '{"city": "Paris"}', output)
    assert finding.fact == "2 items: Hotel Lux (price 120), Inn (price 80)"
    error = json.dumps({"error": "Message error...", "response": ""})
    failed = finding_from_tool("search_hotels_for_booking", '{"city": "Paris"}', error)
    assert (failed.fact, failed.success) == ("error: Message error...", False)
    disabled = json.dumps(
        {"error": "", "response": "{'message': 'This endpoint is disabled for your subscription'}"}
    )
    assert finding_from_tool("x_for_api", "{}", disabled).success is False


@pytest.mark.parametrize(
    "answer,fact,success",
    [
        (
            {
                "data": {
                    "id": 7,
                    "icon_url": "x.png",
                    "name": "Lisbon",
                    "population": "545000",
                    "country": "PT",
                    "team_id": 3,
                }
            },
            "name=Lisbon, country=PT, population=545000, id=7",
            True,
        ),
        ({"success": False, "message": "quota used up"}, "error: quota used up", False),
        ({"ok": False}, "error: failed", False),
        ({"errors": [], "result": {"title": "Done", "score": 9}}, "title=Done, score=9", True),
        ({"detail": "Invalid API key"}, "error: Invalid API key", False),
    ],
    ids=[
        "key fields, decoration left out, id last",
        "success false",
        "ok false",
        "empty errors",
        "a lone failure message",
    ],
)
def test_json_envelopes_and_key_fields(answer, fact, success):
    finding = finding_from_tool("x_for_api", "{}", json.dumps(answer))
    assert (finding.fact, finding.success) == (fact, success)


def test_other_text_is_one_bounded_line_never_the_raw_output():
    finding = real("swe_decompile")
    assert len(finding.fact) <= 240 and "\n" not in finding.fact


def test_a_parser_bug_never_loses_the_finding(monkeypatch):
    from memoryapp.lib import extraction

    def broken(call):
        raise RuntimeError("bug")

    monkeypatch.setitem(extraction.EXTRACTORS, "read", broken)
    finding = real("cc_read_python")
    assert (
        finding.kind == "read"
        and finding.fact
        and "RuntimeError" in finding.details["extractor_error"]
    )


# --- from a realistic session's outputs (tests/fixtures/SOURCE.txt, entries stress_*) ------


def test_a_failing_run_piped_through_tail_is_not_ok():
    finding = real("stress_mix_test_tail")
    assert finding.success is False
    assert "tests," in finding.fact and "failure" in finding.fact


def test_elixir_compile_errors_and_warnings_as_errors_name_their_place():
    error = real("stress_mix_compile_error")
    assert error.success is False
    assert (
        "compile error; first: lib/spotter/pricing.ex:45: undefined function dollar/0" in error.fact
    )
    warning = real("stress_mix_warnings_as_errors")
    assert warning.success is False
    assert warning.fact.endswith(
        'compilation failed: 1 warning treated as errors; first: variable "total" is unused (show.ex:28)'
    )


def test_pytest_first_failure_keeps_a_parametrized_id_with_spaces():
    fact = real("stress_pytest_param_ids").fact
    assert "2 failed, 14 passed; first: tests/test_core.py::test_slugify[" in fact


def test_ruff_fix_and_format_check_are_both_stated():
    finding = real("stress_ruff_fix_and_format")
    assert finding.success is False
    assert "1 error, 1 fixed, 0 remaining; 2 files would be reformatted" in finding.fact
    tail = real("stress_ruff_tail")
    assert (tail.success, "type error" in tail.fact) == (False, False)
    assert "1 error (1 fixable)" in tail.fact


def test_git_diff_counts_lines_per_file():
    assert real("stress_git_diff").fact.endswith("1 file changed: src/slugkit/cli.py (+0/−2)")


def test_issue_tracker_commands_are_digested():
    assert real("stress_bd_show").fact == (
        "`bd show spotter-42`: spotter-42: Add max nightly rate filter to listings page — open, P1, feature"
    )
    ready = real("stress_bd_ready").fact
    assert ready.startswith(
        "`bd ready`: 3 issues: spotter-51 Show cleaning fee and total on listing page;"
    )
    assert "created spotter-53: Fix 11 failing tests" in real("stress_bd_create").fact


@pytest.mark.parametrize(
    "tool,query,output,success,details,fact,ok",
    [
        (
            "Bash",
            '{"command": "sleep 999"}',
            "Command timed out after 2m 0.0s",
            None,
            {"interrupted": True},
            "`sleep 999` timed out: Command timed out after 2m 0.0s",
            False,
        ),
        (
            "execute_bash",
            "foo --version",
            "bash: foo: command not found",
            None,
            None,
            "`foo --version` failed: bash: foo: command not found",
            False,
        ),
        ("Bash", '{"command": "true"}', "", True, None, "`true` ok: no output", True),
    ],
    ids=["timed out", "no exit status, failed", "reported success, no output"],
)
def test_a_shell_command_without_an_exit_status(tool, query, output, success, details, fact, ok):
    finding = extract(ToolCallData(tool, query, output, success, details=details))
    assert (finding.fact, finding.success) == (fact, ok)


@pytest.mark.parametrize(
    "command,written",
    [
        ("sed -i 's/a/b/' lib/q.ex", ["/app/lib/q.ex"]),
        ("cd lib && sed -i.bak -e 's/x/y/' a.ex b.ex", ["/app/lib/a.ex", "/app/lib/b.ex"]),
        ("cat > lib/new.ex <<'EOF'\ndefmodule X do\nend\nEOF", ["/app/lib/new.ex"]),
        ("echo done > /dev/null", []),
        ("git checkout -- lib/a.ex", ["/app/lib/a.ex"]),
        ("mix format", ["*"]),
        ("ruff check --fix .", ["*"]),
        ("git stash", ["*"]),
        ("mix test 2>&1 | tail -5", []),
        ("bd close x --reason 'done; > all good'", []),
        ("FOO=1 tee -a out.log", ["/app/out.log"]),
        ("mv old.ex new.ex && cp a.ex b.ex lib/", ["/app/old.ex", "/app/new.ex", "/app/lib"]),
        ("echo x >>log.txt", ["/app/log.txt"]),
        ("git restore lib/a.ex", ["*"]),
        ("install -m 644 app.conf /etc/app.conf", ["/etc/app.conf"]),
        # What a command reads (<, <<<) or where it sends errors is no operand of it.
        ("tee -a out.log < in.txt", ["/app/out.log"]),
        ("tee out.log <in.txt", ["/app/out.log"]),
        ("cp a.ex b.ex < /dev/null", ["/app/b.ex"]),
        ("rm x.ex 2> /dev/null", ["/app/x.ex"]),
    ],
)
def test_files_a_shell_command_writes(command, written):
    from memoryapp.lib.extraction.shell import written_paths

    assert written_paths(command, "/app") == written
