"""Which of a session's findings the prompt shows, and in what order: by usefulness.

The prompt's findings section keeps a prefix of this order when the budget is short, so
the order decides what is cut. Findings are folded first, so one line stands for what is
still true:
- a todo list's snapshots (TodoWrite, update_plan, …): only the latest, which replaces the
  others;
- the same command run again (`cargo test` and `cargo test 2>&1 | tail -20`, `git add x`
  and `git add -f x`: kinds.equivalent_command): only its latest result;
- edits of one file: one line, the latest edit, saying how many came before;
- the same search, or the same read of a file with the same result: once.

Then, by tier, newest first within each:
0. what bears on the files being worked on (a read or edit of an active file), and a
   command whose latest run failed (an open problem);
1. the rest that says something: what a file defines or is, a search's results, a
   command's output, a subagent's or the web's answer;
2. what says little: a read that gives only a file's size, a read of a file changed since
   (the prompt says to read it again), a command with no output;
3. bookkeeping (todo lists, trackers), last.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memoryapp.lib.extraction import kinds

# Tools whose every call replaces the whole list: their latest call is the list.
SNAPSHOT_TOOLS = frozenset(
    {"todowrite", "todo_write", "todoread", "todo_read", "update_plan", "task_tracker"}
)


@dataclass(frozen=True)
class Candidate:
    """What the order reads of a finding (newest first in the list it is given)."""

    kind: str
    tool: str
    query: str
    fact: str
    file_path: str = ""
    success: bool = True
    stale: bool = False


@dataclass(frozen=True)
class Pick:
    """A finding the prompt shows: its index in the list given, and how many earlier
    findings it stands for (folded into it)."""

    index: int
    earlier: int = 0


def fold_key(item: Candidate) -> tuple[str, ...]:
    """Findings with one key are one line in the prompt: the newest of them."""
    tool = item.tool.lower()
    if item.kind == kinds.BOOKKEEPING and tool in SNAPSHOT_TOOLS:
        return (item.kind, tool)
    if item.kind == kinds.SHELL:
        return (item.kind, kinds.equivalent_command(item.query))
    if item.kind == kinds.EDIT and item.file_path:
        return (item.kind, item.file_path)
    if item.kind == kinds.READ:
        return (item.kind, item.file_path or item.query, item.fact)
    return (item.kind, tool, item.query, item.fact if not item.query else "")


def says_little(item: Candidate) -> bool:
    """A read that gives only the file's size (read.py writes `338 lines` alone, and
    `338 lines; defines …` when it knows more), or a command with no output."""
    if item.kind == kinds.READ:
        return item.success and ";" not in item.fact and not item.fact.startswith("directory")
    if item.kind == kinds.SHELL:
        return item.success and item.fact.endswith("no output")
    return False


def tier(item: Candidate, active: frozenset[str]) -> int:
    if item.kind == kinds.BOOKKEEPING:
        return 3
    if item.stale or says_little(item):
        return 2
    if item.kind == kinds.SHELL and not item.success:
        return 0
    if item.kind in (kinds.READ, kinds.EDIT) and _is_active(item.file_path, active):
        return 0
    return 1


def _is_active(path: str, active: frozenset[str]) -> bool:
    """Whether `path` is one of the active files, which may be given relative to the
    project (`src/app.py` for `/repo/src/app.py`)."""
    if not path:
        return False
    return path in active or any(path.endswith("/" + name.lstrip("/")) for name in active)


def by_usefulness(items: Sequence[Candidate], active_files: Iterable[str] = ()) -> list[Pick]:
    """`items` (newest first) folded and ordered for the prompt (see the module's text)."""
    active = frozenset(f for f in active_files if f)
    newest: dict[tuple[str, ...], int] = {}
    earlier: dict[int, int] = {}
    for index, item in enumerate(items):
        key = fold_key(item)
        if key in newest:
            earlier[newest[key]] += 1
        else:
            newest[key] = index
            earlier[index] = 0
    kept = sorted(newest.values(), key=lambda i: (tier(items[i], active), i))
    return [Pick(i, earlier[i]) for i in kept]
