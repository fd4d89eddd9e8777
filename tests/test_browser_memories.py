"""The memories page and a memory's history in a real browser (Playwright driving
Debian's chromium): adding and editing inline, the diff of each change, a revert of every
kind of history row (each writing its own row), and bulk archive with its confirmation,
with JavaScript and without."""

from __future__ import annotations

from django.db import transaction

from memoryapp.core.models import Agent, Memory, MemoryEvent
from tests.browser_support import PAYLOADS, log_in, make_user, skip_without_chromium

pytestmark = skip_without_chromium


def remember(agent, content, confidence=0.8):
    with transaction.atomic():
        return Memory.remember(
            agent, content, memory_type="fact", confidence=confidence, actor="agent:coder"
        )[0]


def events_of(memory) -> int:
    return MemoryEvent.objects.filter(target_kind="memory", target_id=memory.pk).count()


def test_edit_a_memory_inline_and_revert_it_from_its_history(page, live_server):
    agent = Agent.objects.create(name="coder")
    remember(agent, "The API is v1")
    make_user("edna", agent)
    log_in(page.page, live_server, "edna")
    page.page.goto(live_server.url + "/agents/coder/memories/")
    page.page.click("a:text-is('edit')")
    page.page.fill("textarea[name=content]", "The API is v2")
    page.page.click("button:has-text('Save')")
    page.page.wait_for_selector("p.content:has-text('The API is v2')")
    page.page.click("a:text-is('history')")
    page.page.wait_for_selector("table.history")
    row = page.page.locator("tr", has_text="of the fact it replaced").filter(has_text="replaced")
    row.locator("button:has-text('revert')").click()
    page.page.wait_for_selector("p.content:has-text('The API is v1')")
    assert Memory.objects.get(content="The API is v1").status == "active"
    assert Memory.objects.get(content="The API is v2").status == "archived"
    assert page.violations == []


def test_a_memory_edit_its_diff_and_a_revert_of_each_kind_of_row(page, live_server):
    """Added (by a person, from the page), edited, archived, restored and replaced: each
    row of the history shows what changed and says what its revert will do; each revert
    does it and adds its own row on top."""
    agent = Agent.objects.create(name="coder")
    make_user("edna", agent)
    p = page.page
    log_in(p, live_server, "edna")
    p.goto(live_server.url + "/agents/coder/memories/")

    # add, inline
    p.click("a:text-is('Add a memory')")
    p.fill(".add-slot textarea[name=content]", "The API is v1")
    p.select_option(".add-slot select[name=memory_type]", "fact")
    p.fill(".add-slot input[name=confidence]", "0.7")
    p.click(".add-slot button:has-text('Add')")
    p.locator(".add-slot .item p.content", has_text="The API is v1").wait_for()
    memory = Memory.objects.get(content="The API is v1")
    assert (memory.source, memory.confidence) == ("manual", 0.7)
    assert "added by user:edna" in p.locator(".add-slot .item .provenance").inner_text()
    p.reload()
    item = p.locator(f"#item-memory-{memory.pk}")
    history = item.locator("table.history tr.change")

    def open_history():
        item.locator("a:text-is('history')").click()
        item.locator("table.history").wait_for()

    def revert_top_row(expect_plan: str, now_on_top: str):
        """Revert the newest change, which must say `expect_plan`; its own row then tops
        the history, labelled `now_on_top`."""
        rows_before = history.count()
        assert history.first.locator(".plan").inner_text() == expect_plan
        history.first.locator("button:has-text('revert')").click()
        history.nth(rows_before).wait_for()  # one more row
        assert history.first.locator(".label").inner_text() == now_on_top
        assert history.first.locator(".actor").inner_text() == "user:edna"

    # edit in place: the row shows only the changed field, old and new
    item.locator("a:text-is('edit')").click()
    item.locator("select[name=memory_type]").select_option("lesson")
    item.locator("button:has-text('Save')").click()
    item.locator(".badge", has_text="lesson").wait_for()
    open_history()
    assert history.first.locator(".label").inner_text() == "edited"
    assert history.first.locator("dt").all_inner_texts() == ["type"]
    assert history.first.locator("del").inner_text() == "fact"
    assert history.first.locator("ins").inner_text() == "lesson"
    revert_top_row("will restore memory type: fact", "edited")
    item.locator(".badge", has_text="fact").wait_for()
    memory.refresh_from_db()
    assert memory.memory_type == "fact"

    # archive
    item.locator("button:text-is('archive')").click()
    item.locator(".badge", has_text="archived").wait_for()
    open_history()
    assert history.first.locator(".label").inner_text() == "archived"
    revert_top_row("will restore status: active", "restored")
    item.locator(".badge", has_text="active").wait_for()
    memory.refresh_from_db()
    assert memory.status == "active"

    # restore: archive, restore, then revert the restore
    item.locator("button:text-is('archive')").click()
    item.locator("button:text-is('restore')").click()
    item.locator("button:text-is('archive')").wait_for()
    open_history()
    assert history.first.locator(".label").inner_text() == "restored"
    revert_top_row("will restore status: archived", "archived")
    item.locator(".badge", has_text="archived").wait_for()
    memory.refresh_from_db()
    assert memory.status == "archived"
    item.locator("button:text-is('restore')").click()
    item.locator("button:text-is('archive')").wait_for()

    # replace: new content is a new memory; its history holds the replaced fact's rows
    item.locator("a:text-is('edit')").click()
    item.locator("textarea[name=content]").fill("The public API is v2")
    item.locator("button:has-text('Save')").click()
    replacement = p.locator(".item.memory", has_text="The public API is v2")
    replacement.wait_for()
    new = Memory.objects.get(content="The public API is v2")
    item = p.locator(f"#item-memory-{new.pk}")
    history = item.locator("table.history tr.change")
    open_history()
    replaced = history.filter(has_text="of the fact it replaced").first
    assert replaced.locator(".label").inner_text() == "replaced"
    content = replaced.locator("dd").first
    assert content.locator("del").all_inner_texts() == ["v1"]
    assert [t.strip() for t in content.locator("ins").all_text_contents()] == ["public", "v2"]
    assert replaced.locator("del").nth(1).inner_text() == "active"
    assert replaced.locator("ins").nth(2).inner_text() == "superseded"
    events = events_of(memory)
    replaced.locator("button:has-text('revert')").click()
    # The row on screen becomes the fact brought back, its history open.
    item = p.locator(f"#item-memory-{memory.pk}")
    item.locator("p.content", has_text="The API is v1").wait_for()
    history = item.locator("table.history tr.change")
    assert history.first.locator(".label").inner_text() == "brought back"
    assert events_of(memory) == events + 1
    new.refresh_from_db()
    memory.refresh_from_db()
    assert (memory.status, new.status) == ("active", "archived")

    # add: its revert forgets the fact
    added = history.filter(has_text="added")
    assert added.locator(".plan").inner_text() == "will forget this fact (archive it)"
    rows_before = history.count()
    added.locator("button:has-text('revert')").click()
    history.nth(rows_before).wait_for()
    assert history.first.locator(".label").inner_text() == "archived"
    assert added.locator("button").count() == 0  # nothing more to undo there
    memory.refresh_from_db()
    assert memory.status == "archived"
    assert page.violations == [] and page.dialogs == []


