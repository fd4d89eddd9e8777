"""Management commands: create_agent prints the key last; seed_demo imports transcripts
through the API."""

from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import authenticate
from django.core.management import CommandError, call_command
from django.test import Client

from memoryapp.core.models import Agent, ApiKey, Message, Session

pytestmark = pytest.mark.django_db
DEMO = Path(__file__).resolve().parent.parent / "demo" / "transcripts"


def test_create_agent_prints_a_working_key_alone_on_the_last_line():
    out = StringIO()
    call_command("create_agent", "planner", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    assert key.startswith("mk_") and " " not in key
    assert Agent.objects.get().name == "planner"
    stored = ApiKey.objects.get()
    assert key not in (stored.key_hash, stored.prefix)
    response = Client().get("/api/v1/agent", headers={"Authorization": f"Bearer {key}"})
    assert response.json()["name"] == "planner"


def test_create_agent_twice_issues_a_second_key_for_the_same_agent():
    call_command("create_agent", "planner", stdout=StringIO())
    call_command("create_agent", "planner", stdout=StringIO())
    assert Agent.objects.count() == 1
    assert ApiKey.objects.count() == 2


def test_create_agent_rejects_a_non_slug_name():
    with pytest.raises(CommandError, match="must be a slug"):
        call_command("create_agent", "Bad Name!", stdout=StringIO())
    assert Agent.objects.count() == 0


def test_seed_demo_imports_the_shipped_transcripts_through_the_api(keep_connection_open):
    out = StringIO()
    call_command("seed_demo", stdout=out)
    lines = out.getvalue().strip().splitlines()
    password = lines[-3].strip()
    assert authenticate(username="demo", password=password) is not None
    key = lines[-1]
    agent = Agent.objects.get(name="demo-agent")
    sessions = Session.objects.for_agent(agent)
    shipped = [p for p in DEMO.glob("*/*") if p.suffix in (".traj", ".json", ".jsonl")]
    assert sessions.count() == len(shipped) == 12
    swe = sessions.get(key="swe-agent:function_calling_simple")
    assert swe.message_count == 12
    # The goal is the task the transcript starts with: the issue, without SWE-agent's framing.
    assert swe.goal.startswith("SyntaxError: invalid syntax")
    assert swe.message_count == Message.objects.filter(session=swe).count()
    claude = sessions.get(key="claude-code:hello-world-script")
    assert claude.goal.startswith("Write a shell script called hello.sh")
    assert claude.metadata["sessionId"] == "de3b8b19-5bc0-4a2a-934a-1b6806567e25"
    response = Client().get(
        "/api/v1/sessions/swe-agent:function_calling_simple/history",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.json()["messages"][0]["role"] == "system"
    # Running it again imports nothing twice.
    messages = Message.objects.count()
    call_command("seed_demo", stdout=StringIO())
    swe.refresh_from_db()
    assert swe.message_count == 12
    assert Message.objects.count() == messages


def test_migrations_match_the_models():
    # Exits non-zero (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())


@pytest.mark.django_db
def test_every_full_text_table_follows_its_source_table():
    """On SQLite, search indexes are FTS5 tables kept by triggers; a migration that rebuilds
    a source table (as SQLite does for many schema changes) drops its triggers, and search
    silently stops finding new rows."""
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL's GIN indexes are on the tables themselves")
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        triggers = {name for (name,) in cursor.fetchall()}
    for fts in ("core_message_fts", "core_finding_fts", "core_memory_fts"):
        assert {f"{fts}_ai", f"{fts}_ad", f"{fts}_au"} <= triggers, fts
