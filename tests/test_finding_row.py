"""`{% finding_row %}` (dashboard/templatetags/rows.py) writes a finding of the session
page's lists in Python; `dashboard/memories.html#item` stays the reference. For every
branch of that markup (provenance by turn, message and call or by person, by hand, edited,
failed, stale, truncated, markup in agent text, editor or viewer), the page's row must be
the partial's HTML for the same finding, as the view prepared it."""

import re
from datetime import timedelta

import pytest
from django.template import engines
from django.template.loader import get_template

from memoryapp.core.context import assemble_context
from memoryapp.core.conversation import MessageInput, ToolCallInput, TurnInput, append_turn
from memoryapp.core.models import Agent, Finding, MemoryEvent, Message, Session, ToolCall, Turn
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db

ROW = engines["django"].from_string("{% load rows %}{% finding_row item %}")
PARTIAL = get_template("dashboard/memories.html#item")


def normalized(html: str) -> str:
    """Whitespace between and inside tags is the templates' layout, not the page's."""
    return re.sub(r"\s+", " ", html).strip()


@pytest.fixture
def session(db):
    agent = Agent.objects.create(name="coder")
    append_turn(
        agent,
        "s1",
        TurnInput(
            [MessageInput("user", "find the parser"), MessageInput("assistant", "searching")],
            tool_calls=[
                ToolCallInput("grep", "def parse <b>" + "x" * 108, "src/p.py:1: def parse", True)
            ],
        ),
    )
    session = Session.objects.get(agent=agent, key="s1")
    turn = Turn.objects.get(session=session)
    message = Message.objects.filter(session=session).last()
    call = ToolCall.objects.get(session=session)
    made = [
        # Agent text with markup, a query over 200 characters, every provenance link.
        dict(
            tool="<b>grep</b>",
            query="<script>alert(1)</script>" + "q" * 250,
            fact="parse() is in src/p.py & tested <i>here</i>",
            turn=turn,
            message=message,
            tool_call=call,
        ),
        dict(tool="cat", query="src/a.py", fact="a.py reads config", turn=turn, tool_call=call),
        dict(tool="cat", query="src/b.py", fact="b.py", message=message),
        # A failed read, then an edit of the same file: the read is stale.
        dict(tool="read", kind="read", file_path="src/c.py", step=1, success=False, fact="c"),
        dict(tool="edit", kind="edit", file_path="src/c.py", step=2, fact="c edited"),
        dict(tool="note", source="manual", fact="added by hand, no event"),
        dict(tool="note", source="manual", fact="added by a person"),
        # 300 code points, 150 characters once composed: not truncated.
        dict(tool="grep", query="e\u0301" * 150, fact="combining marks"),
        dict(tool="grep", query="", fact=""),
        # One character over each limit (200 for the query, 120 for the call's).
        dict(tool="grep", query="r" * 201, fact="boundary", tool_call=call),
    ]
    findings = [
        Finding.objects.create(session=session, identity=f"id{i}", **fields)
        for i, fields in enumerate(made)
    ]
    edited = findings[2]
    for added in (findings[1], findings[6]):  # shown "from turn …", and "added by user:alice"
        MemoryEvent.record(added, MemoryEvent.Action.ADD, None, {"fact": added.fact}, "user:alice")
    MemoryEvent.record(
        edited, MemoryEvent.Action.UPDATE, {"fact": "b"}, {"fact": "b.py"}, "user:<bob>"
    )
    MemoryEvent.objects.filter(target_id=edited.pk).update(
        created_at=edited.created_at - timedelta(hours=3)
    )
    return session


@pytest.mark.parametrize("role", ["editor", "viewer"])
def test_each_row_is_the_partials_html(session, role):
    client = logged_in_member(role, session.agent, f"{role}-user")
    response = client.get(f"/agents/{session.agent.name}/sessions/{session.key}/")
    assert response.status_code == 200
    page = normalized(response.content.decode())
    shown = [item for _, items in response.context["findings_grouped"] for item in items]
    assert len(shown) >= 8
    assert any(item.is_stale_read for item in shown)
    assert any(item.edited_by for item in shown) and any(item.added_by for item in shown)
    base = {
        "agent": session.agent,
        "role": role,
        "session": session,
        "kind": "finding",
        "request": response.wsgi_request,
    }
    for item in shown:
        context = {**base, "item": item}
        row = normalized(ROW.render(context, response.wsgi_request))
        assert row == normalized(PARTIAL.render(context, response.wsgi_request))
        assert row in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "added by hand" in page and 'added by <span class="actor">user:alice' in page
    assert ("/edit/" in page) is (role == "editor")


def test_the_live_poll_writes_new_findings_the_same_way(session):
    client = logged_in_member("editor", session.agent, "eddie")
    path = f"/agents/{session.agent.name}/sessions/{session.key}/live/"
    response = client.get(path, {"after_seq": 0, "after_finding": 0}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    new = response.context["new_findings"]
    assert len(new) >= 8
    # Marked as the page marks its rows: whether the agent receives each.
    assert all(item.in_prompt in (True, False) for item in new)
    assert "in the prompt</span>" in response.content.decode()
    answer = normalized(response.content.decode())
    for item in new:
        context = {"agent": session.agent, "role": "editor", "kind": "finding", "item": item}
        assert normalized(PARTIAL.render(context, response.wsgi_request)) in answer


def test_a_stale_read_says_so_wherever_it_is_shown(session):
    """ "edited since read" on the page, in the live poll that brings the finding, and in
    the finding answered alone (after an edit, or its history closed)."""
    read = Finding.objects.get(session=session, kind="read")
    client = logged_in_member("editor", session.agent, "eddie")
    base = f"/agents/{session.agent.name}"
    badge = "edited since read"

    def row(html: str) -> str:
        start = html.index(f'id="item-finding-{read.pk}"')
        return html[start : html.index('class="history-slot"', start)]

    page = client.get(f"{base}/sessions/{session.key}/").content.decode()
    live = client.get(
        f"{base}/sessions/{session.key}/live/",
        {"after_seq": 0, "after_finding": 0},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    alone = client.get(
        f"{base}/items/finding/{read.pk}/edit/", {"display": 1}, HTTP_HX_REQUEST="true"
    ).content.decode()
    for html in (page, live, alone):
        assert badge in row(html)
    fresh = Finding.objects.get(session=session, kind="edit")
    answer = client.get(
        f"{base}/items/finding/{fresh.pk}/edit/", {"display": 1}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert badge not in answer


def test_each_finding_says_whether_the_agent_receives_it(session):
    """All findings rendered alike while the budget said most were cut: each row now says
    whether it is in the prompt, from the context the page assembled (a small typed
    budget here, so some are left out); the Python row and the partial agree on both."""
    client = logged_in_member("viewer", session.agent, "vera")
    response = client.get(f"/agents/{session.agent.name}/sessions/{session.key}/", {"budget": 1000})
    shown = [item for _, items in response.context["findings_grouped"] for item in items]
    received = {f["id"] for f in assemble_context(session, token_budget=1000)["findings"]}
    assert {item.in_prompt for item in shown} == {True, False}
    assert {item.id for item in shown if item.in_prompt} == received
    page = normalized(response.content.decode())
    assert page.count('in-prompt">in the prompt</span>') == len(received)
    assert page.count("not in the prompt</span>") == len(shown) - len(received)
    base = {"agent": session.agent, "role": "viewer", "session": session, "kind": "finding"}
    for item in shown:
        context = {**base, "item": item, "request": response.wsgi_request}
        row = normalized(ROW.render(context, response.wsgi_request))
        assert row == normalized(PARTIAL.render(context, response.wsgi_request))
