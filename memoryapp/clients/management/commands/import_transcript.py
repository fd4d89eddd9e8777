"""`manage.py import_transcript PATH [PATH...] --agent NAME [--format F] [--session KEY]
[--replace]`: import agent transcripts (files or folders) into an agent's sessions, and
memoryapp exports (a session's or an agent's) into the agent.

It goes through the agent API in-process, the path every agent's writes take
(`agents.client.MemoryClient` over an `httpx.WSGITransport`), with a key issued for the
run and deleted when it ends. The agent is created when missing. Importing the same file
again stores nothing new; a log that grew appends only its new turns (see
`agents.importers.send`). An export is sent whole to `POST /api/v1/import`, which
recreates it exactly (see `agents.importers.export`); importing it again is a conflict
unless `--replace`. The request size limit is raised for this process to the largest
export given: the files are the operator's, on the server's own host.
"""

import logging
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils.text import slugify

from agents.importers import EXPORT, FORMATS, TranscriptError, import_paths
from agents.importers.export import looks_like_export
from agents.importers.loader import CANDIDATE_SUFFIXES
from memoryapp.clients import inprocess
from memoryapp.core.models import Agent, ApiKey


def export_files(paths: list[str], format: str) -> list[Path]:
    """The memoryapp exports among `paths` (files, and files in folders)."""
    found = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found += [
                p
                for p in sorted(path.rglob("*"))
                if p.suffix.lower() in CANDIDATE_SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
                and looks_like_export(p)
            ]
        elif path.is_file() and (format == EXPORT or looks_like_export(path)):
            found.append(path)
    return found


class Command(BaseCommand):
    help = (
        "Import agent transcripts (Claude Code, SWE-agent, OpenAI/ToolBench, OpenHands, aider) "
        "and memoryapp exports."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH", help="a transcript or a folder")
        parser.add_argument("--agent", required=True, help="the agent the sessions belong to")
        parser.add_argument("--format", default="auto", choices=["auto", *FORMATS])
        parser.add_argument("--session", help="session key (default: the file's name)")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="an export replaces sessions that exist with the same key",
        )

    def handle(self, *args, paths: list[str], agent: str, format: str, session, replace, **options):
        if slugify(agent) != agent or not agent or len(agent) > 64:
            raise CommandError(
                f"agent name {agent!r} must be a slug (lowercase letters, digits, - and _)"
            )
        exports = export_files(paths, format)
        owner, _ = Agent.objects.get_or_create(name=agent)
        key_row, raw_key = ApiKey.issue(owner, name="import_transcript")
        # Asking for a session not imported yet is a 404 by design: not worth a warning.
        request_log = logging.getLogger("django.request")
        level = request_log.level
        request_log.setLevel(logging.ERROR)
        limits = settings.MEMORYAPP_MAX_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        largest = max((p.stat().st_size for p in exports), default=0)
        # An export is JSON-encoded again for the request: room for escapes it did not have.
        settings.MEMORYAPP_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = max(
            limits[0], 2 * largest + 1024
        )
        try:
            with inprocess.client(raw_key) as client:
                status = import_paths(
                    client,
                    paths,
                    format=format,
                    session_key=session,
                    replace=replace,
                    write=self.stdout.write,
                )
        except TranscriptError as exc:
            raise CommandError(str(exc)) from None
        finally:
            settings.MEMORYAPP_MAX_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE = limits
            request_log.setLevel(level)
            key_row.delete()
        if status:
            raise CommandError("some transcripts could not be imported (see above)")
