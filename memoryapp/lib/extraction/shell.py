"""Shell commands: the command, its exit status, and the end of its output, where results
are. Test runners, linters, type checkers and builds are recognised and their summary is
stated (`65 tests, 11 failures; first: test renders header (SpotterWeb.HeaderTest)`);
searches run from the shell (`rg`, `grep`, `find`) are summarised like searches, and a few
git commands (`status`, `commit`, `diff --stat`, `log`) get a short digest.

Adding a runner is one entry in `RECOGNISERS`: a function from the output to a
`RunSummary` or None.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memoryapp.lib.extraction import kinds, search
from memoryapp.lib.extraction.base import Fact, ToolCallData
from memoryapp.lib.extraction.text import (
    TaskOutput,
    last_lines,
    one_line,
    plural,
    tail_line,
    task_output,
)

COMMAND_LIMIT = 120
TAIL_LIMIT = 200


@dataclass(frozen=True)
class RunSummary:
    """What a test run, lint, type check or build reported."""

    runner: str
    text: str
    passed: bool
    first_failure: str = ""
    category: str = "tests"  # tests, lint, typecheck, build

    def describe(self) -> str:
        first = f"; first: {self.first_failure}" if self.first_failure and not self.passed else ""
        return f"{self.text}{first}"


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the last match is wanted
        pass
    return found


def _counts(text: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) ([a-z]+)", text)}


# --- recognisers, one per runner ---------------------------------------------------------

_PYTEST = re.compile(
    r"^=*\s*((?:\d+ (?:failed|passed|skipped|errors?|xfailed|xpassed|deselected|warnings?|"
    r"rerun)(?:, )?)+) in [\d.]+s(?: \([^)]*\))?\s*=*\s*$",
    re.MULTILINE,
)
_PYTEST_NONE = re.compile(r"^=+ no tests ran in [\d.]+s =+$", re.MULTILINE)
_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - (.+))?$", re.MULTILINE)


def pytest_summary(text: str) -> RunSummary | None:
    match = _last(_PYTEST, text)
    if match is None:
        if _PYTEST_NONE.search(text):
            return RunSummary("pytest", "no tests ran", False)
        return None
    counts = _counts(match.group(1))
    bad = counts.get("failed", 0) + counts.get("errors", 0) + counts.get("error", 0)
    first = ""
    if failure := _PYTEST_FAILED.search(text):
        first = failure.group(1) + (f" - {failure.group(2)}" if failure.group(2) else "")
    return RunSummary("pytest", match.group(1), bad == 0, one_line(first, 160))


_MIX_TEST = re.compile(
    r"^((?:\d+ doctests?, )?(?:\d+ propert(?:y|ies), )?\d+ tests?, \d+ failures?"
    r"(?:, \d+ (?:excluded|skipped|invalid))*)",
    re.MULTILINE,
)
_MIX_FAILURE = re.compile(r"^\s+1\) (test .+?) \(([\w.]+)\)\s*\n\s+(\S+:\d+)", re.MULTILINE)


def mix_test_summary(text: str) -> RunSummary | None:
    match = _last(_MIX_TEST, text)
    if match is None:
        return None
    failures = int(re.search(r"(\d+) failures?", match.group(1)).group(1))
    first = ""
    if failure := _MIX_FAILURE.search(text):
        first = f"{failure.group(1)} ({failure.group(2)}) {failure.group(3)}"
    return RunSummary("mix test", match.group(1), failures == 0, one_line(first, 160))


_CARGO = re.compile(
    r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored", re.MULTILINE
)
_CARGO_FAILURE = re.compile(r"^---- (\S+) stdout ----", re.MULTILINE)


def cargo_test_summary(text: str) -> RunSummary | None:
    results = _CARGO.findall(text)
    if not results:
        return None
    passed = sum(int(r[1]) for r in results)
    failed = sum(int(r[2]) for r in results)
    ignored = sum(int(r[3]) for r in results)
    summary = f"{passed} passed, {failed} failed" + (f", {ignored} ignored" if ignored else "")
    first = m.group(1) if (m := _CARGO_FAILURE.search(text)) else ""
    return RunSummary("cargo test", summary, failed == 0, first)


_GO_PACKAGE = re.compile(r"^(ok|FAIL)\s+(\S+)\s+(?:[\d.]+s|\(cached\)|\[build failed\])", re.M)
_GO_FAIL = re.compile(r"^\s*--- FAIL: (\S+)", re.MULTILINE)


def go_test_summary(text: str) -> RunSummary | None:
    packages = _GO_PACKAGE.findall(text)
    tests_failed = _GO_FAIL.findall(text)
    if not packages and not tests_failed:
        return None
    ok = sum(1 for status, _ in packages if status == "ok")
    bad = sum(1 for status, _ in packages if status == "FAIL")
    parts = []
    if ok:
        parts.append(f"{plural(ok, 'package')} ok")
    if bad or tests_failed:
        parts.append(f"{plural(max(bad, 1), 'package')} failed")
    if tests_failed:
        parts.append(plural(len(tests_failed), "failing test"))
    first = tests_failed[0] if tests_failed else ""
    return RunSummary("go test", ", ".join(parts), not bad and not tests_failed, first)


_JEST = re.compile(r"^Tests:\s+(.+?total)\s*$", re.MULTILINE)
_JEST_FAILURE = re.compile(r"^\s*● (?!Console)(.+?)\s*$", re.MULTILINE)
_VITEST = re.compile(r"^\s*Tests\s+(\d+ (?:failed|passed|skipped)[^\n]*?\(\d+\))\s*$", re.M)
_VITEST_FAILURE = re.compile(r"^\s*(?:FAIL|×|✗)\s+(.+?)\s*$", re.MULTILINE)


def jest_summary(text: str) -> RunSummary | None:
    if match := _last(_JEST, text):
        counts = _counts(match.group(1))
        first = m.group(1) if (m := _JEST_FAILURE.search(text)) else ""
        return RunSummary("jest", match.group(1), not counts.get("failed"), one_line(first, 160))
    if match := _last(_VITEST, text):
        counts = _counts(match.group(1))
        first = m.group(1) if (m := _VITEST_FAILURE.search(text)) else ""
        summary = " ".join(match.group(1).split())
        return RunSummary("vitest", summary, not counts.get("failed"), one_line(first, 160))
    return None


_UNITTEST = re.compile(r"^Ran (\d+) tests? in [\d.]+s\s*\n\s*\n?(OK|FAILED)(?: \(([^)]*)\))?", re.M)


def unittest_summary(text: str) -> RunSummary | None:
    match = _last(_UNITTEST, text)
    if match is None:
        return None
    detail = f" ({match.group(3)})" if match.group(3) else ""
    summary = f"{plural(int(match.group(1)), 'test')}, {match.group(2)}{detail}"
    return RunSummary("unittest", summary, match.group(2) == "OK")


_RSPEC = re.compile(r"^(\d+ examples?, \d+ failures?(?:, \d+ pending)?)", re.MULTILINE)


def rspec_summary(text: str) -> RunSummary | None:
    match = _last(_RSPEC, text)
    if match is None:
        return None
    failures = int(re.search(r"(\d+) failures?", match.group(1)).group(1))
    return RunSummary("rspec", match.group(1), failures == 0)


_PHPUNIT = re.compile(
    r"^(OK \(\d+ tests?, \d+ assertions?\)|Tests: \d+, Assertions: \d+[^\n]*)", re.M
)
_DOTNET = re.compile(r"^(Passed|Failed)!\s+-\s+(Failed:\s+\d+, Passed:\s+\d+[^\n]*)", re.M)


def xunit_summary(text: str) -> RunSummary | None:
    if match := _last(_PHPUNIT, text):
        ok = match.group(1).startswith("OK")
        return RunSummary("phpunit", match.group(1).rstrip("."), ok)
    if match := _last(_DOTNET, text):
        summary = " ".join(match.group(2).split())
        return RunSummary("dotnet test", summary, match.group(1) == "Passed")
    return None


_TSC = re.compile(r"^Found (\d+) errors?(?: in (?:(\d+) files?|\S+))?\.?\s*$", re.MULTILINE)
_TSC_ERROR = re.compile(r"^(\S+?)(?:\((\d+),\d+\)|:(\d+):\d+) -? ?error (TS\d+): (.+)$", re.M)


def tsc_summary(text: str) -> RunSummary | None:
    error = _TSC_ERROR.search(text)
    if error is None and not re.search(r"\berror TS\d+", text):
        return None  # "Found 1 error." alone is ruff's, not the TypeScript compiler's
    match = _last(_TSC, text)
    count = int(match.group(1)) if match else len(_TSC_ERROR.findall(text))
    first = ""
    if error:
        first = (
            f"{error.group(1)}:{error.group(2) or error.group(3)} {error.group(4)} {error.group(5)}"
        )
    files = f" in {plural(int(match.group(2)), 'file')}" if match and match.group(2) else ""
    return RunSummary(
        "tsc",
        f"{plural(count, 'type error')}{files}",
        count == 0,
        one_line(first, 160),
        "typecheck",
    )


_MYPY = re.compile(
    r"^(Success: no issues found in \d+ source files?|Found \d+ errors? in \d+ files? "
    r"\(checked \d+ source files?\))",
    re.MULTILINE,
)


def mypy_summary(text: str) -> RunSummary | None:
    match = _last(_MYPY, text)
    if match is None:
        return None
    ok = match.group(1).startswith("Success")
    first = m.group(0) if (m := re.search(r"^\S+:\d+: error: .+$", text, re.M)) else ""
    return RunSummary("mypy", match.group(1), ok, one_line(first, 160), "typecheck")


_CREDO = re.compile(r"^\d+ mods/funs, found (.+?)\.?\s*$", re.MULTILINE)
_CREDO_ISSUE = re.compile(r"^┃ \[[A-Z]\] [↑↗→↘↓] (.+?)\s*$", re.MULTILINE)


def credo_summary(text: str) -> RunSummary | None:
    match = _last(_CREDO, text)
    if match is None:
        return None
    found = match.group(1)
    ok = found.startswith("no issues")
    first = m.group(1) if (m := _CREDO_ISSUE.search(text)) else ""
    return RunSummary("credo", f"found {found}", ok, one_line(first, 160), "lint")


_RUFF_FOUND = re.compile(
    r"^Found (\d+) errors?(?: \((\d+) fixed, (\d+) remaining\))?\.", re.MULTILINE
)
_RUFF_ERROR = re.compile(r"^(\S+?:\d+:\d+): ([A-Z]+\d+) (.+)$", re.MULTILINE)
_FLAKE8_ERROR = re.compile(r"^(\S+?:\d+:\d+): ([A-Z]\d+) (.+)$", re.MULTILINE)


def ruff_summary(text: str) -> RunSummary | None:
    if re.search(r"^All checks passed!", text, re.MULTILINE):
        return RunSummary("ruff", "all checks passed", True, category="lint")
    match = _last(_RUFF_FOUND, text)
    if match is None:
        return None
    first = f"{m.group(1)} {m.group(2)} {m.group(3)}" if (m := _RUFF_ERROR.search(text)) else ""
    count = int(match.group(1))
    if match.group(2) is not None:  # --fix: what is left is what matters
        remaining = int(match.group(3))
        summary = f"{plural(count, 'error')}, {match.group(2)} fixed, {remaining} remaining"
        return RunSummary("ruff", summary, remaining == 0, one_line(first, 160), "lint")
    fixable = m.group(1) if (m := re.search(r"\[\*\] (\d+) fixable", text)) else ""
    summary = plural(count, "error") + (f" ({fixable} fixable)" if fixable else "")
    return RunSummary("ruff", summary, count == 0, one_line(first, 160), "lint")


_REFORMAT = re.compile(r"^(?:Oh no! .*\n)?(\d+) files? (?:would be|were) reformatted[^\n]*", re.M)
_WOULD_REFORMAT = re.compile(r"^(?:Would reformat|would reformat):? (\S+)", re.MULTILINE)
_MIX_FORMAT = re.compile(r"mix format failed due to --check-formatted")


def format_summary(text: str) -> RunSummary | None:
    """ruff format / black --check, and mix format --check-formatted."""
    files = [f.rsplit("/", 1)[-1] for f in _WOULD_REFORMAT.findall(text)]
    if match := _last(_REFORMAT, text):
        would = "would be" in match.group(0)
        names = f" ({', '.join(files[:3])})" if files else ""
        verb = "would be" if would else "were"
        summary = f"{plural(int(match.group(1)), 'file')} {verb} reformatted{names}"
        return RunSummary("formatter", summary, not would, category="lint")
    if _MIX_FORMAT.search(text):
        unformatted = re.findall(r"^\s+\* (\S+)", text, re.MULTILINE)
        names = ", ".join(p.rsplit("/", 1)[-1] for p in unformatted[:3])
        summary = f"{plural(len(unformatted), 'file')} not formatted" + (
            f" ({names})" if names else ""
        )
        return RunSummary("mix format", summary, False, category="lint")
    if re.search(r"^\d+ files? (?:left unchanged|already formatted)\s*$", text, re.MULTILINE):
        return RunSummary("formatter", "already formatted", True, category="lint")
    return None


_ESLINT = re.compile(r"✖ (\d+ problems? \(\d+ errors?, \d+ warnings?\))")


def eslint_summary(text: str) -> RunSummary | None:
    match = _last(_ESLINT, text)
    if match is None:
        return None
    errors = int(re.search(r"(\d+) errors?", match.group(1)).group(1))
    return RunSummary("eslint", match.group(1), errors == 0, category="lint")


_MIX_COMPILE_ERROR = re.compile(r"^\*\* \((\w+Error)\) (.+)$", re.MULTILINE)
# Elixir's diagnostics: `error: …` or `warning: …`, then (1.15+) a framed snippet ending
# `└─ path:line:col: Module.fun/2`, or (older) an indented `path:line: Module.fun/2` line.
_ELIXIR_DIAGNOSTIC = re.compile(
    r"^\s*(error|warning): (.+?)\n(?:(?:\s*│[^\n]*\n|\s*\d+ │[^\n]*\n)*\s*└─ |\s+)"
    r"(\S+?\.(?:ex|exs|heex|eex)):(\d+)",
    re.MULTILINE,
)
_WARNINGS_AS_ERRORS = re.compile(
    r"Compilation failed due to warnings while using the --warnings-as-errors"
)


def _diagnostic(match: re.Match) -> str:
    path = match.group(3).rsplit("/", 1)[-1] if len(match.group(3)) > 40 else match.group(3)
    message = re.sub(r"\s*\((?:if|expected|or|please)\b[^)]*\)", "", match.group(2))
    return one_line(f"{message} ({path}:{match.group(4)})", 160)


def elixir_compile_summary(text: str) -> RunSummary | None:
    """mix compile (and mix test compiling first): errors and warnings with their place."""
    diagnostics = list(_ELIXIR_DIAGNOSTIC.finditer(text))
    errors = [d for d in diagnostics if d.group(1) == "error"]
    warnings = [d for d in diagnostics if d.group(1) == "warning"]
    compile_error = _MIX_COMPILE_ERROR.search(text)
    if errors or (compile_error and compile_error.group(1) == "CompileError"):
        if errors:
            first = _diagnostic(errors[0])
        else:
            first = one_line(compile_error.group(2), 160)
        count = max(len(errors), 1)
        return RunSummary(
            "mix compile", f"compile error{'s' if count > 1 else ''}", False, first, "build"
        )
    if _WARNINGS_AS_ERRORS.search(text):
        first = _diagnostic(warnings[0]) if warnings else ""
        summary = f"compilation failed: {plural(len(warnings), 'warning')} treated as errors"
        return RunSummary("mix compile", summary, False, first, "build")
    if re.search(r"^Compiling \d+ files? \(\.ex\)|^Generated \w+ app", text, re.MULTILINE):
        if warnings:
            summary = f"compiled, {plural(len(warnings), 'warning')}: {_diagnostic(warnings[0])}"
            return RunSummary("mix compile", one_line(summary, 200), True, category="build")
        return RunSummary("mix compile", "compiled", True, category="build")
    return None


_CARGO_ERROR = re.compile(r"^error(?:\[(E\d+)\])?: (.+)$", re.MULTILINE)
_CARGO_FAILED = re.compile(r"could not compile `([^`]+)`[^\n]*?due to (\d+) previous errors?")
_CARGO_WARNINGS = re.compile(r"generated (\d+) warnings?")


def build_summary(text: str) -> RunSummary | None:
    if match := _CARGO_FAILED.search(text):
        first = m.group(2) if (m := _CARGO_ERROR.search(text)) else ""
        summary = f"could not compile {match.group(1)}: {plural(int(match.group(2)), 'error')}"
        return RunSummary("cargo", summary, False, one_line(first, 160), "build")
    if summary := elixir_compile_summary(text):
        return summary
    if match := _MIX_COMPILE_ERROR.search(text):
        return RunSummary("mix", match.group(1), False, one_line(match.group(2), 160), "build")
    if re.search(r"^\s*Finished `?\w+`? profile", text, re.MULTILINE):
        warnings = sum(int(n) for n in _CARGO_WARNINGS.findall(text))
        summary = "built" + (f", {plural(warnings, 'warning')}" if warnings else "")
        return RunSummary("cargo", summary, True, category="build")
    return None


RECOGNISERS: list[Callable[[str], RunSummary | None]] = [
    pytest_summary,
    mix_test_summary,
    cargo_test_summary,
    go_test_summary,
    jest_summary,
    unittest_summary,
    rspec_summary,
    xunit_summary,
    tsc_summary,
    mypy_summary,
    credo_summary,
    ruff_summary,
    format_summary,
    eslint_summary,
    build_summary,
]


_COVERAGE_FAILED = re.compile(
    r"Coverage test failed, threshold not met[^\n]*|FAIL Required test coverage of [^\n]*"
    r"|Coverage failure: [^\n]*|fail-under[^\n]*not reached[^\n]*",
    re.IGNORECASE,
)


def coverage_summary(text: str) -> RunSummary | None:
    if match := _last(_COVERAGE_FAILED, text):
        return RunSummary("coverage", one_line(match.group(0), 120), False, category="lint")
    return None


RECOGNISERS.append(coverage_summary)


def run_summaries(text: str) -> list[RunSummary]:
    """Every runner summary in the output; tests before lint before builds."""
    found = [s for recognise in RECOGNISERS if (s := recognise(text)) is not None]
    order = {"tests": 0, "typecheck": 1, "lint": 2, "build": 3}
    if any(s.category != "build" for s in found):
        found = [s for s in found if s.category != "build" or not s.passed]
    return sorted(found, key=lambda s: order.get(s.category, 9))


# --- exit status ---------------------------------------------------------------------------

_EXIT_FIRST_LINE = re.compile(r"^\s*(?:Error: )?Exit code (-?\d+)\s*$", re.MULTILINE)
_EXIT_ANYWHERE = re.compile(
    r"(?:\[The command completed with exit code|\[Command finished with exit code"
    r"|exit code|exit status|exited with(?: code)?|Process exited with code)\s*[:=]?\s*(-?\d+)",
    re.IGNORECASE,
)
_TIMED_OUT = re.compile(r"Command timed out|timed out after|\[Command timed out", re.IGNORECASE)


def exit_status(call: ToolCallData) -> int | None:
    if envelope := task_output(call.output):
        return envelope.exit_code
    for name in ("exit_code", "exitCode", "returnCode", "return_code", "exit_status"):
        value = call.detail(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    head = call.output.lstrip()[:200]
    if match := _EXIT_FIRST_LINE.match(head):
        return int(match.group(1))
    if match := _last(_EXIT_ANYWHERE, call.output[-600:]):
        return int(match.group(1))
    return None


# --- git digests ---------------------------------------------------------------------------


def _git_status(text: str) -> str:
    branch = m.group(1) if (m := re.search(r"^On branch (\S+)", text, re.M)) else ""
    if re.search(r"nothing to commit, working tree clean", text):
        return f"clean on {branch}" if branch else "clean"
    changes = re.findall(r"^\s+(modified|deleted|new file|renamed):\s+(\S+)", text, re.MULTILINE)
    untracked: list[str] = []
    if part := re.search(r"Untracked files:\n(?:.*\n)*?((?:\t.+\n?)+)", text):
        untracked = [x.strip() for x in part.group(1).splitlines() if x.strip()]
    parts = []
    by_kind: dict[str, list[str]] = {}
    for kind, path in changes:
        by_kind.setdefault(kind, []).append(path)
    for kind, paths in by_kind.items():
        sample = ", ".join(paths[:3]) + (", …" if len(paths) > 3 else "")
        parts.append(f"{len(paths)} {kind} ({sample})")
    if untracked:
        sample = ", ".join(untracked[:3]) + (", …" if len(untracked) > 3 else "")
        parts.append(f"{len(untracked)} untracked ({sample})")
    where = f"on {branch}: " if branch else ""
    return where + ("; ".join(parts) if parts else one_line(text, 120))


def _git_commit(text: str) -> str:
    head = m.group(0) if (m := re.search(r"^\[[^\]]+\] .+$", text, re.MULTILINE)) else ""
    stats = m.group(0) if (m := re.search(r"\d+ files? changed[^\n]*", text)) else ""
    return "; ".join(p for p in (one_line(head, 120), stats.strip()) if p)


def _git_stat(text: str) -> str:
    stats = m.group(0) if (m := _last(re.compile(r"\d+ files? changed[^\n]*"), text)) else ""
    return stats.strip()


def _git_diff(text: str) -> str:
    """Lines added and removed per file, from the hunks."""
    files: dict[str, list[int]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("diff --git "):
            current = line.rsplit(" b/", 1)[-1]
            files[current] = [0, 0]
        elif current and line.startswith("+") and not line.startswith("+++"):
            files[current][0] += 1
        elif current and line.startswith("-") and not line.startswith("---"):
            files[current][1] += 1
    if not files:
        return "no changes" if not text.strip() else ""
    shown = ", ".join(f"{path} (+{a}/−{r})" for path, (a, r) in list(files.items())[:4])
    more = f", +{len(files) - 4} more" if len(files) > 4 else ""
    return f"{plural(len(files), 'file')} changed: {shown}{more}"


def _git_log(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(one_line(line, 80) for line in lines[:2]) + (
        f" (+{len(lines) - 2} more)" if len(lines) > 2 else ""
    )


GIT_DIGESTS: dict[str, Callable[[str], str]] = {
    "status": _git_status,
    "commit": _git_commit,
    "diff": _git_stat,
    "show": _git_stat,
    "log": _git_log,
}


def _git_digest(words: list[str], text: str) -> str:
    if len(words) < 2 or words[0] != "git":
        return ""
    sub = next((w for w in words[1:] if not w.startswith("-")), "")
    digest = GIT_DIGESTS.get(sub)
    if sub in ("diff", "show") and "--stat" not in words:
        digest = _git_diff
    if digest is None:
        return ""
    return digest(text)


# --- files a command writes ----------------------------------------------------------------

# Commands that may rewrite any file of the project: every earlier read may be stale.
_BROAD_WRITERS = re.compile(
    r"^(?:ruff format|ruff check\b.*--fix|black|isort|autopep8|autoflake|mix format|"
    r"prettier\b.*--write|eslint\b.*--fix|cargo fmt|cargo clippy\b.*--fix|gofmt\b.*-w|"
    r"goimports\b.*-w|rustfmt|rubocop\b.*-[aA]|(?:npm|pnpm|yarn) (?:run )?(?:format|fix|lint:fix)|"
    r"just (?:format|fmt|fix)|make (?:format|fmt|fix)|mix phx\.gen|mix igniter|"
    r"git (?:checkout|switch|stash|reset --hard|pull|merge|rebase|apply|am|cherry-pick|revert))\b"
)
_GIT_PATHS = re.compile(r"^git (?:checkout|restore)\b")
MAX_WRITES = 50


def written_paths(command: str, cwd: str = "") -> list[str]:
    """The files a shell command writes, as far as its words say (`sed -i`, `perl -pi`,
    redirections, `tee`, `mv`, `cp`, `rm`, `touch`, `git checkout -- paths`); ["*"] when it
    may rewrite any file (formatters, `--fix`, branch switches, stashes)."""
    from memoryapp.lib.extraction.identity import normalize_path

    here = cwd
    found: list[str] = []
    for words in kinds.command_segments(command):
        while words and re.match(r"^\w+=", words[0]):
            words = words[1:]
        if not words:
            continue
        if words[0].rsplit("/", 1)[-1] == "cd" and len(words) > 1:
            here = normalize_path(words[1], here)
            continue
        paths = _segment_writes(words)
        if paths is None:
            return ["*"]
        found.extend(
            normalize_path(path, here)
            for path in paths
            if path and path != "/dev/null" and not path.startswith("-")
        )
    return list(dict.fromkeys(found))[:MAX_WRITES]


def _segment_writes(words: list[str]) -> list[str] | None:
    """The paths one simple command writes, in the order its words name them (redirections
    first); None when it may rewrite any file."""
    program, line = words[0].rsplit("/", 1)[-1], " ".join(words)
    paths = _redirect_targets(words)
    operands = _operands(words)
    if _GIT_PATHS.match(line) and "--" in words:
        paths += words[words.index("--") + 1 :]
    elif _BROAD_WRITERS.match(line) or (program == "git" and line.startswith("git restore")):
        return None
    elif program in ("sed", "perl") and any(re.match(r"^-\w*i", w) for w in words[1:]):
        paths += _in_place_edit_paths(words)
    elif program in ("tee", "touch", "rm", "mv", "truncate"):
        paths += operands
    elif program in ("cp", "install") and operands:
        paths.append(operands[-1])
    return paths


# A redirection's operator alone (its file is the next word) or with its file attached.
_REDIRECTION = re.compile(r"^(?:\d*|&)(?:<<<|<<|<>|<&|<|>>|>&|>\||>)(.*)$")


def _operands(words: list[str]) -> list[str]:
    """A command's operands: its words after the program but options and redirections
    (`< in.txt`, `2>err.log`, `>> out`; their files are not operands)."""
    operands, skip_next = [], False
    for word in words[1:]:
        if skip_next:
            skip_next = False
            continue
        redirection = _REDIRECTION.match(word)
        if redirection:
            skip_next = not redirection.group(1)
        elif not word.startswith("-"):
            operands.append(word)
    return operands


def _redirect_targets(words: list[str]) -> list[str]:
    """The files of `> path`, `>> path`, `>path` and `>>path`."""
    targets = []
    for index, word in enumerate(words):
        if word in (">", ">>") and index + 1 < len(words):
            targets.append(words[index + 1])
        elif re.match(r"^>>?[^>&]", word):
            targets.append(word.lstrip(">"))
    return targets


def _in_place_edit_paths(words: list[str]) -> list[str]:
    """The files of `sed -i`/`perl -pi`: the operands after the script, which is the first
    operand unless given by `-e`/`--expression`."""
    scripts = {i + 1 for i, w in enumerate(words) if w in ("-e", "--expression")}
    rest = [w for i, w in enumerate(words[1:], 1) if i not in scripts and not w.startswith("-")]
    return rest if scripts else rest[1:]


# --- the fact ----------------------------------------------------------------------------


def extract(call: ToolCallData) -> Fact:
    command = kinds.command_of(call.args, call.query).strip()
    text = call.clean
    text = re.sub(r"^\s*(?:Error: )?Exit code -?\d+\s*\n?", "", text, count=1)
    status = exit_status(call)
    words = kinds.shell_words(command)
    program = kinds.shell_program(command)
    details: dict = {"command": command[:1000]}
    if status is not None:
        details["exit"] = status

    summaries = run_summaries(text)
    ok, status_text = _outcome(call, status, program, text, summaries)
    if summaries:
        details["run"] = [
            {
                "runner": s.runner,
                "summary": s.text,
                "passed": s.passed,
                "category": s.category,
                "first_failure": s.first_failure,
            }
            for s in summaries
        ]
        body = "; ".join(s.describe() for s in summaries[:2])
    else:
        body = _output_body(program, status, words, text)
    if envelope := task_output(call.output):  # TaskOutput: a background command's result
        return _background_result(call, envelope, ok, status_text, body, details)
    fact = f"`{one_line(kinds.compact_command(command), COMMAND_LIMIT)}` {status_text}: {body}"
    return Fact(fact, ok, call.file_path, details)


def _background_result(
    call: ToolCallData, envelope: TaskOutput, ok: bool, status_text: str, body: str, details: dict
) -> Fact:
    """A background command's result (TaskOutput), named by its description when the
    details carry it; a task still running is said so, not taken for a result."""
    name = call.detail("task.description", "description") or call.detail("task.task_id", "task_id")
    if not name and (args := call.args):
        name = args.get("task_id") or args.get("bash_id") or ""
    label = f"background task {one_line(str(name), COMMAND_LIMIT)}".rstrip()
    if envelope.status in ("running", "pending") or envelope.retrieval == "timeout":
        tail = f": {body}" if envelope.output.strip() else ""
        return Fact(f"{label} still running{tail}", True, call.file_path, details)
    return Fact(f"{label} {status_text}: {body}", ok, call.file_path, details)


def _outcome(
    call: ToolCallData, status: int | None, program: str, text: str, summaries: list[RunSummary]
) -> tuple[bool, str]:
    """Whether the command succeeded, and the word for it (`exit 1`, `ok`, `timed out`)."""
    if call.detail("interrupted") is True or _TIMED_OUT.search(call.output[-400:]):
        return False, "timed out"
    if status is not None:
        # grep-like programs exit 1 when they find nothing: that is an answer, not a failure
        no_matches = status == 1 and program in kinds.SEARCH_COMMANDS and not text.strip()
        ok = status == 0 or no_matches
        # `mix test | tail -5` exits with tail's status: the runner's own summary decides.
        return ok and all(s.passed for s in summaries), f"exit {status}"
    if call.success is not None:
        ok = call.success and all(s.passed for s in summaries)
    else:
        ok = "Traceback (most recent call last)" not in text and not re.search(
            r"command not found|No such file or directory", text[:300]
        )
        ok = ok and all(s.passed for s in summaries)  # no exit status: the runner's word
    return ok, "ok" if ok else "failed"


def _output_body(program: str, status: int | None, words: list[str], text: str) -> str:
    """What the output says when no test runner summarised it: a listing or search, a git
    digest, `no output`, or its last lines."""
    if program in kinds.SEARCH_COMMANDS and (status in (0, 1, None)):
        if program in ("ls", "tree"):
            return search.summarize_listing(text)
        if not text.strip():
            return "No matches"
        return search.describe(search.parse(text, "files" if program in ("find", "fd") else None))
    if digest := _git_digest(words, text):
        return digest
    if text.strip() in ("", "Your command ran successfully and did not produce any output."):
        return "no output"
    return tail_line(" / ".join(last_lines(text, 3)), TAIL_LIMIT)
