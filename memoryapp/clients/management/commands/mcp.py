"""`python manage.py mcp --agent NAME [--session KEY]`: memoryapp's MCP server over stdio,
in process, with an API key that exists only while it runs: agents/mcp_server.py's relay
to this process's own `/mcp` endpoint."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.mcp_server import connect, relay
from memoryapp.api import inprocess
from memoryapp.core.models import Agent, ApiKey


class Command(BaseCommand):
    help = "Serve the agent's memory to an MCP client (Claude Code, ...) over stdio."

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, help="the agent whose memory to serve")
        parser.add_argument("--session", help="the session key tools use when given none")

    def handle(self, *args, agent: str, session: str | None, **options):
        owner = Agent.objects.filter(name=agent).first()
        if owner is None:
            raise CommandError(f"no agent named {agent!r} (python manage.py create_agent)")
        key_row, raw_key = ApiKey.issue(owner, name="mcp")
        connection = inprocess.connection()
        try:
            with connect(
                connection.url,
                raw_key,
                transport=connection.transport,
                headers=connection.headers,
            ) as http:
                relay(http, session)
        finally:
            key_row.delete()
