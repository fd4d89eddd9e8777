"""Extractors on real tool outputs (tests/fixtures/tool_outputs.json, copied from the
transcripts in shared/data/transcripts) and on the real assistant text of every shipped
transcript."""

import json
import re
from pathlib import Path

import pytest

from memoryapp.lib.extraction import (
    INFERRED_CONFIDENCE,
    TOOL_KINDS,
    definitions,
    finding_from_tool,
    infer_context,
    tool_kind,
)

HERE = Path(__file__).resolve().parent
OUTPUTS = json.loads((HERE / "fixtures" / "tool_outputs.json").read_text())
SHARED = HERE.parent.parent / "shared" / "data" / "transcripts"


def extract(name, **kwargs):
    call = OUTPUTS[name]
    return finding_from_tool(call["tool"], call["query"], call["output"], **kwargs)


# --- file reads ------------------------------------------------------------------------


def test_swe_agent_open_gives_path_size_and_definitions():
    finding = extract("swe_open_python")
    assert finding.file_path == "/klieret__swe-agent-test-repo/tests/missing_colon.py"
    assert finding.fact == "10 lines; defines division"
    assert "print(" not in finding.fact  # never the raw output


def test_read_lists_classes_and_functions_in_order():
    finding = extract("swe_open_ctf_python")
    assert finding.fact.endswith(
        "defines TimeCapsule, challenge, MyTCPRequestHandler, ThreadingTCPServer, main"
    )


def test_openhands_editor_view_is_a_read():
    finding = extract("oh_editor_view")
    assert finding.file_path.endswith("/hello.py")
    assert finding.fact == "1 line"


@pytest.mark.parametrize(
    "path,source,expected",
    [
        (
            "src/store.ts",
            "1:import { x } from './x'\n2:export interface VectorStore {\n3:  add(v: number[]): void\n4:}\n5:export async function openStore(path: string) {}\n6:export default class MemoryStore {}\n7:const hidden = 1\n8:export type Id = string\n",
            ["VectorStore", "openStore", "MemoryStore", "Id"],
        ),
        (
            "web/app.js",
            "     1\tfunction render() {}\n     2\tclass View {}\n     3\texport const API_URL = '/api'\n",
            ["API_URL", "render", "View"],
        ),
        (
            "server/main.go",
            "package main\n\ntype Server struct {\n\taddr string\n}\n\ntype Handler interface {\n}\n\nfunc (s *Server) Start() error {\n\treturn nil\n}\n\nfunc main() {}\n",
            ["Server", "Handler", "Start", "main"],
        ),
        (
            "src/lib.rs",
            "pub struct Cache {\n    size: usize,\n}\n\npub(crate) fn evict(c: &mut Cache) {}\n\nenum State { A }\n\npub trait Store {}\n\nmod tests {\n    fn helper() {}\n}\n",
            ["Cache", "evict", "State", "Store", "tests", "helper"],
        ),
        (
            "lib/app.ex",
            "defmodule MyApp.Accounts do\n  defstruct [:id]\n  def get_user(id), do: id\n  defp secret, do: 1\n  def valid?(u), do: true\n  defmacro guard(x), do: x\nend\n",
            ["MyApp.Accounts", "get_user", "valid?", "guard"],
        ),
        (
            "pkg/mod.py",
            "import os\n\nclass Repo:\n    def method(self):\n        pass\n\nasync def fetch():\n    pass\n\ndef _private():\n    pass\n",
            ["Repo", "fetch", "_private"],
        ),
        ("README.md", "# Title\ndef not_code():\n", []),
    ],
)
def test_definitions_are_language_aware(path, source, expected):
    assert definitions(path, source) == expected


# --- searches --------------------------------------------------------------------------


def test_find_file_counts_and_samples():
    assert (
        extract("swe_find_file").fact
        == "1 match: /klieret__swe-agent-test-repo/tests/missing_colon.py"
    )
    fact = extract("swe_find_file_3").fact
    assert fact.startswith(
        "3 matches in 3 files: /pydicom__pydicom/pydicom/overlays/numpy_handler.py"
    )
    assert len(fact) < 300


def test_grep_style_output_and_no_matches():
    output = "src/a.ts:12:  VectorStore,\nsrc/a.ts:40:class VectorStore\nsrc/b.ts:3:import { VectorStore }\nlib/c.ts:9:VectorStore\nlib/d.ts:1:VectorStore\n"
    finding = finding_from_tool("Grep", '{"pattern": "VectorStore"}', output)
    assert finding.query == "VectorStore"
    assert finding.fact == "5 matches in 4 files: src/a.ts, src/b.ts, lib/c.ts, …"
    assert finding_from_tool("grep", "nothing", "No matches found").fact == "No matches"


# --- shell -----------------------------------------------------------------------------


def test_shell_command_exit_status_and_tail():
    finding = extract("oh_terminal_python")
    assert finding.query == "python hello.py"
    assert finding.fact == "`python hello.py` exit 0: Hello, World!"
    assert finding.success is True
    listing = extract("oh_terminal_ls")
    assert listing.fact.startswith("`pwd && ls -la` exit 0: ")
    assert len(listing.fact) < 260


def test_python_traceback_is_a_failure():
    finding = extract("swe_python_traceback")
    assert finding.success is False
    assert finding.fact.startswith("`reproduce_bug.py` failed: ")
    assert "AttributeError" in finding.fact or "File " in finding.fact


def test_explicit_exit_codes():
    finding = finding_from_tool(
        "bash",
        "pytest -q",
        "2 failed, 10 passed in 0.31s\n[The command completed with exit code 1.]",
    )
    assert (finding.fact, finding.success) == (
        "`pytest -q` exit 1: 2 failed, 10 passed in 0.31s",
        False,
    )


