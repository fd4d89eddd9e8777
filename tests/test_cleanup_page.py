"""The staff cleanup page: preview, dry run, a confirmed run with progress, past runs,
extending TTL, and the page's regions updating when a run ends."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.models import Agent, CleanupRun, Memory, Session
from tests.conftest import logged_in_member
from tests.html_support import elements, one, select

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}


def confirm_button(html: str) -> list:
    return select(html, "button", id="confirm-cleanup")


@pytest.fixture(autouse=True)
def _tasks_in_process(in_process_tasks):
    """The cleanup task runs in this process (tests/conftest.py)."""


@pytest.fixture
def staff(db):
    """A Django staff user with no role on any agent: cleanup needs no more."""
    return logged_in_member(None, Agent.objects.get_or_create(name="coder")[0], "sam", staff=True)


@pytest.fixture
def editor(db):
    return logged_in_member("editor", Agent.objects.get_or_create(name="coder")[0], "edna")


@pytest.fixture
def sessions(db):
    agent = Agent.objects.get_or_create(name="coder")[0]
    for key in ("old", "live"):
        append_turn(agent, key, TurnInput([MessageInput("user", f"{key} text")] * 3))
    Memory.objects.create(agent=agent, session=Session.objects.get(key="old"), content="learned")
    Session.objects.filter(key="old").update(expires_at=timezone.now() - timedelta(minutes=5))
    return agent


def test_only_staff_may_clean_up(editor, sessions):
    for response in (
        editor.get("/cleanup/"),
        editor.get("/cleanup/run/"),
        editor.post("/cleanup/run/", {"dry_run": "0", "confirm": "yes"}),
        editor.post("/cleanup/extend/", {"session": [1], "seconds": "3600"}),
    ):
        assert response.status_code == 403
    assert Session.objects.count() == 2
    assert Client().get("/cleanup/").status_code == 302


def test_preview_lists_what_expired(staff, sessions):
    page = staff.get("/cleanup/")
    assert page.context["preview"]["sessions"] == 1 and page.context["preview"]["messages"] == 3
    assert page.context["bytes"] > 0
    assert [s.key for s in page.context["expired"]] == ["old"]


def test_dry_run_then_confirmed_run_with_progress(
    staff, sessions, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = staff.post("/cleanup/run/", {"dry_run": "1"}, headers=HX)
    dry = CleanupRun.objects.get()
    assert dry.dry_run and dry.status == "done" and dry.sessions_removed == 1
    assert Session.objects.count() == 2
    assert one(response.content.decode(), "progress")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = staff.post("/cleanup/run/", {"dry_run": "0", "confirm": "yes"}, headers=HX)
    run = CleanupRun.objects.filter(dry_run=False).get()
    assert run.status == "running"
    progress = one(response.content.decode(), "div", id="progress")[0]
    assert progress["hx-get"] == f"/cleanup/runs/{run.pk}/"
    assert progress["hx-trigger"] == "every 1s"
    callbacks[0]()  # the task runs after commit
    html = staff.get(f"/cleanup/runs/{run.pk}/", headers=HX).content.decode()
    progress, text = one(html, "div", id="progress")
    assert "hx-trigger" not in progress and "Cleanup done" in text
    assert one(html, "progress")[0]["value"] == "100"
    assert list(Session.objects.values_list("key", flat=True)) == ["live"]
    assert Memory.objects.get().content == "learned"
    page = staff.get("/cleanup/").content.decode()
    assert [text for _, text in select(page, "td") if text.startswith("user:")] == [
        "user:sam",
        "user:sam",
    ]


# --- the confirmation ------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, HX], ids=["plain", "htmx"])
@pytest.mark.parametrize("confirm", [None, "", "no", "1"])
def test_a_real_run_without_confirmation_changes_nothing(staff, sessions, headers, confirm):
    data = {"dry_run": "0"} if confirm is None else {"dry_run": "0", "confirm": confirm}
    response = staff.post("/cleanup/run/", data, headers=headers)
    assert response.status_code == 200
    assert CleanupRun.objects.count() == 0
    assert Session.objects.count() == 2
    # What is shown instead is the confirmation, naming what would go.
    assert confirm_button(response.content.decode())
    _, text = one(response.content.decode(), "div", id="progress")
    assert "Remove 1 expired session and 3 messages for good?" in text


def test_the_confirmation_works_without_javascript(
    staff, sessions, django_capture_on_commit_callbacks
):
    """The "Run cleanup…" form asks the server for the confirmation step: a whole page."""
    page = staff.get("/cleanup/").content.decode()
    ask, _ = one(page, "form", hx_get="/cleanup/run/")
    assert ask["method"] == "get" and ask["action"] == "/cleanup/run/"
    assert confirm_button(page) == []
    step = staff.get("/cleanup/run/").content.decode()
    assert one(step, "title")[1] == "Cleanup · memoryapp"  # the whole page, with its regions
    assert one(step, "section", id="past-runs")
    assert len(select(step, "form", method="post", action="/cleanup/run/")) == 2  # dry, real
    assert one(step, "input", name="confirm")[0]["value"] == "yes"
    cancel, _ = one(step, "a", **{"class": "cancel"})
    assert cancel["href"] == cancel["hx-get"] == "/cleanup/"
    assert CleanupRun.objects.count() == 0
    # The button the step shows posts what the server asked for.
    with django_capture_on_commit_callbacks(execute=True):
        response = staff.post("/cleanup/run/", {"dry_run": "0", "confirm": "yes"})
    assert response.status_code == 302 and response["Location"] == "/cleanup/"
    assert list(Session.objects.values_list("key", flat=True)) == ["live"]


def test_the_confirmation_says_what_it_would_do_when_no_session_expired(staff, sessions):
    Session.objects.update(expires_at=timezone.now() + timedelta(hours=1))
    html = staff.get("/cleanup/run/", headers=HX).content.decode()
    assert not confirm_button(html)
    assert one(html, "div", id="progress")[1].startswith("Nothing has expired")
    Memory.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    html = staff.get("/cleanup/run/", headers=HX).content.decode()
    assert one(html, "button", id="confirm-cleanup")[1] == "Archive them"
    assert one(html, "div", id="progress")[1].startswith(
        "Archive 1 long-term memory past its own expiry?"
    )


def test_with_htmx_the_confirmation_and_cancel_swap_the_progress_region(staff, sessions):
    html = staff.get("/cleanup/run/", headers=HX).content.decode()
    assert confirm_button(html)
    assert not select(html, "title") and not select(html, "section")  # the fragment alone
    # "Cancel" asks the page for its progress region (the element htmx targets).
    html = staff.get("/cleanup/", headers={**HX, "HX-Target": "progress"}).content.decode()
    attrs, text = one(html, "div", id="progress")
    assert text == "" and "hx-get" not in attrs
    assert not confirm_button(html) and not select(html, "section")


def test_the_progress_region_is_announced_politely(staff, sessions):
    page = staff.get("/cleanup/").content.decode()
    # The live region is the stable parent: the poll swaps #progress inside it.
    tags = [(t, a) for t, a, _ in elements(page)]
    index = next(i for i, (t, a) in enumerate(tags) if a.get("id") == "progress")
    assert tags[index - 1][1].get("aria-live") == "polite"


def test_a_second_run_while_one_runs_shows_that_run(staff, sessions):
    running = CleanupRun.objects.create(dry_run=False, triggered_by="user:earlier")
    dry = CleanupRun.objects.create(dry_run=True, triggered_by="user:other")  # newer, also running
    assert running.status == dry.status == "running"
    response = staff.post("/cleanup/run/", {"dry_run": "0", "confirm": "yes"}, headers=HX)
    assert one(response.content.decode(), "div", id="progress")[0]["hx-get"] == (
        f"/cleanup/runs/{running.pk}/"
    )
    assert CleanupRun.objects.count() == 2  # no second real run started
    assert Session.objects.filter(key="old").exists()


# --- the page updates when a run ends --------------------------------------------------


def test_when_a_run_ends_its_counts_expired_list_and_past_runs_come_along(
    staff, sessions, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = staff.post("/cleanup/run/", {"dry_run": "0", "confirm": "yes"}, headers=HX)
    run = CleanupRun.objects.get()
    # While it runs, the poll answers the progress alone.
    running = response.content.decode()
    assert not select(running, hx_swap_oob="true")
    assert not select(
        staff.get(f"/cleanup/runs/{run.pk}/", headers=HX).content.decode(), hx_swap_oob="true"
    )
    callbacks[0]()
    html = staff.get(f"/cleanup/runs/{run.pk}/", headers=HX).content.decode()
    assert [a["id"] for a, _ in select(html, hx_swap_oob="true")] == [
        "expired-now",
        "expired-sessions",
        "past-runs",
    ]
    _, counts = one(html, "div", id="expired-now")
    assert counts.startswith("0 sessions, 0 messages")
    _, expired = one(html, "section", id="expired-sessions")
    assert "Nothing has expired." in expired and "old" not in expired
    rows = [text for _, text in select(one_section(html, "past-runs"), "tr")][1:]
    assert len(rows) == 1 and rows[0].split()[2:7] == ["cleanup", "user:sam", "done", "1", "3"]


def one_section(html: str, section_id: str) -> str:
    """The HTML from the section with this id to the end (the sections do not nest)."""
    start = html.index(f'id="{section_id}"')
    end = html.find("</section>", start)
    return html[start:end]


@pytest.mark.django_db(transaction=True)
def test_a_dry_run_that_ended_at_once_updates_past_runs(staff, sessions):
    """In-process tasks (no Redis) run on commit, before the response: it is the end."""
    html = staff.post("/cleanup/run/", {"dry_run": "1"}, headers=HX).content.decode()
    rows = [text for _, text in select(one_section(html, "past-runs"), "tr")][1:]
    assert len(rows) == 1 and rows[0].split()[2:5] == ["dry", "run", "user:sam"]
    assert one(html, "div", id="expired-now")[1].startswith("1 session, 3 messages")


@pytest.mark.parametrize(
    "region, tag",
    [("expired-now", "div"), ("expired-sessions", "section"), ("past-runs", "section")],
)
def test_each_region_answers_its_own_partial(staff, sessions, region, tag):
    html = staff.get("/cleanup/", headers={**HX, "HX-Target": region}).content.decode()
    attrs, _ = one(html, tag, id=region)
    assert "hx-swap-oob" not in attrs
    assert not select(html, "title") and not select(html, "div", id="progress")


# --- query counts ----------------------------------------------------------------------


def _expired_sessions_and_runs(agent: Agent, n: int) -> None:
    past = timezone.now() - timedelta(minutes=5)
    for i in range(n):
        append_turn(agent, f"gone-{n}-{i}", TurnInput([MessageInput("user", "x")]))
        CleanupRun.objects.create(dry_run=True, triggered_by="beat", status="done")
    Session.objects.filter(key__startswith="gone-").update(expires_at=past)


def _queries(client: Client, path: str, headers: dict | None = None) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path, headers=headers or {}).status_code == 200
    return len(queries)


def test_query_counts_do_not_grow_with_sessions_or_runs(staff, sessions):
    run = CleanupRun.objects.create(dry_run=True, status="done", triggered_by="user:sam")
    paths = [("/cleanup/", {}), ("/cleanup/run/", {}), (f"/cleanup/runs/{run.pk}/", HX)]
    _expired_sessions_and_runs(sessions, 3)
    at_n = [_queries(staff, path, headers) for path, headers in paths]
    _expired_sessions_and_runs(sessions, 6)
    assert [_queries(staff, path, headers) for path, headers in paths] == at_n


def test_the_polled_fragment_costs_three_queries_while_running(
    staff, sessions, django_assert_num_queries
):
    run = CleanupRun.objects.create(dry_run=False, triggered_by="user:sam")
    with django_assert_num_queries(3):  # the login session, the user, the run
        staff.get(f"/cleanup/runs/{run.pk}/", headers=HX)


def test_the_size_on_disk_is_the_message_table_share_of_the_expired_messages(staff, sessions):
    from memoryapp.dashboard import cleanup_views

    page = staff.get("/cleanup/")
    stored = sum(Session.objects.values_list("message_count", flat=True))
    assert page.context["bytes"] == round(cleanup_views._message_table_bytes() * 3 / stored)


def test_extend_chosen_sessions(staff, sessions):
    old = Session.objects.get(key="old")
    response = staff.post("/cleanup/extend/", {"session": [old.pk], "seconds": "86400"})
    assert response.status_code == 302
    old.refresh_from_db()
    assert old.expires_at > timezone.now() + timedelta(hours=23)
    assert staff.post("/cleanup/extend/", {"session": [old.pk], "seconds": "5"}).status_code == 400
    assert staff.post("/cleanup/extend/", {"session": ["x"], "seconds": "3600"}).status_code == 400


# --- the queryset methods the views and the task share ---------------------------------


def test_running_and_under_way_runs(db):
    now = timezone.now()
    done = CleanupRun.objects.create(status="done")
    dry = CleanupRun.objects.create(dry_run=True)
    real = CleanupRun.objects.create()
    stale = CleanupRun.objects.create(started_at=now - CleanupRun.STALE_AFTER)
    assert set(CleanupRun.objects.running()) == {dry, real, stale}
    assert list(CleanupRun.objects.under_way(now)) == [real]
    assert done not in CleanupRun.objects.running()
