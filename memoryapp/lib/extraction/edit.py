"""Edits and writes: what changed in which file.

The fact names the file, whether it was created or changed, the lines added and removed
(from the tool's structured patch when it reports one, else from the old and new text),
and the functions the new text defines or touches. A failed edit ("String to replace not
found", a syntax check that rejected it, a missing file) is a failed finding with the
tool's reason.
"""

from __future__ import annotations

import re
from typing import Any

from memoryapp.lib.code.definitions import definitions
from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure, looks_failed
from memoryapp.lib.extraction.identity import PATH_FIELDS, first_field, normalize_path
from memoryapp.lib.extraction.text import SWE_FILE_HEADER, one_line, plural

_SWE_REJECTED = re.compile(r"Your proposed edit has introduced new syntax error", re.IGNORECASE)
_SWE_ERRORS = re.compile(r"^ERRORS:\s*\n- (.+)$", re.MULTILINE)
_CREATED = re.compile(r"^File created successfully at:?\s*(\S+)", re.MULTILINE)
_UPDATED = re.compile(r"^The file (\S+) has been (?:updated|edited)", re.MULTILINE)
_EDIT_FAILED = re.compile(
    r"did not appear verbatim|String to replace not found|No replacement was performed"
    r"|has not been read yet|modified since read|Found \d+ matches of the string"
    r"|Ran into \[Errno|No such file|Permission denied|Invalid `?\w+`? parameter"
    r"|old_string and new_string are exactly the same|Failed to apply",
    re.IGNORECASE,
)

CREATE_TOOLS = {"write", "write_file", "create", "create_file", "write_to_file", "fs:write"}


def _line_count(text: Any) -> int:
    if not isinstance(text, str) or not text:
        return 0
    return len(text.rstrip("\n").split("\n"))


def _path(call: ToolCallData) -> str:
    path = call.detail("filePath", "file_path") or first_field(call.args, PATH_FIELDS)
    text = call.clean
    if not path and (match := SWE_FILE_HEADER.search(text)):
        path = match.group(1)
    if not path and (match := _CREATED.search(text) or _UPDATED.search(text)):
        path = match.group(1)
    if not path and call.args is None:  # SWE-agent's `create path`
        words = call.query.split("\n", 1)[0].split()
        if words and ("/" in words[-1] or "." in words[-1]):
            path = words[-1]
    return normalize_path(call.file_path or path or "")


def _changes(call: ToolCallData) -> tuple[int | None, int | None, str]:
    """(lines added, lines removed, the new text) as far as the call says."""
    added = call.detail("lines_added", "linesAdded")
    removed = call.detail("lines_removed", "linesRemoved")
    args = call.args or {}
    edits = args.get("edits") if isinstance(args.get("edits"), list) else [args]
    new_text = "\n".join(
        str(e.get(k) or "")
        for e in edits
        if isinstance(e, dict)
        for k in ("new_string", "new_str", "file_text", "content", "new_source", "text")
        if e.get(k)
    )
    if added is None and removed is None:
        old_text = "\n".join(
            str(e.get(k) or "")
            for e in edits
            if isinstance(e, dict)
            for k in ("old_string", "old_str")
            if e.get(k)
        )
        if new_text or old_text:
            added, removed = _line_count(new_text), _line_count(old_text)
    return added, removed, new_text


def extract(call: ToolCallData) -> Fact:
    path = _path(call)
    text = call.clean
    if refused := _refusal(call, path, text):
        return refused
    created = _is_creation(call, text)
    added, removed, new_text = _changes(call)
    details: dict[str, Any] = {"created": created}
    where = path or "a file"
    if created:
        lines = _line_count(new_text) or added
        details["lines_added"] = lines
        fact = f"created {where}" + (f" ({plural(lines, 'line')})" if lines else "")
    else:
        fact = _edited(where, added, removed, text, details)
    touched = definitions(path, new_text)[:4] if new_text and path else []
    if touched:
        names = ", ".join(d.name for d in touched)
        fact += f"; {'defines' if created else 'touches'} {names}"
    return Fact(fact, True, path, details)


def _refusal(call: ToolCallData, path: str, text: str) -> Fact | None:
    """The fact of an edit that was rejected (SWE-agent's linter) or failed, else None."""
    if _SWE_REJECTED.search(text):
        reason = m.group(1) if (m := _SWE_ERRORS.search(text)) else "syntax error"
        prefix = f"edit of {path} rejected" if path else "edit rejected"
        return Fact(f"{prefix}: {one_line(reason, 200)}", False, path, {"error": True})
    where = f"edit of {path} failed: " if path else "edit failed: "
    if failed(call) or (looks_failed(call.output) and _EDIT_FAILED.search(text[:400])):
        return failure(call, path, prefix=where)
    if _EDIT_FAILED.search(text[:300]):
        return failure(call, path, prefix=where)
    return None


def _is_creation(call: ToolCallData, text: str) -> bool:
    """Whether the call created the file rather than changed it."""
    name = call.tool.strip().casefold()
    command = (call.args or {}).get("command")
    return (
        call.detail("type") == "create"
        or command == "create"
        or bool(_CREATED.search(text))
        or (name in CREATE_TOOLS and call.detail("type") is None and "updated" not in text[:200])
    )


def _edited(
    where: str, added: int | None, removed: int | None, text: str, details: dict[str, Any]
) -> str:
    """`edited a.py (+3/−1 lines), now 40 lines`, recording the counts in `details`."""
    fact = f"edited {where}"
    change = []
    if added is not None:
        change.append(f"+{added}")
        details["lines_added"] = added
    if removed is not None:
        change.append(f"−{removed}")
        details["lines_removed"] = removed
    if change:
        fact += f" ({'/'.join(change)} lines)"
    if match := SWE_FILE_HEADER.search(text):
        fact += f", now {plural(int(match.group(2)), 'line')}"
    return fact
