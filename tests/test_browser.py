"""The dashboard in a real browser: Playwright driving Debian's chromium (headless,
--no-sandbox; Playwright's own browser download is never used).

Needs /usr/bin/chromium (`apt-get install chromium`; `.ci/run` installs it).
"""

from datetime import timedelta
from urllib.parse import quote

import httpx
from django.db import transaction
from django.utils import timezone

from memoryapp.core.models import (
    Agent,
    ApiKey,
    ContextItem,
    Finding,
    Memory,
    Session,
)
from tests.browser_support import (
    PAYLOADS,
    append,
    log_in,
    make_user,
    skip_without_chromium,
)

pytestmark = skip_without_chromium


def test_log_in_open_a_session_and_see_a_new_turn_arrive_live(page, live_server, in_process_tasks):
    """A live append updates the messages, the header, the budget, the turns table and
    chart, and the pruned marker, without a reload (issue 10)."""
    agent = Agent.objects.create(name="coder", max_messages=4)
    key = ApiKey.issue(agent)[1]
    make_user("edna", agent)
    append(live_server, key, "run-1", "first question from the agent")
    log_in(page.page, live_server, "edna")
    page.page.click("text=coder")
    page.page.click("text=run-1")
    page.page.wait_for_selector("text=first question from the agent")
    p = page.page
    assert "1 message · 1 turn" in p.locator("#session-header").inner_text()
    assert p.locator("#turn-rows tr").count() == 1 and p.locator("#pruned-marker").count() == 0
    conversation = p.locator("#budget tr", has_text="Conversation").inner_text()
    for i in range(4):
        append(live_server, key, "run-1", f"a fresh message from the API {i}")
    p.wait_for_selector("text=a fresh message from the API 3", timeout=10_000)  # polled every 2 s
    p.locator("#session-header", has_text="5 messages · 5 turns").wait_for(timeout=10_000)
    p.locator("#turn-rows tr").nth(4).wait_for()
    assert p.locator("#turn-rows tr").first.inner_text().startswith("5")  # newest first
    assert p.locator("#budget tr", has_text="Conversation").inner_text() != conversation
    # The first message left the agent's context: the marker says so, the message is dimmed.
    p.locator("#pruned-marker", has_text="1 message").wait_for()
    assert "outside" in (p.locator("#msg-1").get_attribute("class") or "")
    assert p.locator("#turn-chart rect").count() >= 5
    assert page.dialogs == [] and page.violations == []


DOM_CHECK = """() => {
  const bad = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      const n = a.name.toLowerCase(), v = (a.value || '').trim().toLowerCase();
      if (n.startsWith('on') || n.startsWith('hx-on')) bad.push(el.tagName + ' ' + n);
      if (['href', 'src', 'action', 'formaction', 'data', 'xlink:href'].includes(n)
          && v.startsWith('javascript:')) bad.push(el.tagName + ' ' + n);
      if (n === 'hx-trigger' && v.includes('load')) bad.push(el.tagName + ' hx-trigger=load');
    }
    if (el.tagName === 'SCRIPT' && !el.src) bad.push('inline script');
    if (['IFRAME', 'OBJECT', 'EMBED', 'IMG', 'BASE', 'AUDIO', 'VIDEO', 'STYLE'].includes(el.tagName)
        && el.closest('body')) bad.push(el.tagName);
  }
  return {bad, xss: window.__xss === undefined ? 0 : window.__xss};
}"""


