"""Working context: what the agent is working on, inferred from what it does and says.

Evidence first (the second half of this module): files read and edited give the primary
language, manifests and commands the framework, test runs the test command, the user's
prompts and the issues the agent claims the current task, and the last file it edited
the active file. Each item keeps its evidence and a confidence that grows with it.

`infer_context(text)` reads one assistant message and proposes items from conservative
patterns that need a code-ish token (a backticked path, a known framework or language
name), so ordinary prose yields nothing:
- `active_file`: "working on `lib/app.ex`", "let's open `src/a.ts`", "editing `x.py`";
- `framework`: "using Phoenix 1.7", "built with Django", "a Rails app" (known names only);
- `current_task`: "implementing user auth", "I'm adding rate limiting to the API";
- `primary_language`: "this is an Elixir project", "written in Go" (known names only);
- `test_command`: "run the tests with `mix test`".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memoryapp.lib.code.languages import display_name, language_of
from memoryapp.lib.code.manifests import LIBRARIES
from memoryapp.lib.extraction.bookkeeping import issue_title
from memoryapp.lib.extraction.kinds import BOOKKEEPING, EDIT, READ, SHELL, shell_words
from memoryapp.lib.extraction.shell import written_paths
from memoryapp.lib.extraction.text import one_line, sentences

INFERRED_CONFIDENCE = 0.6

FRAMEWORKS = [
    "Phoenix", "Django", "Flask", "FastAPI", "Rails", "Ruby on Rails", "Laravel", "Spring Boot",
    "Spring", "Express", "NestJS", "Next.js", "Nuxt", "React", "Vue", "Svelte", "SvelteKit",
    "Angular", "Remix", "Gin", "Echo", "Actix", "Axum", "Rocket", "Tokio", "LiveView", "Ecto",
    "Celery", "SQLAlchemy", "PyTorch", "TensorFlow", "pytest", "Jest", "Vitest", "htmx",
    "Tailwind", "Symfony", "ASP.NET", ".NET", "Electron", "Flutter", "Qt",
]  # fmt: skip
LANGUAGES = [
    "Python", "JavaScript", "TypeScript", "Go", "Golang", "Rust", "Elixir", "Erlang", "Ruby",
    "Java", "Kotlin", "Scala", "Swift", "C#", "C\\+\\+", "PHP", "Haskell", "OCaml", "Clojure",
    "Dart", "Lua", "Perl", "Julia", "Zig", "Nim",
]  # fmt: skip

_PATH = r"`((?:[\w.\-]+/)*[\w.\-]+\.[A-Za-z0-9]{1,8})`"
_ACTIVE_FILE = re.compile(
    r"\b(?:working on|working in|looking at|let'?s (?:open|edit|look at|modify)|"
    r"(?:now )?(?:opening|editing|modifying)|I'?ll (?:open|edit|modify))\s+"
    r"(?:the\s+)?(?:file\s+)?" + _PATH,
    re.IGNORECASE,
)
_VERSION = r"(?:\s+v?(\d+(?:\.\d+){0,2}))?"
_FRAMEWORK = re.compile(
    r"\b(?:using|built (?:with|on)|based on|written with|a|an)\s+("
    + "|".join(re.escape(f) for f in sorted(FRAMEWORKS, key=len, reverse=True))
    + r")"
    + _VERSION
    + r"(?=[\s.,;:)!]|$)(?!\s*(?:component|function|hook|method|class|module|test)s?\b)",
)
_FRAMEWORK_APP = re.compile(
    r"\b(?:a|an|this|the)\s+("
    + "|".join(re.escape(f) for f in sorted(FRAMEWORKS, key=len, reverse=True))
    + r")\s+(?:app|application|project|site|codebase|service)\b"
)
_LANGUAGE_NAMES = "(" + "|".join(LANGUAGES) + ")"
_PROJECT_NOUN = r"(?:project|codebase|repo|repository|app|application|library|service|environment)"
_LANGUAGE = re.compile(
    # "this is an Elixir project" needs the noun ("it's a Python error" is not a project);
    # "written in Go" does not.
    r"\b(?i:this is an?|it'?s an?)\s+" + _LANGUAGE_NAMES + r"(?:\s+\w+)?\s+" + _PROJECT_NOUN + r"\b"
    r"|\b(?i:is written in|written in|implemented in)\s+" + _LANGUAGE_NAMES + r"\b"
)
_TASK = re.compile(
    r"\b(?i:I'?m|I am|we'?re|we are|I'?ll be|currently|now|next,? I'?ll be)\s+"
    r"(implementing|building|adding|refactoring|migrating)\s+"
    r"((?:[A-Za-z][\w\-]*\s+){0,6}[A-Za-z][\w\-]*)"
)
_TASK_STOP = {
    "it", "this", "that", "them", "these", "those", "some", "more", "a", "an", "the", "to",
    "in", "on", "for", "with", "and", "changes", "code", "fix", "fixes", "print", "debug",
    "logging", "comments", "tests", "test", "support", "one", "another", "new", "missing",
}  # fmt: skip
_TEST_COMMAND = re.compile(
    r"\brun(?:ning)?\s+(?:the\s+)?tests?\s+(?:with|using|via)\s+`([A-Za-z.][^`\n]{1,79})`",
    re.IGNORECASE,
)


def infer_context(text: str) -> dict[str, str]:
    """Working-context items suggested by one assistant message (key -> value)."""
    found: dict[str, str] = {}
    if not text:
        return found
    text = text[:20000]
    if match := _ACTIVE_FILE.search(text):
        found["active_file"] = match.group(1)
    if match := (_FRAMEWORK.search(text) or _FRAMEWORK_APP.search(text)):
        name = match.group(1)
        version = match.group(2) if match.re is _FRAMEWORK and match.group(2) else ""
        found["framework"] = f"{name} {version}".strip()
    if match := _LANGUAGE.search(text):
        found["primary_language"] = (match.group(1) or match.group(2)).replace("\\", "")
    if match := _TASK.search(text):
        words = match.group(2).split()
        while words and words[0].lower() in _TASK_STOP:
            words.pop(0)
        while words and words[-1].lower() in _TASK_STOP:
            words.pop()
        if len(words) >= 2 and not all(w.lower() in _TASK_STOP for w in words):
            found["current_task"] = f"{match.group(1)} {' '.join(words)}"
    if match := _TEST_COMMAND.search(text):
        found["test_command"] = match.group(1).strip()
    return found


# --- working context from evidence ---------------------------------------------------------
#
# Every extraction job turns what one turn did and said into observations (a file of a
# language read or edited, a manifest naming a framework, a test run, a task given, a file
# changed). They accumulate in a bounded per-session tally (`Evidence`, stored as JSON on
# the session), and `decide` reads the tally: the best-supported language, framework and
# test command, the latest task and the last file actually edited, each with a confidence
# that grows with its evidence and the references it rests on.

WEIGHTED_KEYS = ("primary_language", "framework", "test_command")
LATEST_KEYS = ("current_task", "active_file")
MIN_CONFIDENCE = 0.4
MAX_REFS = 5
MAX_SEEN = 4000
MAX_VALUES = 12
MAX_ISSUES = 200
MAX_WRITTEN_FILES = 2000

# Languages that decide what a project is written in (not its docs, data or config).
NOT_PROGRAMMING = {
    "markdown", "json", "yaml", "toml", "html", "css", "scss", "xml", "text", "csv",
    "shell", "bash", "dockerfile", "make", "ini", "sql", "svg", "restructuredtext",
}  # fmt: skip
# Shell programs that say which language a project is in (weak evidence).
PROGRAM_LANGUAGES = {
    "mix": "Elixir", "iex": "Elixir", "cargo": "Rust", "go": "Go", "pytest": "Python",
    "python": "Python", "python3": "Python", "uv": "Python", "poetry": "Python",
    "bundle": "Ruby", "rake": "Ruby", "rails": "Ruby", "rspec": "Ruby", "gradle": "Java",
    "mvn": "Java", "dotnet": "C#", "swift": "Swift", "php": "PHP", "composer": "PHP",
}  # fmt: skip
# Commands that say which framework a project uses.
COMMAND_FRAMEWORKS = [
    (re.compile(r"^mix phx\.|^mix phoenix\."), "Phoenix"),
    (re.compile(r"^(?:bin/)?rails\b|^bundle exec rails\b"), "Rails"),
    (re.compile(r"\bmanage\.py\b"), "Django"),
    (re.compile(r"^(?:npx |pnpm |yarn )?next (?:dev|build|start)\b"), "Next.js"),
    (re.compile(r"^(?:php )?artisan\b"), "Laravel"),
    (re.compile(r"^flask\b"), "Flask"),
    (re.compile(r"^uvicorn\b.*:app"), "FastAPI"),
]
# Paths and source text that show a framework (each file counts once, weakly).
PATH_FRAMEWORKS = [  # fmt: skip
    (re.compile(r"(?:^|/)lib/\w+_web/|\.heex$|(?:^|/)\w+_web/router\.ex$"), "Phoenix"),
    (re.compile(r"(?:^|/)manage\.py$|/migrations/\d{4}_\w+\.py$"), "Django"),
    (re.compile(r"(?:^|/)app/(?:controllers|models)/\w+\.rb$|(?:^|/)config/routes\.rb$"), "Rails"),
    (
        re.compile(r"(?:^|/)next\.config\.(?:js|mjs|ts)$|(?:^|/)app/(?:.*/)?page\.[jt]sx$"),
        "Next.js",
    ),
    (re.compile(r"\.vue$"), "Vue"),
    (re.compile(r"\.svelte$"), "Svelte"),
]
CONTENT_FRAMEWORKS = [
    (re.compile(r"\buse Phoenix\.|\buse \w+Web, :(?:live_view|controller|router|html|"
                r"live_component)"), "Phoenix"),
    (re.compile(r"^\s*(?:from django\b|import django\b)", re.M), "Django"),
    (re.compile(r"^\s*(?:from flask import|import flask\b)", re.M), "Flask"),
    (re.compile(r"^\s*from fastapi import", re.M), "FastAPI"),
    (re.compile(r"from ['\"]next/"), "Next.js"),
    (re.compile(r"from ['\"]react['\"]|require\(['\"]react['\"]\)"), "React"),
    (re.compile(r"from ['\"]vue['\"]"), "Vue"),
    (re.compile(r"< (?:ApplicationController|ApplicationRecord|ActiveRecord::Base)\b"), "Rails"),
    (re.compile(r"^\s*use axum::|axum::Router", re.M), "Axum"),
    (re.compile(r"\bactix_web::"), "Actix Web"),
    (re.compile(r"\"github\.com/gin-gonic/gin\""), "Gin"),
    (re.compile(r"@SpringBootApplication|\borg\.springframework\."), "Spring"),
]  # fmt: skip
# Runners whose name says they run tests weigh more than wrappers that also do (`just
# check`, `cargo llvm-cov`, `make ci`) when deciding the test command.
_TEST_RUNNER = re.compile(r"\btest\b|pytest|jest|vitest|rspec|phpunit|mocha|unittest|ctest")
_NOISE_PATH = re.compile(
    r"(?:^|/)(?:\.git|node_modules|_build|deps|target|__pycache__|\.venv|venv|dist|\.cache|"
    r"\.claude|\.idea|\.vscode|\.pytest_cache|\.elixir_ls|coverage|tmp)/"
    r"|\.(?:log|tmp|lock|pyc|out|orig|rej|swp|bak)$|^/(?:dev|proc|var/folders)/"
)
_TEST_CATEGORY = "tests"
_ACKS = {
    "yes", "y", "ok", "okay", "continue", "go on", "go ahead", "proceed", "thanks",
    "thank you", "sure", "do it", "please continue", "keep going", "next", "no", "done",
    "great", "perfect", "good", "looks good", "lgtm", "retry", "try again",
}  # fmt: skip
_META_PROMPT = re.compile(
    r"^\s*(?:Stop hook feedback|<local-command-|Caveat:|\[Request interrupted|<system-reminder>"
    r"|This session is being continued|Base directory for this skill|<bash-(?:input|stdout)"
    r"|<user-prompt-submit-hook>|<task-notification>|PreToolUse|PostToolUse|API Error)",
    re.IGNORECASE,
)
_COMMAND_NAME = re.compile(r"<command-name>\s*(/?[\w:.\-]+)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_TAG = re.compile(r"</?[\w\-]+(?:\s[^>]*)?>")
_ISSUE_ID = re.compile(r"^(?:[A-Za-z][\w]*-[\w.]+|#?\d+)$")
_TRACKER_CLAIM = re.compile(r"^(?:show|update|start|claim|view|work|take)$")


@dataclass(frozen=True)
class Observation:
    key: str
    value: str
    weight: float
    what: str
    unique: str = ""  # the same (key, value, unique) counts once: a file read ten times
    rank: int = 1  # for latest keys: a lower rank never replaces a higher one
    seq: int | None = None  # the message it was seen in (the turn's last when not known)


@dataclass(frozen=True)
class Decision:
    value: str
    confidence: float
    evidence: list[dict]


def relative(path: str, cwd: str) -> str:
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1 :]
    return path


def _language(path: str) -> str | None:
    language = language_of(path)
    if not language or language in NOT_PROGRAMMING:
        return None
    return display_name(language)


def base_test_command(command: str) -> str:
    """The command that runs the tests, without its target and plumbing:
    `cd app && mix test test/a_test.exs:12 2>&1 | tail -5` is `mix test`."""
    words = shell_words(command)
    kept: list[str] = []
    for index, word in enumerate(words):
        if re.match(r"^\d?>|^<|^2>&1$", word):
            break
        if (
            index >= 1
            and ("/" in word or "::" in word or re.search(r"\.\w{1,5}(?::\d+)?$", word))
            and word not in ("./...",)
        ):
            break
        if index >= 2 and word.startswith("-") and kept[-1] not in ("-m",):
            break
        kept.append(word)
    return " ".join(kept)


_RUNNER_WRAPPERS = re.compile(
    r"^(?:python3? -m |uv run |poetry run |pipenv run |bundle exec |npx |pnpm exec |pnpm |"
    r"yarn |bunx |dotenv -- )+"
)


def same_runner(command: str) -> str:
    """A test command without the wrapper that launches it: `python -m pytest` and
    `uv run pytest` are both `pytest`, for telling whether a later run fixed a failure."""
    return _RUNNER_WRAPPERS.sub("", base_test_command(command))


# Framing that agent harnesses put before the task itself (SWE-agent, OpenHands' resolver).
_BOILERPLATE = re.compile(
    r"^(?:We'?re currently solving the following (?:issue|CTF challenge)[^.]*\.?|"
    r"Here'?s the (?:issue|challenge) text:?|ISSUE:|CTF:?|Please fix the following issue"
    r"(?: for the repository in \S+?)?[.:]?|(?:An )?[Ee]nvironment has been set up for you"
    r"[^.]*\.|I'?ve uploaded [^.]*\.|"
    r"Consider the following (?:issue|PR description):?|Your task is(?: to)?:?|Task:)\s*",
    re.IGNORECASE,
)


_LIST_MARK = re.compile(r"^(?:[-*•]|\d+[.)])\s+")


def _introduced(lines: list[str]) -> list[str]:
    """What a line ending in a colon introduces: the lines right after it, up to a blank
    one or a code fence, list marks dropped, joined by "; " (a prompt's "I need to
    understand:" then its list; "Fix this error:" then a traceback introduces nothing)."""
    items: list[str] = []
    for line in lines:
        if not line or line.startswith("```"):
            break
        items.append(_LIST_MARK.sub("", line).rstrip(".;"))
    return ["; ".join(items)] if items else []


def task_from_prompt(text: str) -> str:
    """The task a user prompt gives, on one line; '' for acknowledgements and meta
    messages (hook feedback, interruptions, command output)."""
    if not text or _META_PROMPT.match(text):
        return ""
    if name := _COMMAND_NAME.search(text):
        args = _COMMAND_ARGS.search(text)
        arg_text = " ".join(args.group(1).split()) if args else ""
        return one_line(f"{name.group(1)} {arg_text}".strip(), 160)
    plain = " ".join(_TAG.sub(" ", text).split())
    if not plain or plain.casefold().strip(".!") in _ACKS or len(plain.split()) < 3:
        return ""
    lines = [line.strip().lstrip("#*> ").strip() for line in _TAG.sub("\n", text).splitlines()]
    for at, line in enumerate(lines):
        while line and (match := _BOILERPLATE.match(line)) and match.end():
            line = line[match.end() :]
        if len(line.split()) >= 2:
            if line.endswith(":"):  # "I need to understand:" and the list of what
                line = " ".join([line, *_introduced(lines[at + 1 :])])
            first = sentences(line)
            return one_line(first[0] if first else line, 160)
    first = sentences(plain)
    return one_line(first[0] if first else plain, 160)


def observations_for_call(
    *,
    kind: str,
    file_path: str,
    success: bool,
    details: dict | None,
    command: str = "",
    output: str = "",
    cwd: str = "",
) -> list[Observation]:
    """What one tool call says about the project and the work."""
    found: list[Observation] = []
    details = details or {}
    if kind in (READ, EDIT) and file_path and success:
        found.extend(_file_observations(kind, file_path, relative(file_path, cwd), details, output))
    manifest = details.get("manifest") if kind == READ else None
    if isinstance(manifest, dict):
        found.extend(_manifest_observations(file_path, manifest))
    if kind in (SHELL, BOOKKEEPING) and command:
        found.extend(_command_observations(kind, command, details, output))
        for path in written_paths(command, cwd):
            found.append(Observation("written", path, 0.0, one_line(command, 80)))
    return found


def _file_observations(
    kind: str, file_path: str, shown: str, details: dict, output: str
) -> list[Observation]:
    """A file read or edited: its language, the active file, the frameworks its path (and a
    read's text) point to."""
    found: list[Observation] = []
    verb = "read" if kind == READ else ("created" if details.get("created") else "edited")
    if language := _language(file_path):
        found.append(
            Observation("primary_language", language, 1.0 if kind == READ else 2.0,
                        f"{verb} {shown}", unique=file_path)
        )  # fmt: skip
    if kind == EDIT and not _NOISE_PATH.search(shown) and not shown.startswith("/tmp/"):
        found.append(Observation("active_file", shown, 1.0, f"{verb} {shown}", rank=2))
    hints = {name for pattern, name in PATH_FRAMEWORKS if pattern.search(file_path)}
    if kind == READ and output:
        hints |= {name for pattern, name in CONTENT_FRAMEWORKS if pattern.search(output)}
    for framework in sorted(hints):
        found.append(Observation("framework", framework, 1.0, f"{verb} {shown}", unique=file_path))
    return found


def _manifest_observations(file_path: str, manifest: dict) -> list[Observation]:
    """A manifest read: the project's language, frameworks and test command."""
    found: list[Observation] = []
    name = file_path.rsplit("/", 1)[-1]
    if manifest.get("language"):
        found.append(
            Observation("primary_language", manifest["language"], 5.0,
                        f"{name} manifest", unique="manifest:" + file_path)
        )  # fmt: skip
    for framework in manifest.get("frameworks") or []:
        # What a whole manifest names as its framework decides; a library beside it (Oban
        # in a Phoenix app), or a dependency seen in some lines of it, only adds weight.
        partial = bool(manifest.get("partial"))
        strong = framework not in LIBRARIES and not partial
        found.append(
            Observation(
                "framework", framework, 5.0 if strong else 1.0, f"{name} depends on it",
                # Apart from a whole read of it: the first of a kind counts, once.
                unique=file_path + ("#partial" if partial else ""),
            )
        )  # fmt: skip
    if manifest.get("test_command"):
        found.append(
            Observation("test_command", manifest["test_command"], 1.0,
                        f"{name} declares it", unique=file_path)
        )  # fmt: skip
    return found


def _command_observations(kind: str, command: str, details: dict, output: str) -> list[Observation]:
    found: list[Observation] = []
    words = shell_words(command)
    program = words[0].rsplit("/", 1)[-1] if words else ""
    short = one_line(command, 80)
    runs = details.get("run") or []
    tests = [r for r in runs if isinstance(r, dict) and r.get("category") == _TEST_CATEGORY]
    if tests:
        base = base_test_command(command)
        result = tests[0].get("summary", "")
        if base:
            weight = 3.0 if _TEST_RUNNER.search(base) else 1.0
            found.append(Observation("test_command", base, weight, f"ran {short}: {result}"))
    if language := PROGRAM_LANGUAGES.get(program):
        found.append(Observation("primary_language", language, 0.5, f"ran {short}", unique=short))
    joined = " ".join(words)
    for pattern, framework in COMMAND_FRAMEWORKS:
        if pattern.search(joined):
            found.append(Observation("framework", framework, 2.0, f"ran {short}", unique=short))
    if kind == BOOKKEEPING:
        for issue, title in (details.get("issues") or {}).items():
            found.append(Observation("issue_title", issue, 0.0, title))
    if kind == BOOKKEEPING and len(words) >= 3 and _TRACKER_CLAIM.match(words[1]):
        issue = next((w for w in words[2:] if _ISSUE_ID.match(w)), "")
        claims = words[1] not in ("update", "show", "view") or (
            "in_progress" in command or "--claim" in command
        )
        if issue and claims:
            title = issue_title(issue, output)
            value = f"{issue}: {title}" if title else issue
            found.append(Observation("current_task", value, 1.0, f"ran {short}", rank=3))
    return found


def observations_for_message(role: str, text: str, first_prompt: bool = False) -> list[Observation]:
    """What a user prompt or an assistant message says about the work."""
    found: list[Observation] = []
    if role == "user":
        if task := task_from_prompt(text):
            what = "the first prompt" if first_prompt else "a user prompt"
            found.append(Observation("current_task", task, 1.0, what, rank=3))
        return found
    if role != "assistant":
        return found
    for key, value in infer_context(text).items():
        if key == "active_file":
            continue  # only a file it actually touched is the active file
        if key == "current_task":
            found.append(Observation(key, value, 1.0, "the assistant said so", rank=1))
        else:
            found.append(Observation(key, value, 1.0, "the assistant said so", unique=value))
    return found


def empty_evidence() -> dict:
    return {"weights": {}, "latest": {}, "seen": []}


def observe(evidence: dict | None, observations: list[Observation], ref: dict) -> dict:
    """Add observations (all made at `ref`: {"turn", "seq"}) to a session's tally."""
    tally = evidence if isinstance(evidence, dict) and "weights" in evidence else empty_evidence()
    seen = tally["seen"]
    seen_set = set(seen)
    for obs in observations:
        if obs.key == "written":  # not an item: which files a command changed, and when
            if obs.value == "*":
                tally["rewritten_all"] = ref["turn"]
            else:
                writes = tally.setdefault("writes", {})
                writes.pop(obs.value, None)
                writes[obs.value] = ref["turn"]
                while len(writes) > MAX_WRITTEN_FILES:
                    del writes[next(iter(writes))]
            continue
        if obs.key == "issue_title":  # not an item: what the tracker calls each issue
            issues = tally.setdefault("issues", {})
            issues[obs.value] = obs.what
            if len(issues) > MAX_ISSUES:
                del issues[next(iter(issues))]
            continue
        entry_ref = {**ref, "seq": obs.seq or ref["seq"], "what": one_line(obs.what, 160)}
        if obs.key in LATEST_KEYS:
            current = tally["latest"].get(obs.key)
            if current is not None and current.get("rank", 1) > obs.rank:
                continue
            same = current is not None and current.get("value") == obs.value
            refs = (current["refs"] if same else []) + [entry_ref]
            tally["latest"][obs.key] = {
                "value": obs.value,
                "rank": obs.rank,
                "n": (current["n"] + 1) if same else 1,
                "refs": refs[-MAX_REFS:],
            }
            continue
        token = f"{obs.key}|{obs.value}|{obs.unique}"
        if obs.unique and token in seen_set:
            continue
        if obs.unique:
            seen.append(token)
            seen_set.add(token)
        values = tally["weights"].setdefault(obs.key, {})
        entry = values.setdefault(obs.value, {"w": 0.0, "n": 0, "refs": []})
        entry["w"] = round(entry["w"] + obs.weight, 3)
        entry["n"] += 1
        entry["refs"] = (entry["refs"] + [entry_ref])[-MAX_REFS:]
        if len(values) > MAX_VALUES:
            weakest = min(values, key=lambda v: values[v]["w"])
            del values[weakest]
    del seen[:-MAX_SEEN]
    return tally


def written_after(evidence: dict | None, path: str, step: int | None) -> bool:
    """Did a shell command change `path` (or possibly every file) after turn `step`?"""
    if not isinstance(evidence, dict) or step is None or not path:
        return False
    turn = (evidence.get("writes") or {}).get(path)
    everything = evidence.get("rewritten_all")
    return (turn is not None and turn > step) or (everything is not None and everything > step)


def decide(evidence: dict | None) -> dict[str, Decision]:
    """The working context the tally supports, with confidences and evidence."""
    decided: dict[str, Decision] = {}
    if not isinstance(evidence, dict):
        return decided
    for key, values in (evidence.get("weights") or {}).items():
        if not values:
            continue
        total = sum(v["w"] for v in values.values())
        # The heaviest; on a tie, the first seen (a manifest lists its main framework first).
        value, entry = max(values.items(), key=lambda kv: kv[1]["w"])
        # A project has one language and one test command but may use several frameworks
        # (Phoenix with LiveView and Ecto): there the others are no evidence against it.
        share = 1.0 if key == "framework" else (entry["w"] / total if total else 0.0)
        # More evidence, more confidence; rivals (another language, another runner) less.
        confidence = round(min(0.95, (0.5 + 0.5 * share) * (1 - 0.5 ** (entry["w"] / 2))), 2)
        if confidence >= MIN_CONFIDENCE:
            decided[key] = Decision(value, confidence, entry["refs"])
    titles = evidence.get("issues") or {}
    for key, entry in (evidence.get("latest") or {}).items():
        base = {3: 0.7, 2: 0.6}.get(entry.get("rank", 1), 0.45)
        confidence = round(min(0.9, base + 0.05 * (entry["n"] - 1)), 2)
        value = entry["value"]
        if key == "current_task" and value in titles:  # an issue claimed: name its title
            value = f"{value}: {titles[value]}"
        if confidence >= MIN_CONFIDENCE:
            decided[key] = Decision(value, confidence, entry["refs"])
    return decided
