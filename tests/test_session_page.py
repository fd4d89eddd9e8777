"""The session page's parts one by one (budget for a typed budget, pinned system messages,
summary, grouped findings, turns chart, prompt), CSRF on every write, links that work
without JavaScript, and objects reached through another agent's URL."""

import re
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from django.utils import timezone
from django.utils.html import escape

from memoryapp.core.context import assemble_context
from memoryapp.core.conversation import MessageInput, ToolCallInput, TurnInput, append_turn
from memoryapp.core.models import (
    Agent,
    ApiKey,
    ContextItem,
    Finding,
    Memory,
    MemoryEvent,
    Session,
    Subtask,
)
from memoryapp.core.summaries import summarize_pruned
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}


@pytest.fixture
def agent(db):
    return Agent.objects.create(name="coder", max_messages=6)


@pytest.fixture
def session(agent):
    append_turn(agent, "s1", TurnInput([MessageInput("system", "You are a careful coder.")]))
    for i in range(10):
        append_turn(
            agent,
            "s1",
            TurnInput(
                [
                    MessageInput("user", f"question number {i} " + "word " * 30),
                    MessageInput("assistant", f"answer number {i} " + "word " * 30),
                ],
                input_tokens=100 * (i + 1),
                output_tokens=10 * (i + 1),
                tool_calls=[ToolCallInput("grep", f"q{i}", "src/a.py:1: x", True)],
            ),
        )
    return Session.objects.get(agent=agent, key="s1")


@pytest.fixture
def viewer(agent):
    return logged_in_member("viewer", agent, "vera")


def test_budget_for_a_typed_budget_shows_allocation_use_and_cuts(session, viewer):
    full = viewer.get("/agents/coder/sessions/s1/")
    assert full.context["typed_budget"] is None
    assert full.context["budget_total"] == session.agent.token_budget
    small = viewer.get("/agents/coder/sessions/s1/", {"budget": "300"}, headers=HX)
    html = small.content.decode()
    assert "<html" not in html and "Token budget" in html  # only the budget card
    expected = assemble_context(session, token_budget=300, record_access=False)
    assert small.context["budget_total"] == 300
    for bar in small.context["bars"]:
        assert bar["used"] <= bar["budget"]
    assert [b["budget"] for b in small.context["bars"]] == [
        expected["budget"][s] for s in ("system", "conversation", "working", "long_term")
    ]
    cut = expected["cut"]
    # 21 messages, the limit 6 with one system message: 15 beyond it.
    assert cut["messages"] > 0 and cut["messages_over_limit"] == session.message_count - 6 == 15
    assert f"Left out: {cut['messages']} messages ({cut['message_tokens']} tokens)" in html
    # A smaller budget leaves out more than the limit does: the page says which is which.
    tight = viewer.get("/agents/coder/sessions/s1/", {"budget": "120"}, headers=HX)
    cut = assemble_context(session, token_budget=120, record_access=False)["cut"]
    assert cut["messages"] > cut["messages_over_limit"] == 15
    assert (
        f": 15 beyond the 6-message limit, {cut['messages'] - 15} to fit the budget;"
        in tight.content.decode()
    )
    assert 'value="300"' in html
    # Without JavaScript the same form reloads the whole page with the typed budget.
    page = viewer.get("/agents/coder/sessions/s1/", {"budget": "300"})
    assert "<html" in page.content.decode() and page.context["budget_total"] == 300
    # Nonsense is ignored, not an error; huge numbers are capped.
    assert viewer.get("/agents/coder/sessions/s1/", {"budget": "x"}).context["typed_budget"] is None
    assert (
        viewer.get("/agents/coder/sessions/s1/", {"budget": "10" * 20}).context["typed_budget"]
        == 10_000_000
    )


def test_messages_the_limit_leaves_out_are_not_said_to_be_cut_to_fit(session, viewer):
    """With the agent's default budget nothing is cut for tokens: the 15 messages left
    out are the 6-message limit's, and the page says so (it said "Cut to fit")."""
    html = viewer.get("/agents/coder/sessions/s1/").content.decode()
    cut = assemble_context(session, record_access=False)["cut"]
    assert cut["messages"] == cut["messages_over_limit"] == 15
    assert "Left out: 15 messages" in html and ": 15 beyond the 6-message limit;" in html
    assert "to fit the budget;" not in html


