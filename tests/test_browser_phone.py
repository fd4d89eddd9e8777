"""Every dashboard page at a phone's width (390 px) in a real browser: no page is wider
than the screen. Content reflows; a table wider than the screen scrolls inside its own
box (`.scroll`), and hiding the page's overflow would not pass (the document's scroll
width is measured, not what shows).

Needs /usr/bin/chromium (`apt-get install chromium`; `.ci/run` installs it).
"""

import httpx
from django.urls import reverse

from memoryapp.core.models import Agent, ApiKey, ContextItem, Memory
from tests.browser_support import PASSWORD, append, make_user, skip_without_chromium

pytestmark = skip_without_chromium

PHONE = {"width": 390, "height": 844}
# Session keys as importers make them: long, and without a place to break.
KEYS = ["openhands-sdk:nonfncall-llm-message-of-a-long-run", "swe-agent:pydicom__pydicom-1458"]


def _pages(agent: Agent, memory: Memory) -> list[str]:
    name = agent.name
    return [
        reverse("dashboard:agents"),
        reverse("dashboard:agent", args=[name]),
        reverse("dashboard:memories", args=[name]),
        reverse("dashboard:search", args=[name]) + "?q=parser",
        reverse("dashboard:agent_settings", args=[name]),
        reverse("dashboard:moving", args=[name]),
        reverse("dashboard:cleanup"),
        reverse("dashboard:session", args=[name, KEYS[0]]),
        reverse("dashboard:item_history", args=[name, "memory", memory.pk]),
    ]


def test_no_page_is_wider_than_a_phone(browser, live_server):
    agent = Agent.objects.create(name="coder")
    key = ApiKey.issue(agent)[1]
    make_user("stella", agent, role="staff", staff=True)
    for session in KEYS:
        for i in range(3):
            append(live_server, key, session, f"Step {i}: the parser splits on dots in {session}")
    memory = Memory.objects.create(
        agent=agent, content="The parser splits on dots: tests/test_parser.py::test_dots"
    )
    memory.revise(content="The parser splits on dots and dashes", actor="user:stella")
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    try:
        page.goto(live_server.url + reverse("login"))
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        page.fill("#id_username", "stella")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(live_server.url + "/")
        wide = {}
        for path in _pages(agent, memory):
            response = page.goto(live_server.url + path)
            assert response.status == 200, path
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > PHONE["width"]:
                wide[path] = width
        assert wide == {}
    finally:
        context.close()


def test_a_history_in_the_side_column_is_not_crushed(page, live_server):
    """The session page's side column is about 430 px wide: a history opened there showed
    "Ch/ange" and "ad/de/d" a few letters a line. Each change is a block there."""
    agent = Agent.objects.create(name="coder")
    key = ApiKey.issue(agent)[1]
    make_user("edna", agent)
    append(live_server, key, KEYS[1], "Fix the parser")
    response = httpx.put(
        f"{live_server.url}/api/v1/sessions/{KEYS[1]}/context-items/current_task",
        json={"value": "SyntaxError: invalid syntax in tests/missing_colon.py"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    p = page.page
    p.set_viewport_size({"width": 1280, "height": 900})
    p.goto(live_server.url + reverse("login"))
    p.fill("#id_username", "edna")
    p.fill("#id_password", PASSWORD)
    p.click("button[type=submit]")
    p.wait_for_url(live_server.url + "/")
    p.goto(live_server.url + reverse("dashboard:session", args=[agent.name, KEYS[1]]))
    item = ContextItem.objects.get(session__agent=agent)
    p.locator(f"#item-context_item-{item.pk}").locator("a", has_text="history").click()
    p.wait_for_selector("table.history .label")
    lines = p.evaluate(
        """() => [...document.querySelectorAll('table.history .label, table.history time')]
        .map(e => e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight))"""
    )
    assert lines and max(lines) < 1.5, lines  # "added" and its time each on one line
    assert page.violations == []
