"""`manage.py import_transcript PATH [PATH...] --agent NAME [--format F] [--session KEY]`:
import agent transcripts (files or folders) into an agent's sessions.

It goes through the agent API in-process, the path every agent's writes take
(`agents.client.MemoryClient` over an `httpx.WSGITransport`), with a key issued for the
run and deleted when it ends. The agent is created when missing. Importing the same file
again stores nothing new; a log that grew appends only its new turns (see
`agents.importers.send`).
"""

import logging

import httpx
from django.core.management.base import BaseCommand, CommandError
from django.core.wsgi import get_wsgi_application
from django.utils.text import slugify

from agents.client import MemoryClient
from agents.importers import FORMATS, TranscriptError, import_paths
from memoryapp.core.models import Agent, ApiKey


class Command(BaseCommand):
    help = "Import agent transcripts (Claude Code, SWE-agent, OpenAI/ToolBench, OpenHands, aider)."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH", help="a transcript or a folder")
        parser.add_argument("--agent", required=True, help="the agent the sessions belong to")
        parser.add_argument("--format", default="auto", choices=["auto", *FORMATS])
        parser.add_argument("--session", help="session key (default: the file's name)")

    def handle(self, *args, paths: list[str], agent: str, format: str, session, **options):
        if slugify(agent) != agent or not agent or len(agent) > 64:
            raise CommandError(
                f"agent name {agent!r} must be a slug (lowercase letters, digits, - and _)"
            )
        owner, _ = Agent.objects.get_or_create(name=agent)
        key_row, raw_key = ApiKey.issue(owner, name="import_transcript")
        transport = httpx.WSGITransport(app=get_wsgi_application())
        # Asking for a session not imported yet is a 404 by design: not worth a warning.
        request_log = logging.getLogger("django.request")
        level = request_log.level
        request_log.setLevel(logging.ERROR)
        try:
            with MemoryClient("http://localhost", raw_key, transport=transport) as client:
                status = import_paths(
                    client, paths, format=format, session_key=session, write=self.stdout.write
                )
        except TranscriptError as exc:
            raise CommandError(str(exc)) from None
        finally:
            request_log.setLevel(level)
            key_row.delete()
        if status:
            raise CommandError("some transcripts could not be imported (see above)")
