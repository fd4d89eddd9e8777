"""How good is what extraction remembers? Import real transcripts through the API and
measure it.

Every transcript under the shared corpus (`../shared/data/transcripts`, else the repo's
`demo/transcripts`) and under any folder given on the command line is imported, turn by
turn, through the agent API into a fresh embedded database (extraction runs in-process
after each turn). Before each turn, every tool call in it is checked with
`GET /findings/check` as an agent would before making it. Printed per source and overall:

- reads whose fact names what the file defines: the read's own output (line-number
  prefixes removed by this script's own rule) is parsed with tree-sitter, and the fact
  must name min(3, n) of the n definitions (a manifest: its project name);
- searches whose count is right: against the tool's own count (Claude Code's `numFiles`
  and `numMatches`, SWE-agent's "Found N matches") or the output's match lines;
- shell runs with a test summary whose fact keeps it (its failure and pass counts) and
  whose finding is unsuccessful exactly when tests failed (a pipe's exit status aside);
- distinct calls left without their own finding: at the end, a distinct call whose
  finding is missing, or holds another call's fact;
- false "known": a first-time call checked as known, and a look-alike that was never
  made (a sibling file, another pattern or scope, another command, URL or argument);
- re-reads after an edit of the same file, and how many were flagged stale;
- the working context inferred per session, with its evidence, and against expected
  values where `bench/quality_expected.json` names them.

"Same call" here is this script's own rule (tool, and arguments without display-only
fields, paths normalised), not the server's identity function.

    .venv/bin/python bench/quality.py [FOLDER ...]
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "transcripts"
EXPECTED = Path(__file__).with_name("quality_expected.json")
DISPLAY_FIELDS = {"description", "timeout", "run_in_background", "security_risk", "thought", "-n"}
PATH_FIELDS = ("file_path", "path", "notebook_path")
READ_TOOLS = {"read", "read_file", "open", "view", "view_file", "fs:read", "cat"}
EDIT_TOOLS = {"edit", "multiedit", "write", "create", "str_replace", "insert", "write_file"}
SEARCH_TOOLS = {"grep", "glob", "search_dir", "search_file", "find_file", "rg", "fs:grep"}
SHELL_TOOLS = {"bash", "execute_bash", "terminal", "shell", "run_command"}
NUMBERED = (re.compile(r"^ *(\d+)→"), re.compile(r"^ *(\d+)\t"), re.compile(r"^(\d+):"))
TEST_SUMMARY = re.compile(
    r"(\d+) failed, (\d+) passed|(\d+) passed(?:, \d+ \w+)* in [\d.]+s"
    r"|(\d+) tests?, (\d+) failures?|test result: \w+\. (\d+) passed; (\d+) failed"
    r"|Tests:\s+(?:(\d+) failed, )?(\d+) passed"
    r"|(\d+) examples?, (\d+) failures?|Ran (\d+) tests? in"
)


def setup_django(var_dir: str) -> None:
    os.environ["MEMORYAPP_VAR_DIR"] = var_dir
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# --- the script's own notion of a call --------------------------------------------------


def arguments(query) -> dict | None:
    if isinstance(query, dict):
        return query
    try:
        value = json.loads(query) if isinstance(query, str) and query.startswith("{") else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def same_call_key(tool: str, query) -> str:
    args = arguments(query)
    if args is None:
        return f"{tool.casefold()}|{' '.join(str(query).split())}"
    kept = {}
    for name, value in args.items():
        if name in DISPLAY_FIELDS:
            continue
        if name in PATH_FIELDS and isinstance(value, str):
            value = posixpath.normpath(value)
        kept[name] = value
    return f"{tool.casefold()}|{json.dumps(kept, sort_keys=True)}"


def path_of(query) -> str:
    args = arguments(query)
    if args:
        for name in PATH_FIELDS:
            if isinstance(args.get(name), str):
                return posixpath.normpath(args[name])
        return ""
    words = str(query).split()
    return posixpath.normpath(words[0]) if words and ("/" in words[0] or "." in words[0]) else ""


def look_alike(tool: str, query) -> tuple[str, str]:
    """A call like this one that nobody made: a sibling file, another pattern or scope,
    another command, URL or argument."""
    args = arguments(query)
    if args is None:
        return tool, f"{query} zz_lookalike"
    args = dict(args)
    for name in PATH_FIELDS:
        if isinstance(args.get(name), str) and args[name]:
            head, tail = posixpath.split(args[name])
            args[name] = posixpath.join(head, "zz_" + tail)
            return tool, json.dumps(args)
    for name in ("pattern", "command", "cmd", "code", "script", "url", "query"):
        if isinstance(args.get(name), str) and args[name]:
            shell = name in ("command", "cmd", "code", "script")
            args[name] = args[name] + (" -zz" if shell else "zz")
            return tool, json.dumps(args)
    args["zz_lookalike"] = 1
    return tool, json.dumps(args)


def strip_numbers(text: str) -> str:
    lines = text.split("\n")
    filled = [x for x in lines if x.strip()]
    for pattern in NUMBERED:
        if filled and sum(1 for x in filled if pattern.match(x)) >= 0.8 * len(filled):
            return "\n".join(pattern.sub("", x) for x in lines)
    return text


# --- measurements --------------------------------------------------------------------------


@dataclass
class Tally:
    reads: int = 0
    reads_named: int = 0
    searches: int = 0
    searches_right: int = 0
    test_runs: int = 0
    test_runs_kept: int = 0
    distinct_calls: int = 0
    calls_without_finding: int = 0
    first_time_checks: int = 0
    false_known_first: int = 0
    look_alikes: int = 0
    false_known_look_alike: int = 0
    rereads_after_edit: int = 0
    flagged_stale: int = 0
    stale_known: int = 0
    sessions: int = 0
    examples: dict = field(default_factory=lambda: defaultdict(list))

    def add(self, other: Tally) -> None:
        for name, value in vars(other).items():
            if isinstance(value, int):
                setattr(self, name, getattr(self, name) + value)
        for name, items in other.examples.items():
            self.examples[name].extend(items)

    def note(self, kind: str, text: str) -> None:
        if len(self.examples[kind]) < 3:
            self.examples[kind].append(text[:300])


def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "–"


def check_read(tally: Tally, call: dict, fact: str) -> None:
    from memoryapp.lib.code.definitions import definitions
    from memoryapp.lib.code.manifests import read_manifest

    path = path_of(call.get("query", "")) or (call.get("file_path") or "")
    output = call.get("output") or ""
    if call.get("success") is False or not path or not output.strip():
        return
    text = re.sub(r"<system-reminder>.*?</system-reminder>", "", output, flags=re.S)
    text = re.sub(
        r"^\[File: [^\n]*\]\n|^Here's the result of running `cat -n` on [^\n]*\n", "", text
    )
    source = strip_numbers(text)
    manifest = read_manifest(path, source)
    if manifest and manifest.name:
        tally.reads += 1
        tally.reads_named += manifest.name in fact
        if manifest.name not in fact:
            tally.note("read without its project name", f"{path}: {fact}")
        return
    names = [d.name for d in definitions(path, source)]
    if not names:
        return
    tally.reads += 1
    wanted = min(3, len(names))
    found = sum(
        1 for name in set(names) if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", fact)
    )
    if found >= wanted:
        tally.reads_named += 1
    else:
        tally.note("read not naming its definitions", f"{path}: {fact} (defines {names[:5]})")


def true_search_count(call: dict) -> int | None:
    details = call.get("details") or {}
    output = call.get("output") or ""
    args = arguments(call.get("query")) or {}
    mode = details.get("mode") or args.get("output_mode")
    if (
        call["tool"].casefold() == "glob"
        or mode in ("files_with_matches", None)
        and "numFiles" in details
        and mode != "content"
    ):
        if isinstance(details.get("numFiles"), int):
            return details["numFiles"]
    if mode == "count" and isinstance(details.get("numMatches"), int):
        return details["numMatches"]
    if m := re.search(r"Found (\d+) match(?:es)? for", output):
        return int(m.group(1))
    if re.match(r"\s*No (?:matches|files) found", output):
        return 0
    if mode == "content":
        lines = [x for x in output.splitlines() if x.strip() and x.strip() != "--"]
        numbered = [x for x in lines if re.match(r"^(?:[^:\s][^:]*:)?\d+:", x)]
        if numbered or args.get("-n"):
            return len(numbered)
        if not any(args.get(k) for k in ("-A", "-B", "-C")):
            return len(lines)
    return None


def check_search(tally: Tally, call: dict, fact: str) -> None:
    expected = true_search_count(call)
    if expected is None:
        return
    tally.searches += 1
    said = 0 if re.match(r"No (?:matches|files)", fact) else None
    if said is None and (m := re.match(r"([\d,]+)\+? (?:match|matches|files?)\b", fact)):
        said = int(m.group(1).replace(",", ""))
    if said == expected:
        tally.searches_right += 1
    else:
        tally.note("search with a wrong count", f"{call.get('query')}: expected {expected}: {fact}")


# Which of TEST_SUMMARY's groups count failures.
FAILURE_GROUPS = (1, 5, 7, 8, 11)


def check_shell(tally: Tally, call: dict, fact: str, success: bool | None) -> None:
    """A run with a test summary keeps its counts, and its finding says it failed exactly
    when tests failed (whatever the exit status of a pipe said)."""
    output = call.get("output") or ""
    found = list(TEST_SUMMARY.finditer(output))
    if not found:
        return
    tally.test_runs += 1
    if "test result:" in found[-1].group(0):
        passed = sum(int(m.group(6)) for m in found if m.group(6))
        failed = sum(int(m.group(7)) for m in found if m.group(7))
        numbers = [passed, failed]
    else:
        numbers = [int(n) for n in found[-1].groups() if n is not None]
        failed = sum(int(found[-1].group(g) or 0) for g in FAILURE_GROUPS)
    kept = all(re.search(rf"(?<![\d.]){n}(?![\d.])", fact) for n in numbers)
    verdict = success is None or success == (failed == 0)
    tally.test_runs_kept += kept and verdict
    if not (kept and verdict):
        tally.note(
            "test run without its summary or verdict",
            f"{call.get('query')}: {found[-1].group(0)} → {fact} (success={success})",
        )


# --- one session ------------------------------------------------------------------------


def measure_session(client, session, tally: Tally) -> dict:
    from memoryapp.core.models import ContextItem, Finding, Session, ToolCall

    key = session.key
    client.put_session(
        key, metadata=session.metadata, **({"goal": session.goal} if session.goal else {})
    )
    made: set[str] = set()
    calls_in_order: list[dict] = []
    edited_since_read: dict[str, bool] = {}
    read_once: set[str] = set()
    for turn in session.turns:
        for call in turn.get("tool_calls") or []:
            tool, query = call["tool"], call.get("query", "")
            query_text = query if isinstance(query, str) else json.dumps(query)
            name = tool.casefold()
            same = same_call_key(tool, query)
            answer = client.check_finding(key, tool, query)
            if same not in made:
                tally.first_time_checks += 1
                if answer["known"]:
                    tally.false_known_first += 1
                    tally.note(
                        "known before it was ever made",
                        f"{tool} {query_text[:120]} → {answer['finding']['fact']}",
                    )
            path = path_of(query)
            if name in READ_TOOLS or (name == "str_replace_editor" and '"view"' in query_text):
                if path in read_once and edited_since_read.get(path):
                    tally.rereads_after_edit += 1
                    tally.flagged_stale += bool(answer.get("stale"))
                    tally.stale_known += bool(answer.get("known"))
                read_once.add(path)
                edited_since_read[path] = False
            elif (
                (name in EDIT_TOOLS or name == "str_replace_editor")
                and path
                and call.get("success") is not False
            ):
                edited_since_read[path] = True
            made.add(same)
            calls_in_order.append({**call, "query": query_text})
        body = {
            k: v
            for k, v in turn.items()
            if k in ("messages", "usage", "model", "timestamp", "tool_calls")
        }
        client.append_turn(key, **body)

    stored = Session.objects.get(agent__name="quality", key=key)
    rows = list(
        ToolCall.objects.filter(session=stored)
        .select_related("finding")
        .order_by("turn__iteration", "id")
    )
    last_of: dict[str, ToolCall] = {}
    for call, row in zip(calls_in_order, rows, strict=False):
        last_of[same_call_key(call["tool"], call["query"])] = row
        fact = row.fact
        name = call["tool"].casefold()
        if row.kind == "read" and (name in READ_TOOLS or name == "str_replace_editor"):
            check_read(tally, call, fact)
        elif row.kind == "search" and name in SEARCH_TOOLS:
            check_search(tally, call, fact)
        elif row.kind == "shell" and name in SHELL_TOOLS:
            check_shell(tally, call, fact, row.fact_success)
    for row in last_of.values():
        tally.distinct_calls += 1
        finding = row.finding
        if finding is None or (finding.source == "extracted" and finding.fact != row.fact):
            tally.calls_without_finding += 1
            tally.note(
                "call without its own finding",
                f"{row.tool} {row.query[:100]} → {finding.fact if finding else None}",
            )
    for row in rows:
        lookalike_tool, lookalike_query = look_alike(row.tool, row.query)
        if same_call_key(lookalike_tool, lookalike_query) in made:
            continue
        tally.look_alikes += 1
        if client.check_finding(key, lookalike_tool, lookalike_query)["known"]:
            tally.false_known_look_alike += 1
            tally.note("look-alike known", f"{lookalike_tool} {lookalike_query[:120]}")
    tally.sessions += 1
    items = ContextItem.objects.filter(session=stored).order_by("key")
    return {
        item.key: {
            "value": item.value,
            "confidence": item.confidence,
            "evidence": "; ".join(
                f"turn {e.get('turn')}: {e.get('what')}" for e in (item.evidence or [])[-2:]
            ),
        }
        for item in items
    } | {"_findings": Finding.objects.filter(session=stored).count(), "_calls": len(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--examples", action="store_true", help="print examples of misses")
    options = parser.parse_args(argv)
    roots = [SHARED if SHARED.is_dir() else ROOT / "demo" / "transcripts", *options.folders]

    with tempfile.TemporaryDirectory(prefix="memoryapp-quality-") as var_dir:
        setup_django(var_dir)
        import httpx
        from django.core.wsgi import get_wsgi_application

        from agents.client import MemoryClient
        from agents.importers import load_path
        from memoryapp.core.models import Agent, ApiKey

        agent = Agent.objects.create(name="quality", ttl_seconds=30 * 24 * 3600)
        _, raw_key = ApiKey.issue(agent)
        expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
        per_source: dict[str, Tally] = defaultdict(Tally)
        contexts: list[tuple[str, str, dict]] = []
        transport = httpx.WSGITransport(app=get_wsgi_application())
        with MemoryClient("http://localhost", raw_key, transport=transport) as client:
            for index, root in enumerate(roots):
                for session in load_path(root):
                    if not session.turns:
                        continue
                    source = str(session.metadata.get("format") or "other")
                    if index:  # a folder given on the command line
                        source = f"{root.name}/{source}"
                    context = measure_session(client, session, per_source[source])
                    contexts.append((source, session.key, context))
    report(per_source, contexts, expected, options.examples)
    return 0


def report(per_source: dict[str, Tally], contexts, expected: dict, examples: bool) -> None:
    overall = Tally()
    for tally in per_source.values():
        overall.add(tally)
    rows = [("overall", overall), *sorted(per_source.items())]
    header = (
        "| source | sessions | reads naming definitions | searches with the right count | "
        "test runs keeping their summary | distinct calls without their own finding | "
        "false known, first-time calls | false known, look-alikes | "
        "re-reads after an edit flagged stale |"
    )
    print(header)
    print("|" + "---|" * 9)
    for name, t in rows:
        print(
            f"| {name} | {t.sessions} | {share(t.reads_named, t.reads)} | "
            f"{share(t.searches_right, t.searches)} | {share(t.test_runs_kept, t.test_runs)} | "
            f"{t.calls_without_finding} of {t.distinct_calls} | "
            f"{share(t.false_known_first, t.first_time_checks)} | "
            f"{share(t.false_known_look_alike, t.look_alikes)} | "
            f"{share(t.flagged_stale, t.rereads_after_edit)} |"
        )
    print()
    print("Working context inferred (value, confidence, the latest evidence):")
    right = wrong = 0
    for source, key, context in contexts:
        items = {k: v for k, v in context.items() if not k.startswith("_")}
        shown = "; ".join(
            f"{k} = {json.dumps(v['value'])[:70]} ({v['confidence']:.2f}, {v['evidence']})"
            for k, v in items.items()
        )
        verdicts = ""
        if key in expected:
            marks = []
            for name, value in expected[key].items():
                got = items.get(name, {}).get("value")
                ok = got is not None and str(value).casefold() in str(got).casefold()
                right += ok
                wrong += not ok
                marks.append(f"{name} {'✓' if ok else '✗ (expected ' + repr(value) + ')'}")
            verdicts = " — " + ", ".join(marks)
        size = f"{context['_calls']} calls, {context['_findings']} findings"
        print(f"- {source}/{key} [{size}]: {shown or '(none)'}{verdicts}")
    if right + wrong:
        print(f"\nExpected working-context values right: {right} of {right + wrong}")
    if examples:
        print("\nExamples of misses:")
        for kind, items in overall.examples.items():
            for text in items:
                print(f"- {kind}: {text}")


if __name__ == "__main__":
    sys.exit(main())
