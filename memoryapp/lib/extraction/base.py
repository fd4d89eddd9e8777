"""What every kind's extractor takes and gives: one tool call (`ToolCallData`) in, one
`Fact` out, and the failure check they share (a tool's error message is kept, and the
finding is marked unsuccessful)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from memoryapp.lib.extraction import kinds
from memoryapp.lib.extraction.text import one_line, sentences, strip_wrappers

FACT_LIMIT = 300
ERROR_LIMIT = 240


@dataclass(frozen=True)
class ToolCallData:
    """One tool call as the agent reported it."""

    tool: str
    query: str
    output: str
    success: bool | None = None
    file_path: str = ""
    details: dict[str, Any] | None = None

    @cached_property
    def args(self) -> dict[str, Any] | None:
        return kinds.arguments(self.query)

    @cached_property
    def clean(self) -> str:
        return strip_wrappers(self.output)

    def detail(self, *names: str) -> Any:
        """The first of `names` in the structured details (dotted names reach inside)."""
        for name in names:
            value: Any = self.details or {}
            for part in name.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                return value
        return None


@dataclass(frozen=True)
class Fact:
    text: str
    success: bool = True
    file_path: str = ""
    details: dict[str, Any] = field(default_factory=dict)


# Messages tools print when they fail, at the start of their output.
_ERROR_START = re.compile(
    r"^\s*(?:<tool_use_error>|Error\b|ERROR\b|error:|Failed\b|FAILED\b|fatal:|Exception\b"
    r"|Ran into \[Errno|Invalid `?\w+`? parameter|File does not exist|File not found"
    r"|No such file or directory|Permission denied|Traceback \(most recent call last\)"
    r"|The path \S+ does not exist|String to replace not found|No replacement was performed"
    r"|File has not been read yet|File has been modified since read|Found \d+ matches of the "
    r"string to replace|Request failed|InputValidationError|Tool permission)",
    re.IGNORECASE,
)


def looks_failed(output: str) -> bool:
    return bool(_ERROR_START.search(output[:400]))


def error_text(call: ToolCallData) -> str:
    """The tool's own error message: its first two sentences, on one bounded line
    (tools pad their errors with advice: "To replace all occurrences, set …")."""
    text = call.clean.strip() or call.output.strip()
    text = re.sub(r"^\s*(?:Error|ERROR)\s*:\s*", "", text)
    first = " ".join(sentences(text.split("\n\n")[0])[:2]) or text
    return one_line(first, ERROR_LIMIT) or "failed"


def failed(call: ToolCallData) -> bool:
    """Failed by the agent's own word, else by an error message at the output's start."""
    if call.success is not None:
        return not call.success
    return looks_failed(call.output)


def failure(call: ToolCallData, file_path: str = "", prefix: str = "") -> Fact:
    return Fact(f"{prefix}{error_text(call)}", False, file_path, {"error": True})