def test_bulk_archive_with_a_count_and_a_confirmation(page, live_server):
    agent = Agent.objects.create(name="coder")
    memories = [remember(agent, f"fact number {i}", confidence=0.9 - i / 10) for i in range(3)]
    make_user("edna", agent)
    p = page.page
    log_in(p, live_server, "edna")
    p.goto(live_server.url + "/agents/coder/memories/")
    count = p.locator("#bulk-count")
    archive = p.locator("#bulk-form button:has-text('Archive selected')")
    count.filter(has_text="0 memories selected").wait_for()
    assert archive.is_disabled()
    for memory in memories[:2]:
        p.locator(f"#item-memory-{memory.pk} input.bulk-pick").check()
    count.filter(has_text="2 memories selected").wait_for()
    assert archive.is_enabled()
    p.check("#bulk-all")
    count.filter(has_text="3 memories selected").wait_for()
    p.uncheck(f"#item-memory-{memories[2].pk} input.bulk-pick")
    count.filter(has_text="2 memories selected").wait_for()
    assert p.locator("#bulk-all").evaluate("box => box.indeterminate")

    archive.click()
    confirmation = p.locator("#bulk-confirm #bulk-confirmation")
    confirmation.wait_for()
    assert confirmation.locator("h2").inner_text() == "Archive 2 memories?"
    assert confirmation.locator("li").count() == 2
    assert Memory.objects.filter(status="archived").count() == 0  # asked, not done
    confirmation.locator("button:has-text('Archive 2')").click()
    p.locator("ul.notices", has_text="Archived 2 memories.").wait_for()
    assert set(Memory.objects.filter(status="archived")) == set(memories[:2])
    assert p.locator("#memory-list .item").count() == 1  # only the active one is listed
    for memory in memories[:2]:
        last = MemoryEvent.objects.filter(target_id=memory.pk).latest("id")
        assert (last.action, last.actor) == ("delete", "user:edna")
    assert page.violations == [] and page.dialogs == []


def test_bulk_delete_without_javascript_confirms_on_a_page(browser, live_server):
    agent = Agent.objects.create(name="coder")
    keep, *gone = [remember(agent, f"fact number {i}") for i in range(3)]
    make_user("edna", agent)
    context = browser.new_context(java_script_enabled=False)
    try:
        p = context.new_page()
        log_in(p, live_server, "edna")
        p.goto(live_server.url + "/agents/coder/memories/")
        assert p.locator("#bulk-all").is_hidden()  # "all on this page" needs the script
        for memory in gone:
            p.check(f"#item-memory-{memory.pk} input.bulk-pick")
        p.click("#bulk-form button:has-text('Delete selected')")
        p.wait_for_url("**/memories/bulk/")
        assert p.locator("h2").inner_text() == "Delete 2 memories?"
        assert Memory.objects.count() == 3
        p.click("button:has-text('Delete 2 for good')")
        p.locator("ul.notices", has_text="Deleted 2 memories.").wait_for()
        assert list(Memory.objects.all()) == [keep]
    finally:
        context.close()


def test_a_diff_of_hostile_text_runs_no_script(page, live_server):
    """Each piece of a word diff is escaped on its own: payloads split across <del> and
    <ins> still render as text."""
    agent = Agent.objects.create(name="coder")
    before = " ".join(PAYLOADS[:25])
    memory = remember(agent, before)
    with transaction.atomic():
        memory.revise(actor="user:edna", content=" ".join(PAYLOADS[10:40]))
    make_user("edna", agent)
    p = page.page
    log_in(p, live_server, "edna")
    new = Memory.objects.get(status="active")
    p.goto(f"{live_server.url}/agents/coder/items/memory/{new.pk}/history/")
    replaced = p.locator("tr.change", has_text="replaced")
    assert replaced.locator("del").count() > 0 and replaced.locator("ins").count() > 0
    p.wait_for_timeout(300)  # give any injected handler time to fire
    assert p.evaluate("() => window.__xss === undefined ? 0 : window.__xss") == 0
    assert p.locator("main script, main img, main iframe, main svg").count() == 0
    assert PAYLOADS[0] in replaced.locator("dd").first.text_content()
    assert page.dialogs == [] and page.violations == []
