"""Extraction: concise memory from what an agent's tools print and what it says.

`extract(call)` turns one tool call into a finding: its kind (from the one table in
`kinds.py`), its identity (`identity.py`: which call it answers, exactly), and a concise
fact written by the kind's own module, never the raw output:

| kind | module | fact |
|---|---|---|
| read | read.py | lines read of how many, what the file defines (tree-sitter), a manifest's project and dependencies |
| search | search.py | matches in how many files, which (Grep's content, files and count modes, Glob, rg, grep, find, SWE-agent's search commands) |
| shell | shell.py | command, exit status, the end of the output; test, lint, type-check and build summaries |
| edit | edit.py | file created or edited, lines added and removed, the functions touched; a failed edit's reason |
| web_fetch, web_search | web.py | URL, status, title and first sentences; result count and titles |
| subagent | subagent.py | the task and the report's heading and first substantive sentences |
| bookkeeping | bookkeeping.py | todo counts and the item in progress; tracker commands |
| rag | rag.py | the knowledge base's answer |
| data | data.py | item count and counts per kind |
| other | other.py | JSON unwrapped and summarised, else the first lines |

Every kind keeps a failed tool's own error message and marks the finding unsuccessful.
`context.py` infers working context from what the agent says and does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memoryapp.lib.extraction import (
    bookkeeping,
    data,
    edit,
    kinds,
    other,
    rag,
    read,
    search,
    shell,
    subagent,
    web,
)
from memoryapp.lib.extraction.base import Fact, ToolCallData
from memoryapp.lib.extraction.context import INFERRED_CONFIDENCE, infer_context
from memoryapp.lib.extraction.identity import CallKey, call_key, normalize_path
from memoryapp.lib.extraction.kinds import TOOL_KINDS, kind_of
from memoryapp.lib.extraction.text import one_line

FACT_LIMIT = 400

EXTRACTORS: dict[str, Callable[[ToolCallData], Fact]] = {
    kinds.READ: read.extract,
    kinds.SEARCH: search.extract,
    kinds.SHELL: shell.extract,
    kinds.EDIT: edit.extract,
    kinds.WEB_FETCH: web.extract_fetch,
    kinds.WEB_SEARCH: web.extract_search,
    kinds.SUBAGENT: subagent.extract,
    kinds.BOOKKEEPING: bookkeeping.extract,
    kinds.RAG: rag.extract,
    kinds.DATA: data.extract,
    kinds.OTHER: other.extract,
}

__all__ = [
    "INFERRED_CONFIDENCE",
    "TOOL_KINDS",
    "ExtractedFinding",
    "ToolCallData",
    "call_key",
    "extract",
    "finding_from_tool",
    "infer_context",
    "kind_of",
]


@dataclass(frozen=True)
class ExtractedFinding:
    tool: str
    kind: str
    query: str
    identity: str
    fact: str
    success: bool = True
    file_path: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def extract(call: ToolCallData, cwd: str = "") -> ExtractedFinding:
    """The finding of one call; `cwd`, the session's working directory when known,
    resolves relative paths so one file has one identity."""
    kind = kind_of(call.tool, call.query, call.output)
    key: CallKey = call_key(kind, call.tool, call.query, cwd)
    try:
        fact = EXTRACTORS[kind](call)
    except Exception as exc:  # a parser bug must not lose the finding: fall back, say so
        fact = other.extract(call)
        fact = Fact(fact.text, fact.success, fact.file_path, {"extractor_error": repr(exc)[:200]})
    return ExtractedFinding(
        tool=call.tool.strip(),
        kind=kind,
        query=one_line(key.display, 300),
        identity=key.key,
        fact=one_line(fact.text, FACT_LIMIT),
        success=fact.success,
        file_path=normalize_path(fact.file_path, cwd) or key.path or call.file_path,
        details=fact.details,
    )


def finding_from_tool(
    tool: str,
    query: str,
    output: str,
    success: bool | None = None,
    file_path: str = "",
    details: dict[str, Any] | None = None,
    cwd: str = "",
) -> ExtractedFinding:
    return extract(ToolCallData(tool, query, output, success, file_path, details), cwd)
