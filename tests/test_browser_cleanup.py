"""The cleanup page in a real browser (Debian's chromium, see tests/browser_support.py): a
real run needs a confirmation, with and without JavaScript, and the page's counts,
expired list and past runs follow the run to its end without a reload."""

import re
from datetime import timedelta
from types import SimpleNamespace

from django.utils import timezone
from playwright.sync_api import expect

from memoryapp.core import cleanup
from memoryapp.core.models import Agent, ApiKey, CleanupRun, Session
from memoryapp.dashboard import cleanup_views
from tests.browser_support import append, log_in, make_user, skip_without_chromium

pytestmark = skip_without_chromium


def _three_expired_and_one_live(live_server) -> None:
    agent = Agent.objects.create(name="coder")
    key = ApiKey.issue(agent)[1]
    for i in range(3):
        append(live_server, key, f"old-{i}", "soon gone")
    append(live_server, key, "live", "stays")
    Session.objects.exclude(key="live").update(expires_at=timezone.now() - timedelta(minutes=1))


def test_run_a_cleanup_and_watch_the_progress_bar_reach_the_end(
    page, live_server, in_process_tasks
):
    _three_expired_and_one_live(live_server)
    make_user("sam", staff=True)
    log_in(page.page, live_server, "sam")
    page.page.click("text=Cleanup")
    page.page.wait_for_selector("text=old-2")
    page.page.click("#run-cleanup")
    page.page.click("#confirm-cleanup")
    page.page.wait_for_selector("progress[value='100']", timeout=15_000)
    assert "removed 3 sessions" in page.page.inner_text("#progress")
    assert list(Session.objects.values_list("key", flat=True)) == ["live"]
    assert page.violations == []


def test_a_cleanup_with_confirmation_whose_page_updates_when_it_ends(
    page, live_server, monkeypatch
):
    """The worker is this test: the run is queued, the page polls it while it stays
    "running", then the task body runs and the page catches up with its end."""
    _three_expired_and_one_live(live_server)
    queued: list[dict] = []
    worker = SimpleNamespace(delay_on_commit=lambda **kwargs: queued.append(kwargs))
    monkeypatch.setattr(cleanup_views, "cleanup_expired", worker)
    make_user("sam", staff=True)
    log_in(page.page, live_server, "sam")
    browser_page = page.page
    browser_page.click("text=Cleanup")
    counts = browser_page.locator("#expired-now")
    expired = browser_page.locator("#expired-sessions")
    runs = browser_page.locator("#past-runs")
    progress = browser_page.locator("#progress")
    expect(counts).to_contain_text("3 sessions, 3 messages")
    expect(runs).to_contain_text("No runs yet.")
    documents: list[str] = []
    browser_page.on(
        "request", lambda r: documents.append(r.url) if r.resource_type == "document" else None
    )

    browser_page.click("#run-cleanup")
    expect(progress).to_contain_text("Remove 3 expired sessions and 3 messages for good?")
    assert CleanupRun.objects.count() == 0 and queued == []  # asking changed nothing
    browser_page.click("#progress >> text=Cancel")
    expect(browser_page.locator("#confirm-cleanup")).to_have_count(0)
    assert CleanupRun.objects.count() == 0

    browser_page.click("#run-cleanup")
    browser_page.click("#confirm-cleanup")
    expect(progress).to_contain_text("Cleanup running")
    assert [job["dry_run"] for job in queued] == [False]
    expect(counts).to_contain_text("3 sessions")  # nothing removed yet
    cleanup.run_cleanup(run_id=queued[0]["run_id"])

    expect(progress.locator("progress")).to_have_attribute("value", "100", timeout=15_000)
    expect(progress).to_contain_text("removed 3 sessions and 3 messages")
    expect(counts).to_contain_text("0 sessions, 0 messages")
    expect(expired).to_contain_text("Nothing has expired.")
    expect(runs.locator("tbody tr")).to_have_count(1)
    expect(runs.locator("tbody tr")).to_contain_text("user:sam")
    expect(runs.locator("tbody tr")).to_contain_text("done")
    assert documents == []  # all of it without a reload
    assert list(Session.objects.values_list("key", flat=True)) == ["live"]
    assert page.dialogs == [] and page.violations == []  # no confirm() dialog: the server asked


def test_the_confirmation_without_javascript(browser, live_server, in_process_tasks):
    _three_expired_and_one_live(live_server)
    make_user("sam", staff=True)
    context = browser.new_context(java_script_enabled=False)
    try:
        browser_page = context.new_page()
        log_in(browser_page, live_server, "sam")
        browser_page.goto(live_server.url + "/cleanup/")
        browser_page.click("#run-cleanup")
        browser_page.wait_for_url(re.compile(r".*/cleanup/run/\??$"))  # a GET form
        assert "Remove 3 expired sessions" in browser_page.inner_text("#progress")
        assert Session.objects.count() == 4
        browser_page.click("#confirm-cleanup")
        browser_page.wait_for_url(live_server.url + "/cleanup/")
        assert "0 sessions, 0 messages" in browser_page.inner_text("#expired-now")
        assert "user:sam" in browser_page.inner_text("#past-runs")
        assert list(Session.objects.values_list("key", flat=True)) == ["live"]
    finally:
        context.close()
