"""Bookkeeping: todo lists and issue trackers. Recorded, so a person sees them, but the
prompt shows them last and few, so they never crowd real findings out.

A todo list says how many items are in progress, pending and done, naming the one in
progress; an issue-tracker command (`bd show …`, `gh issue view …`) is summarised like
any shell command; other tracker tools like any other tool.
"""

from __future__ import annotations

from memoryapp.lib.extraction import kinds, other, shell
from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure
from memoryapp.lib.extraction.text import one_line


def _todos(call: ToolCallData) -> list[dict] | None:
    todos = (call.args or {}).get("todos") or call.detail("newTodos")
    if isinstance(todos, list) and all(isinstance(t, dict) for t in todos):
        return todos
    return None


def extract(call: ToolCallData) -> Fact:
    name = kinds.normalize_tool(call.tool)
    if kinds.TOOL_KINDS.get(name) == kinds.SHELL:
        return shell.extract(call)
    if failed(call):
        return failure(call)
    todos = _todos(call)
    if todos is not None:
        counts: dict[str, int] = {}
        for todo in todos:
            status = str(todo.get("status") or "pending")
            counts[status] = counts.get(status, 0) + 1
        current = next((t for t in todos if t.get("status") == "in_progress"), None) or next(
            (t for t in todos if t.get("status") == "pending"), None
        )
        parts = [f"{n} {status.replace('_', ' ')}" for status, n in counts.items()]
        fact = f"{len(todos)} todos: {', '.join(parts)}"
        if current:
            label = current.get("content") or current.get("title") or ""
            fact += f"; now: {one_line(str(label), 100)}"
        return Fact(fact, True, details={"todos": counts})
    return other.extract(call)
