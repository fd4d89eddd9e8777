"""`manage.py import_memory SYSTEM (FILE … | --url URL) --agent NAME [--dry-run]`: move an
agent's memory in from another memory system (memoryapp.core.moving): `mem0` (get_all
JSON files and its history.db), `letta` (agent files, .af) or `ams` (a running Redis
Agent Memory Server's address, or a file `export_memory ams` wrote). Prints a line per
session and memory: created, or skipped and why. `--dry-run` writes nothing.
Importing the same source again creates nothing twice. The agent is created when
absent (unless it is a dry run)."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from memoryapp.core.models import Agent
from memoryapp.core.moving import SYSTEMS, Source, SourceError, move_in


class Command(BaseCommand):
    help = "Move memory in from mem0, Letta or Redis Agent Memory Server."

    def add_arguments(self, parser):
        parser.add_argument("system", choices=sorted(SYSTEMS), help="where the memory is now")
        parser.add_argument("files", nargs="*", help="the files to read")
        parser.add_argument("--agent", required=True, help="the agent to import into")
        parser.add_argument("--url", default="", help="a server's address (ams)")
        for flag, what in (("--namespace", "a namespace"), ("--user-id", "a user id")):
            parser.add_argument(
                flag, action="append", default=[], help=f"{what} to look for sessions in (ams)"
            )
        parser.add_argument("--dry-run", action="store_true", help="say what would happen")

    def handle(self, *args, system: str, files: list[str], agent: str, url: str, **options):
        if bool(files) == bool(url):
            raise CommandError("give the files to read or --url, one of the two")
        try:
            read = [(Path(f).read_bytes(), Path(f).name) for f in files]
        except OSError as exc:
            raise CommandError(str(exc)) from None
        dry = options["dry_run"]
        ask = {"namespace": options["namespace"], "user_id": options["user_id"]}
        source = Source(files=read, url=url, options=ask)
        try:
            plan = SYSTEMS[system].read(source)
            with transaction.atomic():
                owner, _ = Agent.objects.get_or_create(name=agent)
                if dry:
                    report = move_in(owner, plan, dry_run=True, actor="system:import_memory")
                    transaction.set_rollback(True)  # an agent made for the dry run goes
            if not dry:
                report = move_in(owner, plan, dry_run=False, actor="system:import_memory")
        except SourceError as exc:
            raise CommandError(f"nothing imported: {exc}") from None
        for line in report.lines:
            text = f"  {line.text}" if line.text else ""
            self.stdout.write(f"{line.action:6} {line.kind} {line.source_id}: {line.why}{text}")
        self.stdout.write(f"{SYSTEMS[system].label} -> agent {agent}: {report.summary}")
