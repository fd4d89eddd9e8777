"""`manage.py export_memory SYSTEM --agent NAME [-o FILE]`: the agent's memory in another
memory system's format, so nothing keeps it here: `mem0` (get_all JSON) or `ams` (Redis
Agent Memory Server's working memory and long-term memory JSON, in one document
`import_memory ams` reads back)."""

import json

from django.core.management.base import BaseCommand, CommandError

from memoryapp.core.models import Agent
from memoryapp.core.moving import SYSTEMS


class Command(BaseCommand):
    help = "Export an agent's memory as mem0 or Redis Agent Memory Server JSON."

    def add_arguments(self, parser):
        exporting = sorted(name for name, s in SYSTEMS.items() if s.export is not None)
        parser.add_argument("system", choices=exporting, help="the format to write")
        parser.add_argument("--agent", required=True, help="the agent to export")
        parser.add_argument("-o", "--output", help="the file to write (default: standard output)")

    def handle(self, *args, system: str, agent: str, output: str | None, **options):
        owner = Agent.objects.filter(name=agent).first()
        if owner is None:
            raise CommandError(f"no agent named {agent!r}")
        text = json.dumps(SYSTEMS[system].export(owner), indent=2, ensure_ascii=False)
        if output is None:
            self.stdout.write(text)
            return
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        self.stderr.write(f"exported agent {agent} as {SYSTEMS[system].label} JSON to {output}")
