"""`manage.py export_session --agent NAME [--session KEY] [-o FILE]`: write a session, or
with no `--session` the whole agent, as one JSON document (memoryapp/core/export.py), the
same document `GET /api/v1/sessions/{key}/export` and `GET /api/v1/agent/export` answer.
`manage.py import_transcript FILE --agent OTHER` (or `POST /api/v1/import`) recreates it.
The document is written as it is read, a session at a time."""

from django.core.management.base import BaseCommand, CommandError

from memoryapp.core import export
from memoryapp.core.models import Agent, Session


class Command(BaseCommand):
    help = "Export a session, or a whole agent, as one JSON document."

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, help="the agent to export")
        parser.add_argument("--session", help="the session's key (default: the whole agent)")
        parser.add_argument("-o", "--output", help="the file to write (default: standard output)")

    def handle(self, *args, agent: str, session: str | None, output: str | None, **options):
        owner = Agent.objects.filter(name=agent).first()
        if owner is None:
            raise CommandError(f"no agent named {agent!r}")
        if session is None:
            pieces = export.stream_agent(owner)
        else:
            found = Session.objects.for_agent(owner).active().filter(key=session).first()
            if found is None:
                raise CommandError(f"agent {agent} has no live session {session!r}")
            pieces = export.stream_session(found)
        if output is None:
            for piece in pieces:
                self.stdout.write(piece, ending="")
            return
        with open(output, "w", encoding="utf-8") as handle:
            for piece in pieces:
                handle.write(piece)
        scope = "agent" if session is None else f"session {session!r} of"
        self.stderr.write(f"exported {scope} {agent} to {output}")
