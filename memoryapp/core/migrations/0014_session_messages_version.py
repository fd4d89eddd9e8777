"""On PostgreSQL, a session's row counts the changes made to its stored messages in place:
`core_session.messages_version`, raised by a trigger after any UPDATE of `core_message`
(an edit or removal through the Redis Agent Memory Server API, the admin, raw SQL), in
the same transaction. An API process keeps a copy of each session's written messages
for its restores (memoryapp/api/restores.py) and reads only what was appended since,
while the version it holds is the row's; messages deleted or inserted again are told by
their count and largest id instead (a trigger on DELETE copies every deleted row: TTL
cleanup's million-row deletes took three times as long with one).

The column is the database's alone: the model does not declare it, so no save of a
Session (which writes every field it declares) can set it back. SQLite has neither: its
restores read their messages every time."""

from django.db import migrations

FORWARD = [
    "ALTER TABLE core_session ADD COLUMN messages_version bigint NOT NULL DEFAULT 0",
    """
    CREATE FUNCTION core_message_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE core_session SET messages_version = messages_version + 1
        WHERE id IN (SELECT session_id FROM old_rows UNION SELECT session_id FROM new_rows);
        RETURN NULL;
    END
    $$
    """,
    "CREATE TRIGGER core_message_changed AFTER UPDATE ON core_message "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION core_message_changed()",
]

BACKWARD = [
    "DROP TRIGGER IF EXISTS core_message_changed ON core_message",
    "DROP FUNCTION IF EXISTS core_message_changed()",
    "ALTER TABLE core_session DROP COLUMN IF EXISTS messages_version",
]


def _run(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("core", "0013_summary_limits")]
    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD))]
