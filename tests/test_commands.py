"""Management commands: create_agent prints the key last; seed_demo imports transcripts
through the API."""

from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import CommandError, call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client

from memoryapp.core.models import Agent, ApiKey, Message, Session

pytestmark = pytest.mark.django_db


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


@pytest.fixture
def keep_connection_open():
    """The in-process WSGI app closes the database connection after each request, as a
    server should; inside a test transaction it must stay open (Django's test client does
    the same)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_seed_demo_imports_the_shipped_transcripts_through_the_api(keep_connection_open):
    out = StringIO()
    call_command("seed_demo", stdout=out)
    lines = out.getvalue().strip().splitlines()
    password = lines[-3].strip()
    assert authenticate(username="demo", password=password) is not None
    key = lines[-1]
    agent = Agent.objects.get(name="demo-agent")
    sessions = Session.objects.for_agent(agent)
    assert sessions.count() == 5
    swe = sessions.get(key="swe-agent:function_calling_simple")
    assert swe.message_count == 12
    assert swe.goal == "Imported from function_calling_simple.traj"
    assert swe.message_count == Message.objects.filter(session=swe).count()
    response = Client().get(
        "/api/v1/sessions/swe-agent:function_calling_simple/history",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.json()["messages"][0]["role"] == "system"
    # Running it again imports nothing twice.
    call_command("seed_demo", stdout=StringIO())
    swe.refresh_from_db()
    assert swe.message_count == 12


def test_migrations_match_the_models():
    # Exits non-zero (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())
