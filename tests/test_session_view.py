"""The session page as people read it (issue 10): messages as markdown with their tool
calls and results, what the agent receives labelled with token counts, links that open
pruned messages, the turns table paging back, one assembled context per view, and the
live poll keeping every block current."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryapp.core import context as context_module
from memoryapp.core.context import assemble_context
from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.models import Agent, Memory, Session
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}


@pytest.fixture
def agent(db):
    return Agent.objects.create(name="coder", max_messages=6)


@pytest.fixture
def viewer(agent):
    return logged_in_member("viewer", agent, "vera")


def pairs(agent, key, count, start=0):
    for i in range(start, start + count):
        append_turn(
            agent,
            key,
            TurnInput(
                [MessageInput("user", f"q{i}"), MessageInput("assistant", f"a{i}")],
                input_tokens=10 * (i + 1),
                output_tokens=i + 1,
            ),
        )
    return Session.objects.get(agent=agent, key=key)


def _seqs(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'id="msg-(\d+)"', html)]


def _element(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[html.rindex("<", 0, start) :]


def test_tool_calls_read_as_name_and_arguments_and_results_sit_under_their_call(agent, viewer):
    append_turn(
        agent,
        "s",
        TurnInput(
            [
                MessageInput("user", "Fix the **parser**:\n\n- read it\n- run `pytest`"),
                MessageInput(
                    "assistant",
                    "Reading it.",
                    tool_calls=[
                        {
                            "id": "call_7",
                            "type": "function",
                            "function": {
                                "name": "read_file",
                                "arguments": '{"path": "src/parser.py", "limit": 40}',
                            },
                        }
                    ],
                ),
                MessageInput("tool", "def parse(): <script>x</script>", tool_call_id="call_7"),
            ]
        ),
    )
    html = viewer.get("/agents/coder/sessions/s/").content.decode()
    assert "[{'id'" not in html and "{&#x27;id&#x27;" not in html  # no Python repr
    assistant = _element(html, "msg-2")
    call = assistant[assistant.index('class="call"') :]
    assert "calls <strong>read_file</strong>" in call
    assert "{\n  &quot;path&quot;: &quot;src/parser.py&quot;,\n  &quot;limit&quot;: 40\n}" in call
    # The result is inside the call's box, before the assistant message closes.
    result = call.index('id="msg-3"')
    assert result < call.index("</li>\n</ol>") if "</li>\n</ol>" in call else result > 0
    assert _seqs(html).count(3) == 1
    assert "def parse(): &lt;script&gt;x&lt;/script&gt;" in html
    # Markdown is rendered, and the exact text is one click away.
    user = _element(html, "msg-1")
    assert "Fix the <strong>parser</strong>:" in user and "<li>run <code>pytest</code></li>" in user
    assert '<details class="raw"><summary>raw text</summary>' in user
    assert "Fix the **parser**:" in user


def test_long_messages_start_collapsed_with_a_preview(agent, viewer):
    long = "A long plan. " + "step " * 600
    append_turn(agent, "s", TurnInput([MessageInput("assistant", long)]))
    html = viewer.get("/agents/coder/sessions/s/").content.decode()
    message = _element(html, "msg-1")
    assert '<details class="long"><summary><span class="preview">A long plan. step' in message
    assert "show all (3,013 characters)" in message


def test_the_page_labels_what_the_agent_receives_with_tokens_per_block(agent, viewer):
    append_turn(agent, "s", TurnInput([MessageInput("system", "Be careful.")]))
    session = pairs(agent, "s", 10)
    response = viewer.get("/agents/coder/sessions/s/")
    html = response.content.decode()
    api = assemble_context(session, record_access=False)
    kept = [m for m in api["conversation"] if m["role"] != "system"]
    received = response.context["received"]
    assert [m["seq"] for m in received.kept] == [m["seq"] for m in kept]
    assert received.pruned_count == 21 - len(api["conversation"])
    blocks = _element(html, "received")
    assert '<span class="block pinned">pinned</span> 1 system message · ' in blocks
    assert f"the newest {len(kept)} messages · {sum(m['token_count'] for m in kept)} tokens" in (
        blocks
    )
    assert f"of {received.pruned_count} pruned messages · {received.summary_tokens} tokens" in (
        blocks
    )
    assert received.summary_tokens > 0
    assert "pinned · always in the context" in _element(html, "msg-1")


def test_a_link_to_a_pruned_message_opens_its_page_with_links_both_ways(agent, viewer):
    pairs(agent, "s", 100)  # 200 messages, the newest 6 kept
    html = viewer.get("/agents/coder/sessions/s/?at=40").content.decode()
    marker = _element(html, "pruned-marker")
    assert 'class="pruned expanded"' in marker and ">hide them</a>" in marker
    shown = _seqs(marker.split('id="msg-195"')[0])
    assert 40 in shown and shown == sorted(shown) and len(shown) == 50
    assert f"older/?before={shown[0]}" in marker
    assert f"older/?after={shown[-1]}&amp;until=195" in marker
    newer = viewer.get(
        f"/agents/coder/sessions/s/older/?after={shown[-1]}&until=195", headers=HX
    ).content.decode()
    assert _seqs(newer) == list(range(shown[-1] + 1, shown[-1] + 51))
    last = viewer.get(
        "/agents/coder/sessions/s/older/?after=150&until=195", headers=HX
    ).content.decode()
    assert _seqs(last) == list(range(151, 195)) and "newer pruned messages" not in last
    # A kept message opens nothing: it is already on the page.
    kept = viewer.get("/agents/coder/sessions/s/?at=198").content.decode()
    assert 'class="pruned expanded"' not in kept and 'id="msg-198"' in kept
    assert viewer.get("/agents/coder/sessions/s/?at=x").status_code == 404


def test_the_turns_table_pages_back_through_every_turn_newest_first(agent, viewer):
    pairs(agent, "s", 120)
    page = viewer.get("/agents/coder/sessions/s/")
    assert [t.iteration for t in page.context["turn_rows"]] == list(range(120, 70, -1))
    html = page.content.decode()
    assert 'href="/agents/coder/sessions/s/?turns_before=71#turns"' in html
    second = viewer.get("/agents/coder/sessions/s/?turns_before=71", headers=HX)
    assert "<html" not in second.content.decode()
    assert [t.iteration for t in second.context["turn_rows"]] == list(range(70, 20, -1))
    last = viewer.get("/agents/coder/sessions/s/?turns_before=21", headers=HX)
    assert [t.iteration for t in last.context["turn_rows"]] == list(range(20, 0, -1))
    assert "older turns" not in last.content.decode()
    # Without JavaScript the link opens the whole page at that point.
    plain = viewer.get("/agents/coder/sessions/s/?turns_before=71")
    assert "<html" in plain.content.decode()
    assert plain.context["turn_rows"][0].iteration == 70


def test_the_page_assembles_the_context_once(agent, viewer, monkeypatch):
    pairs(agent, "s", 30)
    calls = []
    original = context_module.restore_history

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(context_module, "restore_history", counting)
    monkeypatch.setattr("memoryapp.core.restore.restore_history", counting)
    assert viewer.get("/agents/coder/sessions/s/").status_code == 200
    assert len(calls) == 1


def _live(viewer, **params):
    return viewer.get("/agents/coder/sessions/s/live/", params, headers=HX)


def _next_params(html: str) -> dict:
    url = re.search(r'id="live" hx-get="[^"?]*\?([^"]*)"', html).group(1)
    return dict(part.split("=", 1) for part in url.replace("&amp;", "&").split("&"))


def test_a_live_poll_after_new_turns_updates_every_block_out_of_band(agent, viewer):
    pairs(agent, "s", 2)  # 4 messages, all kept: no marker yet
    page = viewer.get("/agents/coder/sessions/s/").content.decode()
    assert 'id="pruned-marker"' not in page
    state = _next_params(page)
    assert state["first_kept"] == "1" and state["marker"] == "0"
    quiet = _live(viewer, **state).content.decode()
    assert 'id="session-header"' not in quiet and 'id="budget"' not in quiet
    pairs(agent, "s", 3, start=2)  # 10 messages now; the agent keeps the newest 6
    html = _live(viewer, **state).content.decode()
    header = _element(html, "session-header")
    assert 'hx-swap-oob="true"' in header.split(">")[0] and "10 messages · 5 turns" in header
    for block in ("received", "budget", "prompt", "turn-chart"):
        assert 'hx-swap-oob="true"' in _element(html, block).split(">")[0], block
    assert '<tbody hx-swap-oob="afterbegin:#turn-rows">' in html
    new_rows = html.split('<tbody hx-swap-oob="afterbegin:#turn-rows">')[1].split("</tbody>")[0]
    assert [int(n) for n in re.findall(r'<tr><td class="num">(\d+)</td>', new_rows)] == [5, 4, 3]
    # Messages 1-4 left the agent's context: shown again, dimmed, in place.
    for seq in (1, 2, 3, 4):
        message = _element(html, f"msg-{seq}")
        assert 'class="msg' in message and "outside" in message.split(">")[0]
        assert 'hx-swap-oob="true"' in message.split(">")[0]
    # The marker appears above what was the first message shown.
    assert '<ol hx-swap-oob="beforebegin:#msg-1">' in html
    assert "4 messages (" in _element(html, "pruned-marker")
    state = _next_params(html)
    assert state["marker"] == "1" and state["first_kept"] == "5" and state["after_turn"] == "5"
    # Next time only the count is updated; nothing is re-sent that is already shown.
    pairs(agent, "s", 1, start=5)
    html = _live(viewer, **state).content.decode()
    assert 'id="pruned-marker"' not in html and 'id="pruned-count" hx-swap-oob="true"' in html
    assert "6 messages (" in _element(html, "pruned-count")
    assert sorted(_seqs(html)) == [5, 6, 11, 12]  # left the context (5, 6), new (11, 12)


def test_live_poll_queries_stay_constant_when_many_things_change(agent, viewer):
    pairs(agent, "s", 2)
    state = _next_params(viewer.get("/agents/coder/sessions/s/").content.decode())

    def queries(count, start):
        pairs(agent, "s", count, start=start)
        with CaptureQueriesContext(connection) as captured:
            assert _live(viewer, **state).status_code == 200
        return len(captured)

    queries(3, 2)  # the first roll of the session's summary also looks up its task
    assert queries(5, 5) == queries(10, 10)


def test_an_edit_on_the_page_refreshes_what_depends_on_it(agent, viewer):
    pairs(agent, "s", 2)
    Session.objects.filter(agent=agent, key="s").update(goal="Check that deploys go through CI")
    page = viewer.get("/agents/coder/sessions/s/").content.decode()
    assert 'hx-trigger="memory-changed from:body"' in page
    Memory.remember(
        agent, "Deploys go through CI", memory_type="fact", confidence=0.9, actor="user:vera"
    )
    html = viewer.get("/agents/coder/sessions/s/", {"refresh": "1"}, headers=HX).content.decode()
    assert "<html" not in html
    for block in ("session-header", "received", "budget", "prompt"):
        assert 'hx-swap-oob="true"' in _element(html, block).split(">")[0], block
    assert "Deploys go through CI" in _element(html, "prompt")


@pytest.mark.parametrize("value", ["1e20", "inf", "nan", "-1"])
def test_a_bad_live_position_is_a_404_not_an_error(agent, viewer, value):
    pairs(agent, "s", 1)
    assert _live(viewer, after_seq=0, items_since=value).status_code == 404
    assert _live(viewer, after_seq="³").status_code == 404


def test_the_prompt_reads_as_rendered_markdown_with_the_exact_text_one_click_away(agent, viewer):
    session = pairs(agent, "s", 2)
    Session.objects.filter(pk=session.pk).update(goal="Fix tests/__init__.py")
    session.refresh_from_db()
    Memory.remember(
        agent,
        "# not a heading: tests/__init__.py",
        memory_type="fact",
        confidence=0.9,
        actor="user:vera",
    )
    prompt = assemble_context(session, record_access=False)["prompt"]
    assert "\\# not a heading" in prompt  # escaped for the agent at line start...
    html = _element(viewer.get("/agents/coder/sessions/s/").content.decode(), "prompt")
    rendered = html.split('<details class="raw">')[0]
    assert "# not a heading: tests/__init__.py" in rendered  # ...shown without the backslash
    assert "\\#" not in rendered and "<h1>" not in rendered
    assert "<strong>" in rendered or "<h2>" in rendered  # it is rendered, not raw text
    assert "\\# not a heading" in html.split('<details class="raw">')[1]


def test_times_read_as_rounded_durations(agent, viewer):
    from datetime import timedelta

    from django.utils import timezone

    from memoryapp.dashboard.templatetags.numbers import rounded_duration

    assert rounded_duration(30 * 86400 - 60) == "30\xa0days"
    assert rounded_duration(5400) == "2\xa0hours" and rounded_duration(59.6) == "1\xa0minute"
    session = pairs(agent, "s", 1)
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() + timedelta(days=30))
    header = _element(viewer.get("/agents/coder/sessions/s/").content.decode(), "session-header")
    assert "expires in 30\xa0days" in header and "week" not in header


def test_evidence_links_to_the_message_it_was_seen_in(agent):
    """The first prompt is the user's message, not the assistant's reply after it (the
    review found every piece of evidence pointing at the turn's last message)."""
    from memoryapp.core import workers
    from memoryapp.core.models import ContextItem, ExtractionJob

    append_turn(
        agent,
        "s",
        TurnInput(
            [
                MessageInput("user", "Port the parser to Rust and keep the tests green."),
                MessageInput("assistant", "I'll start with the tokenizer."),
                MessageInput("tool", "ok"),
            ]
        ),
    )
    for job in ExtractionJob.objects.order_by("id"):
        workers.run_extraction(job.pk)
    task = ContextItem.objects.get(key="current_task")
    assert [ref["seq"] for ref in task.evidence] == [1]


def test_error_pages_look_like_the_dashboard_and_lead_back(agent, viewer):
    response = viewer.get("/agents/nobody/")
    html = response.content.decode()
    assert response.status_code == 404
    assert "<title>Not found · memoryapp</title>" in html and 'href="/"' in html
    assert "favicon" in html  # base.html: styled, with the icon, not a bare page
    forbidden = viewer.get("/agents/coder/settings/")
    assert forbidden.status_code == 403 and "Not allowed · memoryapp" in forbidden.content.decode()


def test_observations_relayed_as_user_messages_keep_their_lines(agent, viewer):
    traceback = 'Traceback (most recent call last):\n  File "a.py", line 1\nNameError: x'
    append_turn(agent, "s", TurnInput([MessageInput("user", traceback, name="observation")]))
    message = _element(viewer.get("/agents/coder/sessions/s/").content.decode(), "msg-1")
    assert '<pre class="content">Traceback (most recent call last):\n  File' in message


def test_a_live_update_keeps_the_budget_a_person_typed(agent, viewer):
    pairs(agent, "s", 2)
    page = viewer.get("/agents/coder/sessions/s/").content.decode()
    assert 'hx-include="#budget input[name=budget]"' in page
    state = _next_params(page)
    pairs(agent, "s", 1, start=2)
    html = _live(viewer, **state, budget="3000").content.decode()
    budget = _element(html, "budget")
    assert 'value="3000"' in budget and "/ 3,000</td>" in budget