def test_system_messages_are_pinned_and_the_summary_is_shown(session, viewer):
    history_cut = session.message_count - 1 - 5  # 6 kept: the system message and 5 newest
    summarize_pruned(session, pruned_through=history_cut + 1)
    response = viewer.get("/agents/coder/sessions/s1/")
    rows = response.context["rows"]
    assert rows[0]["role"] == "system" and rows[0]["seq"] == 1
    assert [r["seq"] for r in rows[1:]] == list(range(17, 22))
    html = response.content.decode()
    assert "Summary of pruned history" in html
    session.refresh_from_db()
    assert session.summary and session.summary.splitlines()[0] in html.replace("&#x27;", "'")
    # The marker sits between the pinned system message and the first kept message.
    assert html.index("msg-1") < html.index('id="pruned-marker"') < html.index("msg-17")


def test_findings_are_grouped_and_goal_subtasks_context_shown(session, viewer):
    Finding.objects.create(session=session, tool="read_file", query="a.py", fact="defines X")
    Finding.objects.create(session=session, tool="grep", query="X", fact="3 uses of X")
    Finding.objects.create(session=session, tool="run_tests", query="", fact="2 failures")
    session.goal = "Fix the parser"
    session.save()
    Subtask.objects.create(session=session, title="write a test", status="done")
    ContextItem.objects.create(session=session, key="active_file", value="src/parser.py")
    response = viewer.get("/agents/coder/sessions/s1/")
    groups = {g: [f.fact for f in items] for g, items in response.context["findings_grouped"]}
    assert groups["Files Already Read"] == ["defines X"]
    assert groups["Previous Search Results"] == ["3 uses of X"]
    assert groups["Other Findings"] == ["2 failures"]
    html = response.content.decode()
    assert (
        html.index("<h3>Files Already Read</h3>")
        < html.index("defines X")
        < html.index("<h3>Previous Search Results</h3>")
    )
    assert "Fix the parser" in html and "write a test" in html and "src/parser.py" in html


def test_turns_table_and_chart_show_tokens_per_iteration(session, viewer):
    response = viewer.get("/agents/coder/sessions/s1/")
    chart = response.context["chart"]
    turns = response.context["turn_rows"]
    assert [t.iteration for t in turns] == list(range(11, 0, -1))  # newest first
    html = response.content.decode()
    assert html.count('<rect class="in"') == 11 and html.count('<rect class="out"') == 11
    # The tallest bar is the largest count; the others scale to it.
    last = chart.columns[-1]
    assert last.label == "#11" and last.bars[0].value == 1000
    assert last.bars[0].height == chart.plot_height
    assert chart.columns[-2].bars[0].height == 0.9 * chart.plot_height
    assert "<title>#11: " in html and "(1,000 input, " in html
    assert '<td class="num">1,000</td>' in html


def test_the_assembled_prompt_is_shown_as_the_agent_gets_it(session, viewer):
    # A memory the session's goal bears on: one that does not is not injected.
    Session.objects.filter(pk=session.pk).update(goal="Indent the module: always tabs, not spaces")
    session.refresh_from_db()
    Memory.remember(
        session.agent,
        "Tabs, not spaces <always>",
        memory_type="convention",
        confidence=0.9,
        actor="agent:coder",
    )
    response = viewer.get("/agents/coder/sessions/s1/")
    prompt = response.context["prompt"]
    assert prompt == assemble_context(session, record_access=False)["prompt"]
    assert "Tabs, not spaces" in prompt
    assert escape(prompt) in response.content.decode()


# --- CSRF on every write -------------------------------------------------------------


def test_every_write_needs_the_csrf_token_and_htmx_sends_it(agent, session):
    memory = Memory.remember(
        agent, "The API is v1", memory_type="fact", confidence=0.8, actor="agent:coder"
    )[0]
    event = MemoryEvent.objects.filter(target_id=memory.pk).first()
    key = ApiKey.issue(agent, name="k")[0]
    client = logged_in_member("staff", agent, "sam", staff=True, csrf_checks=True)
    writes = [
        ("/cleanup/run/", {"dry_run": "1"}),
        ("/cleanup/extend/", {"session": str(session.pk), "seconds": "3600"}),
        ("/agents/coder/settings/", {"ttl_seconds": "60"}),
        ("/agents/coder/keys/", {"name": "new"}),
        (f"/agents/coder/keys/{key.pk}/revoke/", {}),
        (f"/agents/coder/memories/{memory.pk}/archive/", {}),
        (
            f"/agents/coder/items/memory/{memory.pk}/edit/",
            {"content": "v2", "memory_type": "fact", "confidence": "1"},
        ),
        (f"/agents/coder/items/memory/{memory.pk}/revert/{event.pk}/", {}),
    ]
    before = (
        Memory.objects.count(),
        ApiKey.objects.count(),
        MemoryEvent.objects.count(),
        Session.objects.get(pk=session.pk).expires_at,
    )
    for url, data in writes:
        for headers in ({}, HX):
            response = client.post(url, data, headers=headers)
            assert response.status_code == 403, url
    key.refresh_from_db()
    memory.refresh_from_db()
    assert key.revoked_at is None and memory.status == "active"
    assert before == (
        Memory.objects.count(),
        ApiKey.objects.count(),
        MemoryEvent.objects.count(),
        Session.objects.get(pk=session.pk).expires_at,
    )
    # The page gives htmx the token in a header on <body>; with it the write goes through.
    html = client.get("/agents/coder/memories/").content.decode()
    token = re.search(r'hx-headers=\'\{"X-CSRFToken": "([^"]+)"\}\'', html).group(1)
    response = client.post(
        f"/agents/coder/memories/{memory.pk}/archive/", headers={**HX, "X-CSRFToken": token}
    )
    assert response.status_code == 200
    memory.refresh_from_db()
    assert memory.status == "archived"


