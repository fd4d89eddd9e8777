"""`manage.py seed_demo`: a login user, a demo agent with a key, and the real transcripts
in demo/transcripts imported through the agent API (the same ingest path agents use:
`agents.client.MemoryClient` over an in-process WSGI transport).

Safe to run again: the user's password is reset and printed, and importing a transcript
again stores nothing new (`agents.importers.send`).
"""

import secrets
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.core.wsgi import get_wsgi_application

from agents.client import MemoryClient
from agents.importers import load_transcript, send
from memoryapp.core.models import Agent, ApiKey

DEMO_DIR = Path(settings.BASE_DIR) / "demo" / "transcripts"
DEMO_TTL = 30 * 24 * 3600  # demo sessions stay visible for a month


class Command(BaseCommand):
    help = "Create a demo login, a demo agent, and import the shipped transcripts."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo")
        parser.add_argument("--agent", default="demo-agent")

    def handle(self, *args, username: str, agent: str, **options):
        password = secrets.token_urlsafe(12)
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.is_staff = True
        user.is_superuser = True
        user.set_password(password)
        user.save()

        demo_agent, _ = Agent.objects.get_or_create(name=agent)
        demo_agent.ttl_seconds = DEMO_TTL
        demo_agent.save(update_fields=["ttl_seconds"])
        _, raw_key = ApiKey.issue(demo_agent, name="seed_demo")

        transport = httpx.WSGITransport(app=get_wsgi_application())
        imported = 0
        with MemoryClient("http://localhost", raw_key, transport=transport) as client:
            for path in sorted(DEMO_DIR.glob("*/*")):
                if path.suffix not in (".traj", ".json", ".jsonl"):
                    continue
                # Keys name the folder too (`swe-agent:function_calling_simple`).
                key = f"{path.parent.name}:{path.stem}"
                for session in load_transcript(path, session_key=key):
                    session.goal = session.goal or f"Imported from {path.name}"
                    result = send(client, session)
                    if result.sent:
                        imported += 1
                        self.stdout.write(f"imported {session.key}: {result.sent} turns")
        self.stdout.write(f"{imported} transcripts imported.")
        self.stdout.write(f"Log in at http://127.0.0.1:8000/ as {username!r} with password:")
        self.stdout.write(f"    {password}")
        self.stdout.write(f"API key for agent {demo_agent.name!r}:")
        self.stdout.write(raw_key)
