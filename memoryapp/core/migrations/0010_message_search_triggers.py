"""0009 rebuilt core_message on SQLite (a conditional unique constraint), and a rebuilt
table loses its triggers: the full-text index of messages (0003) stopped following
writes. Recreate the triggers and rebuild the index from the table. PostgreSQL's GIN
index is on the table itself and needs nothing.

tests/test_commands.py checks after migrating that every full-text table has its three
triggers, so a later migration that rebuilds a table fails a test instead of silently
leaving search behind."""

from django.db import migrations

FTS, SOURCE, COLUMN = "core_message_fts", "core_message", "content"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for statement in (
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_ai AFTER INSERT ON {SOURCE} BEGIN "
        f"INSERT INTO {FTS}(rowid, {COLUMN}) VALUES (new.id, new.{COLUMN}); END",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_ad AFTER DELETE ON {SOURCE} BEGIN "
        f"INSERT INTO {FTS}({FTS}, rowid, {COLUMN}) VALUES ('delete', old.id, old.{COLUMN}); END",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_au AFTER UPDATE ON {SOURCE} BEGIN "
        f"INSERT INTO {FTS}({FTS}, rowid, {COLUMN}) VALUES ('delete', old.id, old.{COLUMN}); "
        f"INSERT INTO {FTS}(rowid, {COLUMN}) VALUES (new.id, new.{COLUMN}); END",
        # Writes made while the triggers were missing: the index is made again from the table.
        f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')",
    ):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("core", "0009_message_client_ids")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