# --- without JavaScript ---------------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "hx-get" in attrs or "hx-post" in attrs:
            self.found.append((tag, attrs))


# Elements that poll, or refresh after an edit on the page: without JavaScript a reload
# shows the same, so no link is needed.
POLLERS = {"live", "progress", "refresh-on-edit"}


def test_every_htmx_request_has_a_plain_html_fallback(agent, session, monkeypatch):
    from memoryapp.dashboard import views

    monkeypatch.setattr(views, "PAGE", 1)  # so that pages have a "more" link
    append_turn(agent, "s2", TurnInput([MessageInput("user", "another answer")]))
    memory = Memory.remember(
        agent, "The API is v1", memory_type="fact", confidence=0.8, actor="agent:coder"
    )[0]
    Memory.remember(agent, "The API is v2", memory_type="fact", confidence=0.8, actor="agent:coder")
    Finding.objects.create(session=session, tool="grep", query="X", fact="3 uses of X")
    ContextItem.objects.create(session=session, key="k", value="v")
    client = logged_in_member("staff", agent, "sam", staff=True)
    pages = [
        "/",
        "/agents/coder/",
        "/agents/coder/?status=all",
        "/agents/coder/sessions/s1/",
        "/agents/coder/sessions/s1/older/?before=10",
        "/agents/coder/memories/",
        "/agents/coder/memories/?status=all",
        f"/agents/coder/items/memory/{memory.pk}/history/",
        f"/agents/coder/items/memory/{memory.pk}/edit/",
        "/agents/coder/search/?q=answer",
        "/agents/coder/settings/",
        "/cleanup/",
    ]
    found = []
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        parser = _Links()
        parser.feed(response.content.decode())
        for tag, attrs in parser.found:
            found.append((tag, attrs))
            if "hx-get" in attrs:
                target = attrs["hx-get"]
                if tag == "a":
                    assert attrs.get("href") == target, (url, attrs)
                elif tag == "form":
                    # No action: the browser submits to the page itself.
                    action = attrs.get("action") or urlsplit(url).path
                    assert attrs.get("method", "get") == "get" and action == target, (url, attrs)
                else:
                    assert attrs.get("id") in POLLERS, (url, tag, attrs)
            else:
                # A write: a real form posting to the same place.
                assert tag == "form", (url, tag, attrs)
                assert attrs.get("method") == "post" and attrs.get("action") == attrs["hx-post"]
    assert {"a", "form"} <= {tag for tag, _ in found}
    assert any("revert" in attrs.get("hx-post", "") for _, attrs in found)
    assert any("cursor=" in attrs.get("hx-get", "") for _, attrs in found)


# --- another agent's objects ------------------------------------------------------------


