"""`manage.py seed_demo`: the data the README and its screenshots promise.

- a login `demo` (Django staff, for the cleanup page; a fresh password each run) who is
  staff of the agent `demo-agent` only, and an API key for that agent;
- the real transcripts in demo/transcripts imported through the agent API (the same ingest
  path agents use: `agents.client.MemoryClient` over an in-process WSGI transport), with
  their findings and working context extracted from the tool calls;
- agent settings that prune, so the long sessions show pruned history and its summary;
- on the SWE-agent pydicom session: a subtask list, a working-context item the agent set
  and one a person corrected, and a finding a person corrected;
- long-term memories with an edit history made through the model methods (strengthened,
  re-typed, superseded by the agent and by a person, archived, one past its expiry);
- one imported session, last active a month ago and expired yesterday, so the cleanup page
  has something to clean;
- an agent `moved-in` (demo is its staff) whose memory came from mem0 (get_all answers and
  its history database: edits, deletes) and from a Letta agent file (a session and its core
  memory blocks), through the importer (memoryapp.core.moving);
- a second agent, `ops-agent`, with its own session and memory, that `demo` cannot see.

Safe to run again: the password is reset, the previous demo key is replaced, importing a
transcript again stores nothing new (`agents.importers.send`), and everything else is
created only when absent. Each line of output says what was created and what was there.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from agents.importers import load_transcript, send
from memoryapp.clients import inprocess
from memoryapp.core import moving, workers
from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.models import (
    Agent,
    ApiKey,
    ContextItem,
    ExtractionJob,
    Finding,
    Memory,
    Session,
    Subtask,
)
from memoryapp.dashboard.models import Membership

DEMO_DIR = Path(settings.BASE_DIR) / "demo" / "transcripts"
DEMO_TTL = 30 * 24 * 3600  # demo sessions stay visible for a month
# The agent whose memory moved in from mem0 and Letta, and the files it came from.
MOVED_AGENT = "moved-in"
MOVED_DIR = Path(settings.BASE_DIR) / "tests" / "fixtures"
MEM0_FILES = ["get_all_alice.json", "get_all_bob.json", "history.db"]
LETTA_FILE = "loop.af"
KEY_NAME = "seed_demo"
# Low enough that the long transcripts (80 messages, 14k tokens) are pruned and summarised,
# high enough that the short ones are shown whole.
PRUNING = {"max_messages": 20, "token_budget": 12000}

PYDICOM = "swe-agent:pydicom__pydicom-1458"
RUST_PORT = "claude-code:python-to-rust-port"
COVERAGE = "claude-code:coverage-test-fix"
EXPIRED = "claude-code:stop-hook-fast-path-clean"

SUBTASKS = [  # (title, status, the titles it depends on)
    ("Reproduce the bug with float pixel data", Subtask.Status.DONE, []),
    ("Find where the NumPy handler requires Pixel Representation", Subtask.Status.DONE, []),
    (
        "Make Pixel Representation optional for float pixel data",
        Subtask.Status.DONE,
        ["Find where the NumPy handler requires Pixel Representation"],
    ),
    (
        "Add a regression test for Float Pixel Data without Pixel Representation",
        Subtask.Status.IN_PROGRESS,
        ["Make Pixel Representation optional for float pixel data"],
    ),
    (
        "Mention the fix in the release notes",
        Subtask.Status.PENDING,
        ["Add a regression test for Float Pixel Data without Pixel Representation"],
    ),
]


# What happens to a memory after the agent first remembers it: (memory, agent actor, person).
# Each step is a model method, so each leaves its MemoryEvent row; a person's edit has
# source `manual`, as it has when made on the dashboard.
Then = Callable[[Memory, str, str], object]


def _heard_again_then_raised(memory: Memory, agent_actor: str, person: str) -> None:
    Memory.remember(
        memory.agent,
        memory.content,
        memory_type=memory.memory_type,
        confidence=memory.confidence,
        actor=agent_actor,
    )
    memory.refresh_from_db()
    memory.revise(actor=person, confidence=0.95, source=Memory.Source.MANUAL)


def _replaced_twice(memory: Memory, agent_actor: str, person: str) -> None:
    memory.revise(
        actor=agent_actor, content="Port the Python utilities to a standalone Rust library"
    ).revise(
        actor=person,
        content="Port the Python utilities to a standalone Rust library with no Python "
        "bindings; the Justfile runs cargo test",
        confidence=0.9,
        source=Memory.Source.MANUAL,
    )


def _replaced_by_person(memory: Memory, agent_actor: str, person: str) -> None:
    memory.revise(
        actor=person,
        content="Run the tests with python -m pytest from the repository root",
        confidence=0.9,
        source=Memory.Source.MANUAL,
    )


def _retyped(memory: Memory, agent_actor: str, person: str) -> None:
    memory.revise(actor=person, memory_type=Memory.Type.CONVENTION, source=Memory.Source.MANUAL)


def _archived(memory: Memory, agent_actor: str, person: str) -> None:
    memory.archive(person)


def _past_expiry(memory: Memory, agent_actor: str, person: str) -> None:
    # The expiry is not part of the memory's history (its snapshot): a plain update.
    Memory.objects.filter(pk=memory.pk).update(expires_at=timezone.now() - timedelta(hours=1))


@dataclass(frozen=True)
class MemoryStory:
    memory_type: str
    content: str
    confidence: float
    session_key: str | None = None
    then: Then | None = None


MEMORY_STORIES = [
    MemoryStory(
        Memory.Type.LESSON,
        "pydicom's NumPy handler must not require Pixel Representation: float and double "
        "float pixel data have none",
        0.6,
        PYDICOM,
        _heard_again_then_raised,
    ),
    MemoryStory(
        Memory.Type.DECISION,
        "Port the Python utilities to Rust with PyO3 bindings",
        0.7,
        RUST_PORT,
        _replaced_twice,
    ),
    MemoryStory(
        Memory.Type.CONVENTION,
        "Run the tests with python -m unittest",
        0.6,
        COVERAGE,
        _replaced_by_person,
    ),
    MemoryStory(
        Memory.Type.FACT,
        "Commit messages are passed through a heredoc so they keep their line breaks",
        0.75,
        COVERAGE,
        _retyped,
    ),
    MemoryStory(
        Memory.Type.FACT,
        "cargo-llvm-cov has to be installed before every coverage run",
        0.5,
        RUST_PORT,
        _archived,
    ),
    MemoryStory(
        Memory.Type.FACT,
        "The Rust port is not released yet: keep publishing the Python package",
        0.8,
        RUST_PORT,
        _past_expiry,
    ),
    MemoryStory(
        Memory.Type.PREFERENCE,
        "The user wants 100% line coverage before a port is done",
        0.85,
        RUST_PORT,
    ),
    MemoryStory(Memory.Type.PREFERENCE, "The user prefers small patches, each with a test", 0.8),
]

HIDDEN_AGENT = "ops-agent"
HIDDEN_OWNER = "ops"
HIDDEN_SESSION = "ops:nightly-backup-check"
HIDDEN_GOAL = "Check the nightly database backup"
HIDDEN_TURNS = [
    [
        ("user", "Check that last night's database backup finished."),
        ("assistant", "It finished at 02:14 UTC: 41 GB, checksum verified."),
    ],
    [
        ("user", "Can it be restored?"),
        ("assistant", "A test restore into a scratch database succeeded in 9 minutes."),
    ],
]


class Command(BaseCommand):
    help = "Seed the demo: a login, agents, imported transcripts, memories with history."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo")
        parser.add_argument("--agent", default="demo-agent")

    def handle(self, *args, username: str, agent: str, **options):
        user, password = self._user(username)
        demo_agent = self._agent(agent)
        self._membership(user, demo_agent)
        raw_key = self._key(demo_agent)
        self._import(demo_agent, raw_key)
        self._extract_leftovers(demo_agent)
        self._expire(demo_agent)
        people = f"user:{username}"
        pydicom = Session.objects.filter(agent=demo_agent, key=PYDICOM).first()
        if pydicom is not None:
            self._subtasks(pydicom)
            self._corrections(pydicom, f"agent:{demo_agent.name}", people)
        self._memories(demo_agent, people)
        self._moved_in(user)
        self._hidden_agent(username)

        self.stdout.write(f"Log in at http://127.0.0.1:8000/ as {username!r} with password:")
        self.stdout.write(f"    {password}")
        self.stdout.write(f"API key for agent {demo_agent.name!r}:")
        self.stdout.write(raw_key)

    def _say(self, what: str, created: bool, detail: str = "", *, state: str = "") -> None:
        state = state or ("created" if created else "already there")
        self.stdout.write(f"{what}: {state}{f' ({detail})' if detail else ''}")

    # --- who ---------------------------------------------------------------------------

    def _user(self, username: str):
        password = secrets.token_urlsafe(12)
        user, created = get_user_model().objects.get_or_create(username=username)
        # Staff for the cleanup page; not a superuser, who would see every agent.
        user.is_staff = True
        user.is_superuser = False
        user.set_password(password)
        user.save()
        self._say(f"user {username}", created, "password reset, printed below")
        return user, password

    def _agent(self, name: str) -> Agent:
        agent, created = Agent.objects.get_or_create(name=name)
        wanted = {"ttl_seconds": DEMO_TTL, **PRUNING}
        changed = [field for field, value in wanted.items() if getattr(agent, field) != value]
        for field in changed:
            setattr(agent, field, wanted[field])
        if changed:
            agent.save(update_fields=[*changed, "updated_at"])
        detail = (
            f"keeps at most {agent.max_messages} messages, budget {agent.token_budget:,} tokens"
        )
        if changed and not created:
            detail += "; settings reset"
        self._say(f"agent {name}", created, detail)
        return agent

    def _membership(self, user, agent: Agent) -> None:
        membership, created = Membership.objects.get_or_create(
            user=user, agent=agent, defaults={"role": Membership.Role.STAFF}
        )
        if membership.role != Membership.Role.STAFF:
            membership.role = Membership.Role.STAFF
            membership.save(update_fields=["role"])
        self._say(f"{user.username} as staff of {agent.name}", created)

    def _key(self, agent: Agent) -> str:
        # Raw keys are never stored, so a run can print only a key it issues: the earlier
        # demo key goes, and the count of keys stays the same.
        old, _ = ApiKey.objects.filter(agent=agent, name=KEY_NAME).delete()
        _, raw_key = ApiKey.issue(agent, name=KEY_NAME)
        if old:
            self._say(
                f"API key {KEY_NAME!r} of {agent.name}",
                False,
                state="replaced",
                detail="the earlier one no longer works; the new one is printed below",
            )
        else:
            self._say(f"API key {KEY_NAME!r} of {agent.name}", True, "printed below")
        return raw_key

    # --- conversations -------------------------------------------------------------------

    def _import(self, agent: Agent, raw_key: str) -> None:
        with inprocess.client(raw_key) as client:
            for path in sorted(DEMO_DIR.glob("*/*")):
                if path.suffix not in (".traj", ".json", ".jsonl"):
                    continue
                # Keys name the folder too (`swe-agent:function_calling_simple`).
                key = f"{path.parent.name}:{path.stem}"
                if key == EXPIRED and Session.objects.for_agent(agent).filter(key=key).exists():
                    # Sending to an expired session would start it afresh: it stays as it is,
                    # the cleanup page's example.
                    self._say(f"session {key}", False, "the one left to expire")
                    continue
                for session in load_transcript(path, session_key=key):
                    session.goal = session.goal or f"Imported from {path.name}"
                    with _quiet_not_found():
                        result = send(client, session)
                    if result.sent:
                        turns = f"{result.sent} turn{'s' if result.sent != 1 else ''}"
                        self._say(f"session {session.key}", True, f"{turns} imported")
                    else:
                        self._say(f"session {session.key}", False)

    def _extract_leftovers(self, agent: Agent) -> None:
        """Run here whatever extraction has not run yet (a broker with no worker, or a
        caller's open transaction holding back the dispatch): the demo shows findings
        without waiting. Jobs that are done are not selected, and a job run twice
        changes nothing."""
        jobs = (
            ExtractionJob.objects.filter(
                session__agent=agent,
                status__in=[ExtractionJob.Status.PENDING, ExtractionJob.Status.QUEUED],
            )
            .order_by("session_id", "turn__iteration")
            .values_list("pk", flat=True)
        )
        ran = [workers.run_extraction(pk) for pk in jobs]
        if ran:
            self.stdout.write(f"extraction: {ran.count('done')} of {len(ran)} turns run here")

    def _expire(self, agent: Agent) -> None:
        now = timezone.now()
        expired = (
            Session.objects.for_agent(agent)
            .filter(key=EXPIRED)
            .active(now)
            .update(expires_at=now - timedelta(days=1), last_activity_at=now - timedelta(days=31))
        )
        if expired:
            self.stdout.write(f"session {EXPIRED}: expired a day ago, for the cleanup page")

    def _subtasks(self, session: Session) -> None:
        by_title: dict[str, Subtask] = {}
        created = 0
        for position, (title, status, _) in enumerate(SUBTASKS):
            subtask, new = Subtask.objects.get_or_create(
                session=session, title=title, defaults={"status": status, "position": position}
            )
            by_title[title] = subtask
            created += new
        for title, _, needs in SUBTASKS:
            by_title[title].dependencies.add(*(by_title[need] for need in needs))
        self._say(f"{len(SUBTASKS)} subtasks of {session.key}", created > 0)

    def _corrections(self, session: Session, agent_actor: str, person: str) -> None:
        """What an agent said and a person corrected, with the history rows it leaves."""
        with transaction.atomic():
            ContextItem.put(
                session,
                "test_command",
                "python -m pytest pydicom/tests/test_numpy_pixel_data.py",
                source=ContextItem.Source.EXPLICIT,
                confidence=1.0,
                actor=agent_actor,
            )
            task = "Make Pixel Representation optional in the NumPy pixel data handler"
            before = ContextItem.objects.filter(session=session, key="current_task").first()
            ContextItem.put(
                session,
                "current_task",
                task,
                source=ContextItem.Source.MANUAL,
                confidence=1.0,
                actor=person,
            )
            submitted = Finding.objects.filter(session=session, tool="submit").first()
            edited = submitted is not None and submitted.edit(
                person,
                fact="Submitted the fix: numpy_handler.py no longer requires Pixel Representation",
            )
        new = before is None or before.value != task or edited
        self._say(f"working context and a finding corrected by {person}", new)

    # --- long-term memory ----------------------------------------------------------------

    def _memories(self, agent: Agent, person: str) -> None:
        actor = f"agent:{agent.name}"
        sessions = {s.key: s for s in Session.objects.for_agent(agent)}
        created = 0
        for story in MEMORY_STORIES:
            known = Memory.objects.for_agent(agent).filter(
                content_key=Memory.content_key_for(story.content)
            )
            if known.exists():
                continue
            with transaction.atomic():
                memory, _ = Memory.remember(
                    agent,
                    story.content,
                    memory_type=story.memory_type,
                    confidence=story.confidence,
                    actor=actor,
                    session=sessions.get(story.session_key),
                )
                if story.then is not None:
                    story.then(memory, actor, person)
            created += 1
        total = len(MEMORY_STORIES)
        detail = f"{created} of {total} new" if created else ""
        self._say(f"{total} memories of {agent.name} with their history", created > 0, detail)

    # --- someone else's agent ------------------------------------------------------------

    def _moved_in(self, user) -> None:
        """An agent whose memory came from elsewhere: mem0's get_all answers and history
        database, and a Letta agent file (the real files the importers are tested on,
        tests/fixtures/mem0 and tests/fixtures/letta, each with its source and licence),
        through the importer the dashboard's page and `import_memory` use."""
        agent, _ = Agent.objects.get_or_create(name=MOVED_AGENT, defaults={"ttl_seconds": DEMO_TTL})
        self._membership(user, agent)
        mem0_files = [(MOVED_DIR / "mem0" / n).read_bytes() for n in MEM0_FILES]
        plans = [
            moving.SYSTEMS["mem0"].read(
                moving.Source(files=list(zip(mem0_files, MEM0_FILES, strict=True)))
            ),
            moving.SYSTEMS["letta"].read(
                moving.Source(files=[((MOVED_DIR / "letta" / LETTA_FILE).read_bytes(), LETTA_FILE)])
            ),
        ]
        for plan in plans:
            report = moving.move_in(agent, plan, dry_run=False, actor=f"user:{user.username}")
            created = any(line.action == "create" for line in report.lines)
            self._say(f"{plan.system} memory moved into {agent.name}", created, report.summary)

    def _hidden_agent(self, username: str) -> None:
        """Another team's agent: it has an owner, a session and a memory, and the demo
        user has no role on it, so the dashboard answers 404 for it."""
        agent, created = Agent.objects.get_or_create(
            name=HIDDEN_AGENT, defaults={"ttl_seconds": DEMO_TTL}
        )
        owner, new_owner = get_user_model().objects.get_or_create(username=HIDDEN_OWNER)
        if new_owner:
            owner.set_unusable_password()
            owner.save(update_fields=["password"])
        Membership.objects.get_or_create(
            user=owner, agent=agent, defaults={"role": Membership.Role.STAFF}
        )
        if not Session.objects.for_agent(agent).filter(key=HIDDEN_SESSION).exists():
            for turn in HIDDEN_TURNS:
                append_turn(agent, HIDDEN_SESSION, TurnInput([MessageInput(*m) for m in turn]))
            Session.objects.filter(agent=agent, key=HIDDEN_SESSION).update(goal=HIDDEN_GOAL)
            created = True
        fact = "Backups run nightly at 02:00 UTC and are kept for 14 days"
        known = Memory.objects.for_agent(agent).filter(content_key=Memory.content_key_for(fact))
        if not known.exists():
            with transaction.atomic():
                Memory.remember(
                    agent,
                    fact,
                    memory_type=Memory.Type.FACT,
                    confidence=0.9,
                    actor=f"agent:{agent.name}",
                )
            created = True
        self._extract_leftovers(agent)
        detail = f"owned by {HIDDEN_OWNER}, not visible to {username}"
        self._say(f"agent {HIDDEN_AGENT} with a session and a memory", created, detail)


@contextmanager
def _quiet_not_found() -> Iterator[None]:
    """`send` asks for each session before creating it: the 404s are expected, so the
    request log's "Not Found" warnings are held back while importing."""
    log = logging.getLogger("django.request")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