# --- rag, data loads, edits, the rest ---------------------------------------------------


def test_rag_answer_field():
    output = json.dumps(
        {
            "answer": "VectorStore is defined in packages/mind-engine/src/storage/vector-store.ts",
            "sources": ["a"] * 50,
        }
    )
    finding = finding_from_tool("mind:rag-query", "where is VectorStore defined", output)
    assert (
        finding.fact == "VectorStore is defined in packages/mind-engine/src/storage/vector-store.ts"
    )
    assert tool_kind("custom_kb", "q", output) == "rag"  # by shape


def test_large_data_load_is_summarized_never_stored():
    elements = [{"type": "IfcWall", "id": i, "geometry": [0.5] * 20} for i in range(300)]
    elements += [{"type": "IfcDoor", "id": i, "geometry": [0.5] * 20} for i in range(40)]
    output = json.dumps({"name": "Building A", "elements": elements})
    finding = finding_from_tool("load_ifc", '{"path": "models/a.ifc"}', output)
    assert finding.fact == "Loaded models/a.ifc (Building A): 340 items — 300 IfcWall, 40 IfcDoor"
    assert finding.file_path == "models/a.ifc"
    assert len(finding.fact) < 200 < len(output)
    assert tool_kind("mystery", "", json.dumps(elements)) == "data"


def test_edits_and_failed_edits():
    assert (
        extract("swe_edit").fact
        == "edited /klieret__swe-agent-test-repo/tests/missing_colon.py, now 10 lines"
    )
    failed = extract("swe_edit_syntax_error")
    assert failed.success is False and failed.fact.startswith("Your proposed edit has introduced")
    assert extract("oh_editor_create_failed").success is False


def test_anything_else_is_truncated_to_200_characters():
    finding = extract("swe_decompile")
    assert len(finding.fact) <= 200 and finding.fact.startswith("Decompilation Found!")
    assert "\x1b" not in extract("swe_rsactftool_ansi").fact


def test_tool_names_from_several_frameworks():
    for name in ("fs:read", "read_file", "Read", "open", "cat", "view"):
        assert TOOL_KINDS[name.lower()] == "read" or tool_kind(name, "", "") == "read"
    for name in ("Grep", "Glob", "find_file", "fs:search", "search_dir"):
        assert tool_kind(name, "", "") == "search"
    assert tool_kind("str_replace_editor", '{"command": "view", "path": "/a.py"}', "") == "read"
    assert tool_kind("str_replace_editor", '{"command": "create", "path": "/a.py"}', "") == "edit"


# --- working context from assistant text ------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("I'm working on `lib/app.ex` now.", {"active_file": "lib/app.ex"}),
        ("We're using Phoenix 1.7 with LiveView.", {"framework": "Phoenix 1.7"}),
        (
            "Currently implementing user auth for the admin area.",
            {"current_task": "implementing user auth for the admin area"},
        ),
        ("This is an Elixir project, so tests live in test/.", {"primary_language": "Elixir"}),
        ("You can run the tests with `mix test --cover`.", {"test_command": "mix test --cover"}),
        ("I'll modify the `main.py` file to catch the error.", {"active_file": "main.py"}),
        ("To implement it in a Flask server providing an API", {"framework": "Flask"}),
    ],
)
def test_inferred_context(text, expected):
    assert infer_context(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I'm working on it.",
        "Let's open the file to inspect the syntax error mentioned in the issue.",
        "We are using a different approach here.",
        "I'm adding it now.",
        "Now I'm implementing this.",
        "The go statement starts a goroutine; react quickly to errors.",
        "Run tests with `/test` or from the command line.",
        "It's a Python error, not a bug in our code." + " " * 3,
    ],
)
def test_ordinary_prose_yields_nothing(text):
    assert infer_context(text) == {}


def test_inferred_confidence_is_0_6():
    assert INFERRED_CONFIDENCE == 0.6


def _assistant_texts():
    texts = []
    for path in sorted(SHARED.glob("swe-agent/**/*.traj")):
        history = json.loads(path.read_text()).get("history", [])
        texts += [
            m["content"]
            for m in history
            if m.get("role") == "assistant" and isinstance(m.get("content"), str)
        ]
    for path in sorted(SHARED.glob("openhands-sdk/**/*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, list):
            texts += [
                m["content"]
                for m in data
                if isinstance(m, dict)
                and m.get("role") == "assistant"
                and isinstance(m.get("content"), str)
            ]
    history = (SHARED / "aider" / "chat-history.md").read_text()
    for block in re.split(r"\n(?=#### )", history):
        parts = block.split("\n", 1)
        if len(parts) == 2:
            texts.append(parts[1])  # the assistant's reply after the user's "#### " line
    return texts


@pytest.mark.skipif(
    not SHARED.exists(), reason="needs shared/data/transcripts beside the repository"
)
def test_every_inference_on_the_real_transcripts_is_one_we_reviewed():
    """Across 2,000 real assistant messages, exactly these items are inferred; each was
    checked by hand against its sentence. A new pattern that fires on ordinary prose
    fails here."""
    found = set()
    for text in _assistant_texts():
        found |= set(infer_context(text).items())
    assert found == {
        ("active_file", "fields.py"),
        ("active_file", "aider/coders/base_coder.py"),
        ("active_file", "aider/io.py"),
        ("active_file", "aider/main.py"),
        ("active_file", "main.py"),
        ("active_file", "tests/basic/test_commands.py"),
        ("active_file", "testsr.py"),
        ("primary_language", "Perl"),  # "Since this is a Perl CGI environment"
        ("primary_language", "Python"),  # "primarily written in Python"
        ("framework", "Flask"),  # "in a Flask server providing an API"
        ("framework", "pytest"),  # "testing infrastructure using pytest"
    }
