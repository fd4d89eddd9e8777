"""The prompt's findings by usefulness: folded, then ordered so that the budget cuts what
says least (memoryapp.lib.usefulness), and what the context answers with them."""

from datetime import timedelta

from django.utils import timezone

from memoryapp.core.context import assemble_context
from memoryapp.core.models import ContextItem, Finding, Session
from memoryapp.lib.extraction import kinds
from memoryapp.lib.extraction.kinds import equivalent_command
from memoryapp.lib.usefulness import Candidate, by_usefulness


def shell(command, fact, success=True):
    return Candidate(kinds.SHELL, "Bash", command, fact, success=success)


def test_a_command_run_again_shows_only_its_latest_result():
    items = [  # newest first
        shell("cargo test 2>&1 | tail -20", "ok: 34 passed, 0 failed"),
        shell("cargo build", "ok: built"),
        shell("cargo  test", "exit 101: 2 failed", success=False),
    ]
    picks = by_usefulness(items)
    assert [(p.index, p.earlier) for p in picks] == [(0, 1), (1, 0)]
    assert equivalent_command("cargo test 2>&1 | tail -n 5") == "cargo test"
    assert equivalent_command("cd assets && node build.js") == "node assets/build.js"
    assert equivalent_command("git add -f .beads/x.db") == "git add .beads/x.db"
    assert equivalent_command("pytest -k upload") != equivalent_command("pytest -k resume")


def test_todo_snapshots_fold_into_the_latest_and_come_last():
    todo = [Candidate(kinds.BOOKKEEPING, "TodoWrite", "", f"{n} todos") for n in (3, 2, 1)]
    read = Candidate(kinds.READ, "Read", "", "12 lines; defines main", "/r/app.py")
    picks = by_usefulness([*todo, read])
    assert [(p.index, p.earlier) for p in picks] == [(3, 0), (0, 2)]


def test_edits_of_one_file_are_one_line_and_other_files_stay():
    items = [
        Candidate(kinds.EDIT, "Edit", "", "edited a.py (+1/−1 lines)", "/r/a.py"),
        Candidate(kinds.EDIT, "Edit", "", "edited b.py (+2/−0 lines)", "/r/b.py"),
        Candidate(kinds.EDIT, "Write", "", "created a.py (9 lines)", "/r/a.py"),
    ]
    assert [(p.index, p.earlier) for p in by_usefulness(items)] == [(0, 1), (1, 0)]


def test_definitions_of_active_files_before_other_reads_and_sizes_last():
    size_only = Candidate(kinds.READ, "Read", "", "29 lines", "/r/config/dev.exs")
    other = Candidate(kinds.READ, "Read", "", "40 lines; defines Other", "/r/lib/other.ex")
    active = Candidate(kinds.READ, "Read", "", "300 lines; defines Live.mount/3", "/r/lib/live.ex")
    stale = Candidate(kinds.READ, "Read", "", "9 lines; defines X", "/r/x.ex", stale=True)
    order = [p.index for p in by_usefulness([size_only, stale, other, active], ["lib/live.ex"])]
    assert order == [3, 2, 0, 1]


def test_a_failed_command_is_an_open_problem_and_comes_first():
    items = [shell("ls", "ok: 3 files"), shell("node build.js", "exit 1: Could not resolve", False)]
    assert [p.index for p in by_usefulness(items)] == [1, 0]


def _finding(session, minutes_ago, **fields):
    # Each its own call (the identity "already known?" looks calls up by).
    finding = Finding.objects.create(session=session, identity=f"call {minutes_ago}", **fields)
    Finding.objects.filter(pk=finding.pk).update(
        updated_at=timezone.now() - timedelta(minutes=minutes_ago)
    )
    return finding


def test_the_context_folds_findings_and_a_tight_budget_cuts_what_says_least(agent):
    session = Session.objects.create(
        agent=agent, key="s", expires_at=timezone.now() + timedelta(days=1)
    )
    ContextItem.objects.create(session=session, key="active_file", value="lib/live.ex")
    for n in range(5):
        _finding(session, 60 - n, tool="TodoWrite", kind=kinds.BOOKKEEPING, fact=f"{n} todos")
    _finding(
        session,
        50,
        tool="Bash",
        kind=kinds.SHELL,
        query="mix test",
        fact="exit 1: 2 failures",
        success=False,
    )
    _finding(
        session,
        40,
        tool="Bash",
        kind=kinds.SHELL,
        query="mix test 2>&1",
        fact="ok: 16 tests, 0 failures",
    )
    live = "/repo/lib/live.ex: defines Live.mount/3, Live.handle_event/3, Live.render/1"
    _finding(
        session,
        30,
        tool="Read",
        kind=kinds.READ,
        file_path="/repo/lib/live.ex",
        fact="300 lines; defines Live.mount/3, Live.handle_event/3, Live.render/1",
    )
    for n in range(12):
        _finding(
            session,
            20 - n,
            tool="Read",
            kind=kinds.READ,
            file_path=f"/repo/config/c{n}.exs",
            fact=f"{29 + n} lines",
        )

    roomy = assemble_context(session, token_budget=32_000, record_access=False)
    prompt = roomy["prompt"]
    assert "4 todos (the latest of 5 updates)" in prompt and "0 todos" not in prompt
    assert "16 tests, 0 failures (the latest of 2 runs)" in prompt and "2 failures" not in prompt
    assert roomy["cut"]["folded_findings"] == 5  # four older todo lists and the failed run
    assert [f["fact"] for f in roomy["findings"]][0].startswith("300 lines; defines Live")

    # A budget with room for a few lines: the definitions stay, sizes of config files go.
    tight = assemble_context(session, token_budget=1_200, record_access=False)
    assert live.split(": ", 1)[1] in tight["prompt"]
    assert "config/c0.exs" not in tight["prompt"]
    assert tight["cut"]["findings"] > 0


def test_related_names_a_narrower_or_wider_search_the_same_file_and_a_similar_query():
    from memoryapp.lib.related import Call, related

    earlier = [
        Call(kinds.SEARCH, "VectorStore interface"),
        Call(kinds.READ, "/r/a.py (offset 1, limit 9)", "/r/a.py"),
        Call(kinds.SEARCH, "LoginForm"),
        Call(kinds.WEB_SEARCH, "django psycopg pool settings"),
    ]
    assert [(r.index, r.why) for r in related(Call(kinds.SEARCH, "VectorStore"), earlier)] == [
        (0, "an earlier search for VectorStore interface, which contains this one's pattern")
    ]
    assert [r.index for r in related(Call(kinds.READ, "/r/a.py", "/r/a.py"), earlier)] == [1]
    similar = related(Call(kinds.WEB_SEARCH, "psycopg pool in django"), earlier)
    assert [(r.index, r.why) for r in similar] == [(3, "a similar query: psycopg, pool, django")]
    assert related(Call(kinds.SEARCH, "payments"), earlier) == []
