"""`manage.py create_agent NAME`: create an agent (or reuse it) and issue an API key.

The key is printed alone on the last line, so scripts can take it with `tail -n 1`.
"""

from django.core.management.base import BaseCommand, CommandError
from django.utils.text import slugify

from memoryapp.core.models import Agent, ApiKey


class Command(BaseCommand):
    help = "Create an agent and an API key for it; prints the key alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--key-name", default="", help="a label for the key")

    def handle(self, *args, name: str, key_name: str, **options):
        if slugify(name) != name or not name or len(name) > 64:
            raise CommandError(
                f"agent name {name!r} must be a slug (lowercase letters, digits, - and _)"
            )
        agent, created = Agent.objects.get_or_create(name=name)
        _, raw = ApiKey.issue(agent, name=key_name)
        verb = "Created agent" if created else "Agent already exists:"
        self.stdout.write(f"{verb} {agent.name}. Its API key, shown once:")
        self.stdout.write(raw)
