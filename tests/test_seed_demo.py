"""`manage.py seed_demo` seeds what the README and its screenshots promise: a pruning agent
whose long sessions have pruned history and a summary, memories with an edit history,
findings and working context from real transcripts, subtasks, an expired session, a
second agent the demo user cannot see; and running it again changes nothing.

The command imports every shipped transcript (seconds), so it runs once for the module,
inside a transaction rolled back at the end; each test runs in its own savepoint.
"""

from __future__ import annotations

from html.parser import HTMLParser
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connections, transaction
from django.test import Client

from memoryapp.core import cleanup
from memoryapp.core.context import assemble_context
from memoryapp.core.models import (
    Agent,
    ApiKey,
    ContextItem,
    Finding,
    Memory,
    MemoryEvent,
    Message,
    Session,
    Subtask,
    ToolCall,
    Turn,
)
from memoryapp.core.restore import restore_history
from memoryapp.dashboard.models import Membership

pytestmark = pytest.mark.django_db

LONG_SESSIONS = ["claude-code:python-to-rust-port", "swe-agent:pydicom__pydicom-1458"]
PYDICOM = "swe-agent:pydicom__pydicom-1458"
EXPIRED = "claude-code:stop-hook-fast-path-clean"


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker):
    """The command's output; its data stay until the module's last test has run."""
    with django_db_blocker.unblock(), pytest.MonkeyPatch.context() as patch:
        # The in-process WSGI app closes the connection around each request, as a server
        # should; inside this transaction it must stay open (see keep_connection_open).
        for connection in connections.all():
            patch.setattr(connection, "close_if_unusable_or_obsolete", lambda: None)
        with transaction.atomic():
            out = StringIO()
            call_command("seed_demo", stdout=out)
            yield out.getvalue()
            transaction.set_rollback(True)


@pytest.fixture
def demo_agent(seeded) -> Agent:
    return Agent.objects.get(name="demo-agent")


@pytest.fixture
def demo_user(seeded) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username="demo"))
    return client