def test_objects_of_another_agent_are_404_through_an_agent_the_user_may_edit(agent, session):
    other = Agent.objects.create(name="other")
    theirs = Memory.remember(
        other, "secret plan", memory_type="fact", confidence=0.8, actor="agent:other"
    )[0]
    append_turn(other, "their-session", TurnInput([MessageInput("user", "private")]))
    their_session = Session.objects.get(agent=other)
    their_finding = Finding.objects.create(session=their_session, tool="grep", fact="private")
    their_item = ContextItem.objects.create(session=their_session, key="k", value="private")
    their_event = MemoryEvent.objects.filter(target_id=theirs.pk).first()
    their_key = ApiKey.issue(other, name="theirs")[0]
    client = logged_in_member("staff", agent, "sam")  # staff on coder, nothing on other
    for url in (
        f"/agents/coder/items/memory/{theirs.pk}/edit/",
        f"/agents/coder/items/memory/{theirs.pk}/history/",
        f"/agents/coder/items/finding/{their_finding.pk}/edit/",
        f"/agents/coder/items/context_item/{their_item.pk}/edit/",
        "/agents/coder/sessions/their-session/",
        "/agents/other/sessions/their-session/",
    ):
        assert client.get(url).status_code == 404, url
    for url in (
        f"/agents/coder/memories/{theirs.pk}/archive/",
        f"/agents/coder/items/memory/{theirs.pk}/revert/{their_event.pk}/",
        f"/agents/coder/keys/{their_key.pk}/revoke/",
        f"/agents/coder/items/finding/{their_finding.pk}/edit/",
    ):
        assert client.post(url, {"fact": "mine now"}).status_code == 404, url
    theirs.refresh_from_db()
    their_key.refresh_from_db()
    their_finding.refresh_from_db()
    assert theirs.status == "active" and their_key.revoked_at is None
    assert their_finding.fact == "private"
    # Nor is another agent's text reachable by search.
    hits = client.get("/agents/coder/search/", {"q": "private"}).context["hits"]
    assert hits == []


def test_findings_and_inferred_context_show_where_they_came_from(session, viewer):
    """Provenance: a finding links to the message it came from; an inferred item lists
    its evidence, each piece a link to its message."""
    from memoryapp.core import workers
    from memoryapp.core.models import ExtractionJob

    for job in ExtractionJob.objects.order_by("id"):
        assert workers.run_extraction(job.pk) == "done"
    finding = Finding.objects.get(query="q9")
    assert (finding.turn.iteration, finding.message.seq) == (11, 21)
    task = ContextItem.objects.get(key="current_task")
    assert task.source == "inferred" and task.evidence
    html = viewer.get("/agents/coder/sessions/s1/").content.decode()
    item = html[html.index(f'id="item-finding-{finding.pk}"') :]
    item = item[: item.index("</div>\n</div>") if "</div>\n</div>" in item else 2000]
    assert 'class="meta provenance"' in item and "from turn 11" in item
    assert 'href="/agents/coder/sessions/s1/?at=21#msg-21"' in item
    evidence = html[html.index(f'id="item-context_item-{task.pk}"') :]
    ref = task.evidence[-1]
    assert f'href="/agents/coder/sessions/s1/?at={ref["seq"]}#msg-{ref["seq"]}"' in evidence[:3000]
    assert f"turn {ref['turn']}, message #{ref['seq']}</a>: {ref['what']}" in evidence[:3000]


def test_the_page_shows_the_summary_and_budget_the_agent_would_get(session, viewer, agent):
    """Before the agent ever asked for its context, the page computes the summary, and
    its numbers are the API's for the same session (issue 10)."""
    from django.test import Client

    response = viewer.get("/agents/coder/sessions/s1/")
    page = response.context
    assert page["summary"] is not None and page["summary"]["text"].startswith("Task: ")
    assert "Summary of pruned history" in response.content.decode()
    key = ApiKey.issue(agent)[1]
    api = (
        Client()
        .get("/api/v1/sessions/s1/context", headers={"Authorization": f"Bearer {key}"})
        .json()
    )
    assert {b["label"]: b["used"] for b in page["bars"]} == {
        "System": api["token_counts"]["system"],
        "Conversation": api["token_counts"]["conversation"],
        "Working context": api["token_counts"]["working"],
        "Long-term memory": api["token_counts"]["long_term"],
    }
    assert page["total_tokens"] == api["token_counts"]["total"]
    assert page["summary"]["text"] == api["summary"]["text"]


def _seqs(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'id="msg-(\d+)"', html)]


