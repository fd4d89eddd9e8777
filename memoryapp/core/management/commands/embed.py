"""`manage.py embed [--agent NAME]`: make every missing or out-of-date vector now, with
progress (what the background does a batch at a time; memoryapp.core.embeddings)."""

from django.core.management.base import BaseCommand, CommandError

from memoryapp.core import embeddings
from memoryapp.core.models import Agent
from memoryapp.lib.embedding import EmbedderError


class Command(BaseCommand):
    help = "Embed the memories and findings whose vectors are missing or out of date."

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="only this agent's (its name)")

    def handle(self, *args, agent: str | None, **options):
        embedder = embeddings.current()
        if embedder is None:
            raise CommandError("embedding is off (MEMORYAPP_EMBEDDER=off)")
        chosen = None
        if agent:
            chosen = Agent.objects.filter(name=agent).first()
            if chosen is None:
                raise CommandError(f"no agent named {agent!r}")
        total = 0
        try:
            while done := embeddings.embed_pending(limit=embeddings.BATCH * 4, agent=chosen):
                total += done
                self.stdout.write(f"embedded {total}")
        except EmbedderError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"done: {total} embedded with {embedder.name}")
