"""Full-text search indexes: FTS5 tables kept in sync by triggers on SQLite, GIN indexes
on to_tsvector expressions on PostgreSQL (used by memoryapp.core.search)."""

from django.db import migrations

SQLITE_TABLES = {
    # fts table: (source table, indexed columns)
    "core_message_fts": ("core_message", ["content"]),
    "core_finding_fts": ("core_finding", ["fact", "query"]),
    "core_memory_fts": ("core_memory", ["content"]),
}

POSTGRES_INDEXES = {
    # Search over an agent's messages, findings and memories.
    "core_message_fts_gin": ("core_message", "content"),
    "core_finding_fts_gin": ("core_finding", "fact || ' ' || query"),
    "core_memory_fts_gin": ("core_memory", "content"),
}


def sqlite_statements(fts: str, source: str, columns: list[str]) -> list[str]:
    cols = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    old = ", ".join(f"old.{c}" for c in columns)
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5({cols}, content='{source}', "
        f"content_rowid='id', tokenize='porter unicode61')",
        f"CREATE TRIGGER {fts}_ai AFTER INSERT ON {source} BEGIN "
        f"INSERT INTO {fts}(rowid, {cols}) VALUES (new.id, {new}); END",
        f"CREATE TRIGGER {fts}_ad AFTER DELETE ON {source} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.id, {old}); END",
        f"CREATE TRIGGER {fts}_au AFTER UPDATE ON {source} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.id, {old}); "
        f"INSERT INTO {fts}(rowid, {cols}) VALUES (new.id, {new}); END",
        f"INSERT INTO {fts}({fts}) VALUES ('rebuild')",
    ]


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for fts, (source, columns) in SQLITE_TABLES.items():
            for statement in sqlite_statements(fts, source, columns):
                schema_editor.execute(statement)
    elif vendor == "postgresql":
        for name, (table, expression) in POSTGRES_INDEXES.items():
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
                f"USING gin (to_tsvector('english'::regconfig, {expression}))"
            )


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for fts in SQLITE_TABLES:
            for suffix in ("ai", "ad", "au"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
            schema_editor.execute(f"DROP TABLE IF EXISTS {fts}")
    elif vendor == "postgresql":
        for name in POSTGRES_INDEXES:
            schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("core", "0002_memory_engine")]
    operations = [migrations.RunPython(forwards, backwards)]
