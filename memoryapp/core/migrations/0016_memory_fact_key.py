"""Memories' content_key by what the fact says (relevance.fact_key): the key that tells the
same fact said again now ignores articles and punctuation, keeping negations and order."""

import hashlib

from django.db import migrations

from memoryapp.lib.relevance import fact_key


def rekey(apps, schema_editor):
    Memory = apps.get_model("core", "Memory")
    changed = []
    for memory in Memory.objects.only("id", "content", "content_key").iterator(chunk_size=2000):
        key = hashlib.sha256(fact_key(memory.content).encode()).hexdigest()
        if key != memory.content_key:
            memory.content_key = key
            changed.append(memory)
        if len(changed) >= 2000:
            Memory.objects.bulk_update(changed, ["content_key"])
            changed = []
    Memory.objects.bulk_update(changed, ["content_key"])


class Migration(migrations.Migration):
    dependencies = [("core", "0015_embedding_text_digest")]

    operations = [migrations.RunPython(rekey, migrations.RunPython.noop)]
