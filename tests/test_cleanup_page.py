"""The staff cleanup page: preview, dry run, a run with progress, past runs, extending TTL."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.models import Agent, CleanupRun, Memory, Session
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}


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
        editor.post("/cleanup/run/", {"dry_run": "0"}),
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


def test_dry_run_then_run_with_progress(staff, sessions, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = staff.post("/cleanup/run/", {"dry_run": "1"}, headers=HX)
    dry = CleanupRun.objects.get()
    assert dry.dry_run and dry.status == "done" and dry.sessions_removed == 1
    assert Session.objects.count() == 2
    assert "<progress" in response.content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = staff.post("/cleanup/run/", {"dry_run": "0"}, headers=HX)
    run = CleanupRun.objects.filter(dry_run=False).get()
    assert run.status == "running"
    html = response.content.decode()
    assert f'hx-get="/cleanup/runs/{run.pk}/"' in html and 'hx-trigger="every 1s"' in html
    callbacks[0]()  # the task runs after commit
    progress = staff.get(f"/cleanup/runs/{run.pk}/", headers=HX).content.decode()
    assert "done" in progress and 'value="100"' in progress and "hx-trigger" not in progress
    assert list(Session.objects.values_list("key", flat=True)) == ["live"]
    assert Memory.objects.get().content == "learned"
    page = staff.get("/cleanup/").content.decode()
    assert "user:sam" in page


def test_extend_chosen_sessions(staff, sessions):
    old = Session.objects.get(key="old")
    response = staff.post("/cleanup/extend/", {"session": [old.pk], "seconds": "86400"})
    assert response.status_code == 302
    old.refresh_from_db()
    assert old.expires_at > timezone.now() + timedelta(hours=23)
    assert staff.post("/cleanup/extend/", {"session": [old.pk], "seconds": "5"}).status_code == 400
    assert staff.post("/cleanup/extend/", {"session": ["x"], "seconds": "3600"}).status_code == 400


def test_a_second_run_while_one_runs_shows_that_run(staff, sessions):
    running = CleanupRun.objects.create(dry_run=False, triggered_by="user:earlier")
    dry = CleanupRun.objects.create(dry_run=True, triggered_by="user:other")  # newer, also running
    assert running.status == dry.status == "running"
    response = staff.post("/cleanup/run/", {"dry_run": "0"}, headers=HX)
    assert f'hx-get="/cleanup/runs/{running.pk}/"' in response.content.decode()
    assert CleanupRun.objects.count() == 2  # no second real run started
    assert Session.objects.filter(key="old").exists()


def test_size_on_disk_is_the_message_table_share_of_the_expired_messages(staff, sessions):
    from memoryapp.dashboard import cleanup_views

    page = staff.get("/cleanup/")
    stored = sum(Session.objects.values_list("message_count", flat=True))
    assert page.context["bytes"] == round(cleanup_views._message_table_bytes() * 3 / stored)