class _Page(HTMLParser):
    """The links and the visible text of a page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") or "")

    def handle_data(self, data):
        self.text.append(data)


def test_the_demo_agent_prunes_long_sessions_and_summarises_what_it_pruned(demo_agent, demo_user):
    assert demo_agent.max_messages < Session.objects.get(key=LONG_SESSIONS[0]).message_count
    for key in LONG_SESSIONS:
        session = Session.objects.get(agent=demo_agent, key=key)
        history = restore_history(
            session,
            max_messages=demo_agent.max_messages,
            max_tokens=demo_agent.default_conversation_budget(),
        )
        assert history["pruned_count"] > 0, key
        # What the session page shows: the context the agent would get, summary included.
        context = assemble_context(session, record_access=False)
        summary = context["summary"]
        assert summary is not None and summary["text"].strip(), key
        assert not summary["stale"]
        first_kept = next(m["seq"] for m in context["conversation"] if m["role"] != "system")
        assert 0 < summary["covers_through_seq"] < first_kept
        page = demo_user.get(f"/agents/demo-agent/sessions/{key}/")
        assert page.status_code == 200
    # Short sessions are shown whole: the settings prune, they do not hide everything.
    short = Session.objects.get(agent=demo_agent, key="claude-code:hello-world-script")
    whole = restore_history(
        short,
        max_messages=demo_agent.max_messages,
        max_tokens=demo_agent.default_conversation_budget(),
    )
    assert whole["pruned_count"] == 0


def test_memories_have_an_edit_history_by_the_agent_and_a_person(demo_agent):
    memories = Memory.objects.for_agent(demo_agent)
    superseded = memories.filter(status=Memory.Status.SUPERSEDED)
    assert superseded.count() >= 2
    # A chain: replaced by the agent, then the replacement replaced by a person.
    chained = [m for m in superseded if m.superseded_by.status == Memory.Status.SUPERSEDED]
    assert chained and chained[0].superseded_by.superseded_by.status == Memory.Status.ACTIVE
    events = MemoryEvent.objects.filter(agent=demo_agent, target_kind=MemoryEvent.Target.MEMORY)
    for memory in superseded:
        update = events.get(target_id=memory.pk, action=MemoryEvent.Action.UPDATE)
        assert update.before["status"] == Memory.Status.ACTIVE
        assert update.after["superseded_by"] == memory.superseded_by_id
    archived = memories.get(status=Memory.Status.ARCHIVED)
    deleted = events.get(target_id=archived.pk, action=MemoryEvent.Action.DELETE)
    assert deleted.actor == "user:demo"
    assert {"agent:demo-agent", "user:demo"} <= set(events.values_list("actor", flat=True))
    # Every memory has the row that added it; one was changed in place several times.
    for memory in memories:
        assert events.filter(target_id=memory.pk, action=MemoryEvent.Action.ADD).count() == 1
    in_place = [
        m
        for m in memories.filter(status=Memory.Status.ACTIVE)
        if events.filter(target_id=m.pk, action=MemoryEvent.Action.UPDATE).count() >= 2
    ]
    assert in_place
    # A person's replacement is theirs (source manual), as when edited on the dashboard.
    by_person = events.filter(action=MemoryEvent.Action.ADD, actor="user:demo")
    assert by_person.exists()
    for event in by_person:
        assert memories.get(pk=event.target_id).source == Memory.Source.MANUAL
    # One is past its own expiry: cleanup has a memory to archive.
    assert cleanup.preview()["memories_to_expire"] >= 1


def test_findings_and_working_context_come_from_the_transcripts(demo_agent):
    session = Session.objects.get(agent=demo_agent, key=PYDICOM)
    extracted = Finding.objects.filter(session=session, source=Finding.Source.EXTRACTED)
    assert extracted.count() >= 5
    # Each extracted finding knows the turn and tool call it came from.
    assert not extracted.filter(turn__isnull=True).exists()
    assert ToolCall.objects.filter(session=session, finding__isnull=False).exists()
    inferred = ContextItem.objects.filter(session=session, source=ContextItem.Source.INFERRED)
    assert inferred.exists()
    # What the agent set, and what a person corrected, each with its history row.
    test_command = ContextItem.objects.get(session=session, key="test_command")
    assert test_command.source == ContextItem.Source.EXPLICIT
    task = ContextItem.objects.get(session=session, key="current_task")
    assert task.source == ContextItem.Source.MANUAL
    corrected = MemoryEvent.objects.get(
        target_kind=MemoryEvent.Target.CONTEXT_ITEM, target_id=task.pk, actor="user:demo"
    )
    assert corrected.before["source"] == ContextItem.Source.INFERRED
    manual = Finding.objects.get(session=session, source=Finding.Source.MANUAL)
    assert MemoryEvent.objects.filter(
        target_kind=MemoryEvent.Target.FINDING, target_id=manual.pk, actor="user:demo"
    ).exists()
    # Every imported session has its findings, from the real tool calls.
    rust = Session.objects.get(agent=demo_agent, key="claude-code:python-to-rust-port")
    assert Finding.objects.filter(session=rust, kind="edit").count() >= 5


def test_a_session_has_a_goal_and_a_subtask_list(demo_agent):
    session = Session.objects.get(agent=demo_agent, key=PYDICOM)
    assert "Pixel Representation" in session.goal
    subtasks = list(Subtask.objects.filter(session=session))
    assert len(subtasks) >= 4
    statuses = [t.status for t in subtasks]
    assert statuses.count(Subtask.Status.IN_PROGRESS) == 1
    assert Subtask.Status.DONE in statuses and Subtask.Status.PENDING in statuses
    assert [t.position for t in subtasks] == sorted(t.position for t in subtasks)
    current = next(t for t in subtasks if t.status == Subtask.Status.IN_PROGRESS)
    assert current.dependencies.exists()
    # The agent's prompt names the subtask it is on.
    assert current.title in assemble_context(session, record_access=False)["prompt"]


def test_an_expired_session_waits_for_cleanup(demo_agent, demo_user):
    expired = Session.objects.for_agent(demo_agent).expired()
    assert list(expired.values_list("key", flat=True)) == [EXPIRED]
    assert expired.get().message_count > 0
    assert cleanup.preview()["sessions"] >= 1
    page = demo_user.get("/cleanup/")
    assert page.status_code == 200
    assert EXPIRED in "".join(_Page(page.content.decode()).text)


def test_the_second_agent_is_invisible_to_the_demo_user(seeded, demo_user):
    hidden = Agent.objects.get(name="ops-agent")
    # It has something to hide: a session with messages and a memory.
    assert Message.objects.filter(session__agent=hidden).exists()
    assert Memory.objects.for_agent(hidden).exists()
    demo = get_user_model().objects.get(username="demo")
    assert not demo.is_superuser
    assert not Membership.objects.filter(user=demo, agent=hidden).exists()
    assert Membership.objects.filter(user=demo, agent__name="demo-agent").exists()
    overview = _Page(demo_user.get("/").content.decode())
    assert "/agents/demo-agent/" in overview.hrefs
    assert not any("ops-agent" in href for href in overview.hrefs)
    assert "ops-agent" not in "".join(overview.text)
    assert demo_user.get("/agents/ops-agent/").status_code == 404
    assert demo_user.get("/agents/ops-agent/memories/").status_code == 404
    session = "/agents/ops-agent/sessions/ops:nightly-backup-check/"
    assert demo_user.get(session).status_code == 404


def _counts() -> dict[str, int]:
    models = [
        ApiKey,
        Agent,
        Membership,
        get_user_model(),
        Session,
        Turn,
        Message,
        Finding,
        ContextItem,
        Memory,
        MemoryEvent,
        Subtask,
    ]
    return {model.__name__: model.objects.count() for model in models}


def test_running_it_again_adds_nothing_and_says_so(seeded):
    before = _counts()
    first_key = seeded.strip().splitlines()[-1]
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert _counts() == before
    lines = out.getvalue().strip().splitlines()
    report = lines[:-4]  # then the login and the key
    assert report and not [line for line in report if ": created" in line]
    assert sum("already there" in line for line in report) >= 15
    assert any("replaced" in line for line in report)
    assert "created" in seeded and "already there" not in seeded.split("Log in at")[0]
    # The earlier key no longer works; the one printed now does.
    agent_url = "/api/v1/agent"
    assert (
        Client().get(agent_url, headers={"Authorization": f"Bearer {lines[-1]}"}).status_code == 200
    )
    assert (
        Client().get(agent_url, headers={"Authorization": f"Bearer {first_key}"}).status_code == 401
    )
    assert Session.objects.get(key=EXPIRED).is_expired()


def test_a_demo_seeded_before_is_brought_in_line(seeded):
    """A database seeded by an earlier version: `demo` a superuser (who sees every agent),
    the demo agent with settings that do not prune. Seeding again fixes both."""
    demo = get_user_model().objects.get(username="demo")
    demo.is_superuser = True
    demo.save(update_fields=["is_superuser"])
    Agent.objects.filter(name="demo-agent").update(max_messages=100, token_budget=32000)
    out = StringIO()
    call_command("seed_demo", stdout=out)
    demo.refresh_from_db()
    assert not demo.is_superuser and demo.is_staff
    agent = Agent.objects.get(name="demo-agent")
    assert (agent.max_messages, agent.token_budget) == (20, 12000)
    assert "settings reset" in out.getvalue()
