"""Dashboard views: permissions, htmx and full-page answers, query counts that do not grow
with the data, escaping of agent text, live polling."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.core.conversation import MessageInput, ToolCallInput, TurnInput, append_turn
from memoryapp.core.models import Agent, ExtractionJob, Finding, Session
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def agent(db):
    return Agent.objects.create(name="coder")


@pytest.fixture
def viewer(agent):
    return logged_in_member("viewer", agent, "vera")


@pytest.fixture
def outsider(agent):
    other = Agent.objects.create(name="other")
    return logged_in_member("staff", other, "otto")


def fill(agent, key, pairs, **extra):
    for i in range(pairs):
        append_turn(
            agent,
            key,
            TurnInput(
                [MessageInput("user", f"question {i}"), MessageInput("assistant", f"answer {i}")],
                tool_calls=[ToolCallInput("grep", f"q{i}", "src/a.py:1: x", True)],
                **extra,
            ),
        )
    return Session.objects.get(agent=agent, key=key)


def test_login_required(agent):
    for url in ("/", "/agents/coder/", "/agents/coder/sessions/s/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert Client().get("/accounts/login/").status_code == 200


def test_overview_lists_only_the_users_agents(agent, viewer, outsider):
    fill(agent, "s1", 2)
    page = viewer.get("/").content.decode()
    assert "coder" in page and "other" not in page
    assert "otto" not in page
    assert "other" in outsider.get("/").content.decode()


def test_overview_counts(agent, viewer):
    fill(agent, "live", 3)
    old = fill(agent, "old", 1)
    Session.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    ExtractionJob.objects.filter(session=old).update(status="failed", last_error="boom")
    response = viewer.get("/")
    row = response.context["agents"][0]
    assert (row.active_sessions, row.expired_sessions, row.messages) == (1, 1, 8)
    assert row.tokens_24h > 0 and row.extraction_errors == 1


def test_another_users_agent_is_404(agent, outsider):
    fill(agent, "s1", 1)
    for url in (
        "/agents/coder/",
        "/agents/coder/sessions/s1/",
        "/agents/coder/sessions/s1/older/?before=2",
        "/agents/coder/sessions/s1/live/?after_seq=0",
    ):
        assert outsider.get(url).status_code == 404, url
    assert outsider.get("/agents/nope/").status_code == 404


def test_agent_page_filters_and_paginates(agent, viewer):
    for i in range(3):
        fill(agent, f"s{i}", 1)
    old = fill(agent, "gone", 1)
    Session.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    keys = lambda **q: [s.key for s in viewer.get("/agents/coder/", q).context["sessions"]]  # noqa: E731
    assert keys() == ["s2", "s1", "s0"]
    assert keys(status="expired") == ["gone"]
    assert keys(status="all", q="s1") == ["s1"]
    ExtractionJob.objects.filter(session__key="s0").update(status="failed")
    assert keys(status="errors") == ["s0"]


def test_agent_page_query_count_is_the_same_for_n_and_2n_sessions(agent, viewer, monkeypatch):
    monkeypatch.setattr("memoryapp.dashboard.views.PAGE", 5)

    def queries(n):
        for i in range(n):
            Session.objects.create(
                agent=agent, key=f"k{n}-{i}", expires_at=timezone.now() + timedelta(hours=1)
            )
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get("/agents/coder/", {"status": "all"}).status_code == 200
        return len(captured)

    assert queries(3) == queries(6)


def test_more_sessions_via_htmx_is_a_fragment(agent, viewer, monkeypatch):
    monkeypatch.setattr("memoryapp.dashboard.views.PAGE", 2)
    for i in range(5):
        Session.objects.create(
            agent=agent, key=f"k{i}", expires_at=timezone.now() + timedelta(hours=1)
        )
    page = viewer.get("/agents/coder/")
    cursor = page.context["next_cursor"]
    assert cursor and f'href="?status=active&amp;q=&amp;cursor={cursor}"' in page.content.decode()
    fragment = viewer.get("/agents/coder/", {"cursor": cursor}, headers={"HX-Request": "true"})
    html = fragment.content.decode()
    assert "<html" not in html and "k2" in html and "k1" in html
    full = viewer.get("/agents/coder/", {"cursor": cursor})
    assert "<html" in full.content.decode()  # works without JavaScript


def test_session_page_shows_what_the_agent_restores(agent, viewer):
    agent.max_messages = 4
    agent.save()
    session = fill(agent, "s1", 5)
    Finding.objects.create(
        session=session, tool="grep", query="q4", fact="3 matches in src/", step=5
    )
    response = viewer.get("/agents/coder/sessions/s1/")
    assert response.status_code == 200
    html = response.content.decode()
    assert [r["seq"] for r in response.context["rows"]] == [7, 8, 9, 10]
    assert "6 messages" in html and "pruned from the context" in html
    assert 'href="/agents/coder/sessions/s1/older/?before=7"' in html
    assert "Token budget" in html and "<meter" in html
    assert "tool <strong>grep</strong>" in html  # tool calls next to their turn
    assert "3 matches in src/" in html


def test_session_page_escapes_agent_text(agent, viewer):
    key = '<img src=x onerror=alert(1)>"k'  # session keys cannot hold "/"
    append_turn(
        agent,
        key,
        TurnInput(
            [MessageInput("user", XSS), MessageInput("assistant", XSS, name="bot")],
            tool_calls=[ToolCallInput(XSS, XSS, XSS, True)],
            model=XSS,
        ),
    )
    session = Session.objects.get()
    session.goal = XSS
    session.save()
    from urllib.parse import quote

    response = viewer.get(f"/agents/coder/sessions/{quote(key, safe='')}/")
    assert response.status_code == 200
    html = response.content.decode()
    # No element from agent text reaches the page: the page itself has no <img> and no
    # inline <script>, so any would be an injection.
    assert "<script>alert" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html


def test_session_page_query_count_is_the_same_for_n_and_2n_messages(agent, viewer):
    agent.max_messages = 10
    agent.save()

    def queries(key, pairs):
        fill(agent, key, pairs)
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get(f"/agents/coder/sessions/{key}/").status_code == 200
        return len(captured)

    assert queries("n", 20) == queries("2n", 40)


def test_older_messages_page_and_fragment(agent, viewer):
    fill(agent, "s1", 30)
    fragment = viewer.get(
        "/agents/coder/sessions/s1/older/?before=60", headers={"HX-Request": "true"}
    )
    html = fragment.content.decode()
    assert "<html" not in html and "msg-59" in html and "msg-10" in html and 'msg-9"' not in html
    assert "?before=10" in html
    page = viewer.get("/agents/coder/sessions/s1/older/?before=60")
    assert "<html" in page.content.decode()
    assert viewer.get("/agents/coder/sessions/s1/older/?before=x").status_code == 404


def test_live_poll_returns_only_what_is_new_with_constant_queries(agent, viewer):
    fill(agent, "s1", 2)
    url = "/agents/coder/sessions/s1/live/"
    nothing = viewer.get(
        url, {"after_seq": 4, "after_finding": 10**9}, headers={"HX-Request": "true"}
    )
    assert "msg-" not in nothing.content.decode()
    fill(agent, "s1", 3)
    with CaptureQueriesContext(connection) as captured:
        response = viewer.get(
            url, {"after_seq": 4, "after_finding": 0}, headers={"HX-Request": "true"}
        )
    html = response.content.decode()
    assert "msg-5" in html and "msg-10" in html and 'msg-4"' not in html
    assert "after_seq=10" in html  # the next poll asks only for newer messages
    first = len(captured)
    fill(agent, "s1", 20)
    with CaptureQueriesContext(connection) as captured:
        viewer.get(url, {"after_seq": 4, "after_finding": 0}, headers={"HX-Request": "true"})
    assert len(captured) == first


def test_polling_stops_when_the_session_expired(agent, viewer):
    session = fill(agent, "s1", 1)
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = viewer.get(
        "/agents/coder/sessions/s1/live/?after_seq=0", headers={"HX-Request": "true"}
    )
    assert response.status_code == 286  # htmx's "stop polling"


def test_pages_send_a_strict_content_security_policy(agent, viewer):
    policy = viewer.get("/").headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "object-src 'none'" in policy
    html = viewer.get("/").content.decode()
    assert "<script>" not in html  # no inline script anywhere
    assert 'src="/static/django_htmx/htmx-2.min.js' in html or "htmx" in html


def test_search_page_highlights_and_escapes(agent, viewer, outsider):
    append_turn(
        agent, "s1", TurnInput([MessageInput("user", "the <b>parser</b> crashes on unicode")])
    )
    page = viewer.get("/agents/coder/search/", {"q": "parser unicode"})
    html = page.content.decode()
    assert "<mark>parser</mark>" in html and "<mark>unicode</mark>" in html
    # SQLite's snippet keeps the tags (escaped here); PostgreSQL's headline drops them.
    assert "<b>" not in html
    assert 'href="/agents/coder/sessions/s1/?at=1#msg-1"' in html
    fragment = viewer.get("/agents/coder/search/", {"q": "parser"}, headers={"HX-Request": "true"})
    assert (
        "<html" not in fragment.content.decode()
        and "<mark>parser</mark>" in fragment.content.decode()
    )
    assert viewer.get("/agents/coder/search/", {"q": "nothing-like-this"}).context["hits"] == []
    assert outsider.get("/agents/coder/search/", {"q": "parser"}).status_code == 404


def test_live_poll_sends_changed_working_context(agent, viewer):
    from memoryapp.core.models import ContextItem

    session = fill(agent, "s1", 1)
    url = "/agents/coder/sessions/s1/live/"
    quiet = viewer.get(url, {"after_seq": 2, "items_since": 0}, headers={"HX-Request": "true"})
    assert 'id="working-context"' not in quiet.content.decode()
    ContextItem.objects.create(session=session, key="active_file", value="lib/app.ex")
    html = viewer.get(
        url, {"after_seq": 2, "items_since": 0}, headers={"HX-Request": "true"}
    ).content.decode()
    assert 'id="working-context" aria-live="polite" hx-swap-oob="true"' in html
    assert "lib/app.ex" in html
    since = html.split("items_since=")[1].split("&")[0]
    again = viewer.get(url, {"after_seq": 2, "items_since": since}, headers={"HX-Request": "true"})
    assert again.status_code == 200 and 'id="working-context"' not in again.content.decode()


def test_static_files_are_served_by_the_app_itself(settings):
    # Tests run with DEBUG off, as production does: no runserver static view here.
    assert settings.DEBUG is False
    css = Client().get("/static/memoryapp.css")
    assert css.status_code == 200 and b"--accent" in b"".join(css.streaming_content)
    htmx = Client().get("/static/django_htmx/htmx-2.min.js")
    assert htmx.status_code == 200
