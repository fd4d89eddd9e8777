"""Admin pages for what Redis Agent Memory Server's clients add to a memory (its record,
with its topics and entities inline)."""

from django.contrib import admin

from memoryapp.ams.models import MemoryRecord, RecordTag


class RecordTagInline(admin.TabularInline):
    model = RecordTag
    extra = 0


@admin.register(MemoryRecord)
class MemoryRecordAdmin(admin.ModelAdmin):
    list_display = ["record_id", "agent", "memory", "memory_type", "namespace", "user_id"]
    list_filter = ["agent", "memory_type"]
    search_fields = ["record_id", "namespace", "user_id", "session_key", "memory__content"]
    list_select_related = ["agent", "memory"]
    raw_id_fields = ["memory", "working_memory"]
    inlines = [RecordTagInline]
