"""Drop the single-column session indexes of messages and turns: their unique
constraints, (session, seq) and (session, iteration), lead with the session and serve
every lookup by session. Besides costing each append a write, the message one misled
PostgreSQL on a session that had grown since its statistics were taken: it read all of a
100,000-message session through it and sorted, 42 ms, instead of reading the newest 101
backwards on (session, seq), 0.1 ms (issue 13).

The indexes are dropped by name (DROP INDEX, the same on SQLite and PostgreSQL): an
AlterField would rebuild the message table on SQLite and drop its search triggers."""

import django.db.models.deletion
from django.db import migrations, models

INDEXES = [
    ("core_message", "core_message_session_id_45a7f8cc"),
    ("core_turn", "core_turn_session_id_37019267"),
]


class Migration(migrations.Migration):
    dependencies = [("core", "0010_message_search_triggers")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="session",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="core.session",
                    ),
                ),
                migrations.AlterField(
                    model_name="turn",
                    name="session",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="turns",
                        to="core.session",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX "{name}" ON "{table}" ("session_id")',
                )
                for table, name in INDEXES
            ],
        )
    ]