def test_fifty_xss_payloads_everywhere_run_no_script(page, live_server, in_process_tasks):
    assert len(PAYLOADS) >= 50
    agent = Agent.objects.create(name="coder")
    key = ApiKey.issue(agent)[1]
    make_user("sam", agent, role="staff", staff=True)
    body = {
        "messages": [
            {"role": "user" if i % 2 else "assistant", "content": p, "name": "n" if i % 3 else None}
            for i, p in enumerate(PAYLOADS)
        ],
        "tool_calls": [{"tool": p[:200], "query": p, "output": p * 2} for p in PAYLOADS],
        "model": PAYLOADS[0],
    }
    for message in body["messages"]:
        if message["name"] is None:
            del message["name"]
    response = httpx.post(
        f"{live_server.url}/api/v1/sessions/everything/turns",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert response.status_code == 201, response.text
    session = Session.objects.get(key="everything")
    session.goal = PAYLOADS[1]
    session.save()
    for i, payload in enumerate(PAYLOADS):
        # Extraction already holds a finding for each payload call: these are other calls.
        Finding.objects.create(
            session=session, tool=payload[:200], query=f"{payload} #{i}", fact=payload, step=1
        )
        ContextItem.objects.create(session=session, key=f"{i}{payload}"[:200], value=payload)
        Memory.objects.create(agent=agent, content=payload, confidence=0.9)
        if "/" not in payload:  # session keys cannot hold "/"
            append(live_server, key, payload[:200], payload)
            Session.objects.filter(agent=agent, key=payload[:200]).update(goal=payload)
    Session.objects.exclude(key="everything").filter(pk__lt=session.pk + 20).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    log_in(page.page, live_server, "sam")
    pages = [
        "/",
        "/agents/coder/?status=all",
        "/agents/coder/sessions/everything/",
        "/agents/coder/sessions/everything/older/?before=100",
        "/agents/coder/memories/",
        "/cleanup/",
    ]
    for key_payload in [p for p in PAYLOADS if "/" not in p][:5]:
        pages.append(f"/agents/coder/sessions/{quote(key_payload[:200], safe='')}/")
    for path in pages:
        page.page.goto(live_server.url + path)
        page.page.wait_for_timeout(300)  # give any injected handler time to fire
        result = page.page.evaluate(DOM_CHECK)
        assert result == {"bad": [], "xss": 0}, path
        if "everything" in path or "memories" in path:
            # Shown as text, exactly as the agent sent it.
            assert "<script>window.__xss=1</script>" in page.page.inner_text("body"), path
    # The history of an item holds agent text too.
    memory = Memory.objects.filter(agent=agent).first()
    page.page.goto(f"{live_server.url}/agents/coder/items/memory/{memory.pk}/history/")
    assert page.page.evaluate(DOM_CHECK) == {"bad": [], "xss": 0}
    assert page.dialogs == []
    assert page.violations == []  # nothing was even blocked by the CSP: all of it was escaped


def test_pruned_history_loads_page_by_page_in_order_and_hides_again(page, live_server):
    """Issue 10: "show them" once, "older messages" until there are none, every message
    once and in order above the kept ones; "hide them" takes them away again."""
    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn

    agent = Agent.objects.create(name="coder", max_messages=6)
    append_turn(agent, "long", TurnInput([MessageInput("system", "Be careful.")]))
    for i in range(60):
        pair = [MessageInput("user", f"q{i}"), MessageInput("assistant", f"a{i}")]
        append_turn(agent, "long", TurnInput(pair))
    make_user("vera", agent, role="viewer")
    log_in(page.page, live_server, "vera")
    page.page.goto(live_server.url + "/agents/coder/sessions/long/")

    def seqs():
        ids = page.page.locator("#messages li.msg").evaluate_all("els => els.map(e => e.id)")
        return [int(i.removeprefix("msg-")) for i in ids]

    kept = seqs()
    assert kept[0] == 1 and len(kept) == 6  # the pinned system message and 5 kept
    page.page.click("#pruned-marker >> text=show them")
    page.page.wait_for_selector("#pruned-marker >> text=hide them")
    assert page.page.locator("#pruned-marker >> text=show them").count() == 0
    while page.page.locator("text=older messages").count():
        before = len(seqs())
        page.page.click("text=older messages")
        page.page.locator("#messages li.msg").nth(before).wait_for()  # the page has landed
    shown = seqs()
    assert shown == [1, *range(2, kept[1]), *kept[1:]]  # each once, in order
    assert page.page.locator("li.msg.outside").count() == kept[1] - 2
    page.page.click("#pruned-marker >> text=hide them")
    page.page.wait_for_selector("#pruned-marker >> text=show them")
    assert seqs() == kept
    assert page.dialogs == [] and page.violations == []


def test_a_form_refused_with_422_shows_its_errors_in_place(page, live_server):
    """htmx 2 does not swap 4xx answers by default; the forms answer a refused save with
    422 and the errors, which must appear (base.html's responseHandling)."""
    agent = Agent.objects.create(name="coder")
    make_user("sam", agent, role="staff")
    log_in(page.page, live_server, "sam")
    page.page.goto(live_server.url + "/agents/coder/settings/")
    page.page.fill("input[name=max_messages]", "0")
    # The browser's own check would stop this first; the server's is the one under test.
    page.page.locator("#settings-form").evaluate("form => { form.noValidate = true; }")
    page.page.click("#settings button[type=submit]")
    page.page.locator("#settings .errorlist").first.wait_for(timeout=10_000)
    assert page.page.url.endswith("/agents/coder/settings/")
    agent.refresh_from_db()
    assert agent.max_messages != 0
    assert page.dialogs == [] and page.violations == []


def test_a_refused_action_says_so_instead_of_doing_nothing(page, live_server):
    """A revert that has become pointless (someone archived the fact meanwhile) is a 409:
    the page says so, as text, and nothing changes (found in review: no answer at all)."""
    agent = Agent.objects.create(name="coder")
    with transaction.atomic():  # remember locks the rows it reads, as the API does
        memory = Memory.remember(
            agent, "The API is v1", memory_type="fact", confidence=0.8, actor="agent:coder"
        )[0]
    make_user("edna", agent)
    log_in(page.page, live_server, "edna")
    page.page.goto(live_server.url + f"/agents/coder/items/memory/{memory.pk}/history/")
    revert = page.page.locator("table.history button:has-text('revert')").first
    revert.wait_for()
    with transaction.atomic():  # as the views do (archive locks the row)
        memory.archive("user:someone-else")  # the page is now stale
    revert.click()
    notice = page.page.locator("#notice")
    notice.wait_for(timeout=10_000)
    assert "cannot be reverted" in notice.inner_text()
    assert "Nothing was changed." in notice.inner_text()
    memory.refresh_from_db()
    assert memory.status == "archived"
    assert page.dialogs == [] and page.violations == []
