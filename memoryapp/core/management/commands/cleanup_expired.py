"""`manage.py cleanup_expired [--dry-run]`: the TTL cleanup the beat schedule runs."""

from django.core.management.base import BaseCommand, CommandError

from memoryapp.core.cleanup import run_cleanup


class Command(BaseCommand):
    help = "Remove expired sessions and everything under them (or, with --dry-run, count)."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count, remove nothing")

    def handle(self, *args, dry_run: bool, **options):
        run = run_cleanup(dry_run=dry_run, triggered_by="manage.py cleanup_expired")
        if run is None:
            raise CommandError("another cleanup is running; try again when it has finished")
        verb = "would remove" if dry_run else "removed"
        self.stdout.write(
            f"{run.status}: {verb} {run.sessions_removed} sessions, {run.messages_removed} "
            f"messages ({run.rows_removed} rows); {run.memories_expired} memories expired"
        )
        if run.error:
            raise CommandError(run.error)