def test_pruned_history_opens_in_order_hides_again_and_looks_outside(agent, viewer):
    """Issue 10: the marker's link turns into "hide them" (no second insertion), pages of
    older messages land above the newer ones, "older messages" is offered only when there
    are some, and pruned messages are marked as outside the agent's context."""
    append_turn(agent, "p", TurnInput([MessageInput("system", "Be careful.")]))
    for i in range(60):
        append_turn(
            agent,
            "p",
            TurnInput([MessageInput("user", f"q{i}"), MessageInput("assistant", f"a{i}")]),
        )
    # 121 messages: seq 1 is the system prompt, the agent keeps 6 (max_messages).
    page = viewer.get("/agents/coder/sessions/p/").content.decode()
    marker = page[page.index('id="pruned-marker"') :].split("</li>", 1)[0]
    assert ">show them</a>" in marker and 'hx-swap="outerHTML"' in marker
    first_kept = min(s for s in _seqs(page) if s > 1)
    older = f"/agents/coder/sessions/p/older/?before={first_kept}"
    opened = viewer.get(older, headers={**HX, "HX-Target": "pruned-marker"}).content.decode()
    assert 'class="pruned expanded" id="pruned-marker"' in opened
    assert "show them" not in opened and ">hide them</a>" in opened
    assert _seqs(opened) == list(range(first_kept - 50, first_kept))  # one page, in order
    assert opened.index("older messages") < opened.index(f'id="msg-{first_kept - 50}"')
    assert opened.count("pruned · not in the agent's context") == 50
    assert 'class="msg user outside"' in opened
    # The next page replaces the "older messages" link, above what is shown.
    second = viewer.get(
        f"/agents/coder/sessions/p/older/?before={first_kept - 50}", headers=HX
    ).content.decode()
    assert _seqs(second) == list(range(first_kept - 100, first_kept - 50))
    last = viewer.get(
        f"/agents/coder/sessions/p/older/?before={first_kept - 100}", headers=HX
    ).content.decode()
    assert _seqs(last) == list(range(2, first_kept - 100))  # never the pinned system message
    assert "older messages" not in last  # only the system message is older: none offered
    hidden = viewer.get(
        "/agents/coder/sessions/p/", headers={**HX, "HX-Target": "pruned-marker"}
    ).content.decode()
    assert ">show them</a>" in hidden and _seqs(hidden) == []


def test_findings_provenance_costs_the_same_queries_for_n_and_2n_findings(agent, viewer):
    """Each finding shows its turn, message and tool call: they are read with the findings,
    never one query per finding, on the page and in the live poll."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memoryapp.core import workers
    from memoryapp.core.models import ExtractionJob

    def queries(key: str, turns: int) -> list[int]:
        for i in range(turns):
            append_turn(
                agent,
                key,
                TurnInput(
                    [MessageInput("user", f"look for {i}"), MessageInput("assistant", "found")],
                    tool_calls=[ToolCallInput("grep", f"{key}_{i}", "src/a.py:1: x", True)],
                ),
            )
        for job in ExtractionJob.objects.filter(session__key=key).order_by("id"):
            assert workers.run_extraction(job.pk) == "done"
        with_provenance = Finding.objects.filter(
            session__key=key, turn__isnull=False, message__isnull=False, tool_call__isnull=False
        )
        assert with_provenance.count() == turns
        counts = []
        for url, headers in (
            (f"/agents/coder/sessions/{key}/", {}),
            (f"/agents/coder/sessions/{key}/live/?after_seq=0&after_finding=0", HX),
        ):
            with CaptureQueriesContext(connection) as captured:
                html = viewer.get(url, headers=headers).content.decode()
            assert f'call <code class="call">grep {key}_0</code>' in html
            assert f"/agents/coder/sessions/{key}/?at=2#msg-2" in html
            counts.append(len(captured))
        return counts

    assert queries("n", 4) == queries("twice_n", 8)


def test_an_expired_session_says_so_and_staff_can_extend_it_from_its_page(session, viewer):
    """It read "active · … · expired" and "The agent receives" while the API answered 404
    for it, and could be extended only from the cleanup page."""
    session.expires_at = timezone.now() - timedelta(hours=3)
    session.save(update_fields=["expires_at"])
    html = viewer.get("/agents/coder/sessions/s1/").content.decode().replace("\xa0", " ")
    header = html[html.index('id="session-header"') :]
    header = header[: header.index("</p>")]
    assert "active" not in header and "expired 3 hours ago" in header, header
    assert "This session expired 3 hours ago" in html and "answers 404" in html
    assert "The agent receives" not in html and "Were it live, the agent would receive" in html
    assert "cleanup/extend/" not in html  # a viewer cannot extend it
    staff = logged_in_member("viewer", session.agent, "sam", staff=True)
    page = staff.get("/agents/coder/sessions/s1/").content.decode()
    assert 'action="/cleanup/extend/"' in page and f'value="{session.pk}"' in page
    extended = staff.post(
        "/cleanup/extend/",
        {"session": session.pk, "seconds": 86400, "next": "/agents/coder/sessions/s1/"},
    )
    assert extended.status_code == 302 and extended["Location"] == "/agents/coder/sessions/s1/"
    session.refresh_from_db()
    assert not session.is_expired()
    html = staff.get("/agents/coder/sessions/s1/").content.decode()
    assert "This session expired" not in html and "The agent receives" in html
    # Elsewhere is not a place to go back to.
    away = staff.post(
        "/cleanup/extend/", {"session": session.pk, "seconds": 3600, "next": "https://evil/"}
    )
    assert away["Location"] == "/cleanup/"
