"""A finding's link to the message it came from keeps no foreign-key constraint in the
database (the ORM still sets it to null when the message is deleted one by one).

Both rows belong to one session and leave together, and PostgreSQL checked the
constraint at commit once per deleted message: in TTL cleanup of 1,000,000 messages,
8.9 of 10.4 seconds went to those checks, a million of them for this link alone
(issue 13). SQLite keeps its constraint (dropping one there rebuilds the table); only
PostgreSQL's is dropped."""

import django.db.models.deletion
from django.db import migrations, models

CONSTRAINT = "core_finding_message_id_4bac1c56_fk_core_message_id"


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f'ALTER TABLE core_finding DROP CONSTRAINT IF EXISTS "{CONSTRAINT}"')


def restore(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f'ALTER TABLE core_finding ADD CONSTRAINT "{CONSTRAINT}" FOREIGN KEY (message_id) '
            "REFERENCES core_message (id) DEFERRABLE INITIALLY DEFERRED"
        )


class Migration(migrations.Migration):
    dependencies = [("core", "0011_drop_redundant_session_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="finding",
                    name="message",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="core.message",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop, restore)],
        )
    ]
