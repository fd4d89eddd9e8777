"""Admin pages for every model, with the columns, searches and filters an operator needs."""

from django.contrib import admin

from memoryapp.core.models import (
    Agent,
    ApiKey,
    CleanupRun,
    ContextItem,
    ExtractionJob,
    Finding,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    Message,
    PendingToolOutput,
    Session,
    Subtask,
    ToolCall,
    Turn,
)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "ttl_seconds", "max_messages", "token_budget", "encoding", "created_at"]
    search_fields = ["name"]
    list_filter = ["encoding"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "agent", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["agent", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "agent__name"]
    # Keys are issued by `manage.py create_agent` (shown once); here they can be revoked.
    readonly_fields = ["agent", "prefix", "created_at", "last_used_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        for key in queryset:
            key.revoke()


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = [
        "key",
        "agent",
        "status",
        "message_count",
        "token_count",
        "turn_count",
        "last_activity_at",
        "expires_at",
    ]
    list_filter = ["agent", "status"]
    search_fields = ["key", "goal"]
    date_hierarchy = "last_activity_at"
    list_select_related = ["agent"]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["session", "seq", "role", "token_count", "created_at"]
    list_filter = ["role"]
    search_fields = ["content", "session__key"]
    list_select_related = ["session__agent"]
    raw_id_fields = ["session", "turn"]


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = [
        "session",
        "iteration",
        "message_count",
        "input_tokens",
        "output_tokens",
        "tool_call_count",
        "model",
        "timestamp",
    ]
    list_filter = ["usage_source", "model"]
    search_fields = ["session__key", "model"]
    list_select_related = ["session__agent"]
    raw_id_fields = ["session"]


@admin.register(ToolCall)
class ToolCallAdmin(admin.ModelAdmin):
    list_display = ["tool", "session", "success", "output_size", "file_path", "created_at"]
    list_filter = ["success", "tool"]
    search_fields = ["tool", "query", "file_path"]
    list_select_related = ["session__agent"]
    raw_id_fields = ["session", "turn"]


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = ["tool", "session", "fact", "success", "source", "updated_at"]
    list_filter = ["source", "success", "tool"]
    search_fields = ["fact", "query", "file_path"]
    list_select_related = ["session__agent"]
    raw_id_fields = ["session"]


@admin.register(ContextItem)
class ContextItemAdmin(admin.ModelAdmin):
    list_display = ["key", "session", "source", "confidence", "updated_at"]
    list_filter = ["source"]
    search_fields = ["key", "session__key"]
    list_select_related = ["session__agent"]
    raw_id_fields = ["session"]


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    list_display = [
        "content",
        "agent",
        "memory_type",
        "confidence",
        "status",
        "source",
        "updated_at",
    ]
    list_filter = ["agent", "memory_type", "status", "source"]
    search_fields = ["content"]
    list_select_related = ["agent"]
    raw_id_fields = ["session", "superseded_by"]


@admin.register(MemoryEvent)
class MemoryEventAdmin(admin.ModelAdmin):
    list_display = ["target_kind", "target_id", "action", "actor", "created_at"]
    list_filter = ["target_kind", "action", "agent"]
    search_fields = ["actor"]


@admin.register(Subtask)
class SubtaskAdmin(admin.ModelAdmin):
    list_display = ["title", "session", "status", "position", "updated_at"]
    list_filter = ["status"]
    search_fields = ["title"]
    raw_id_fields = ["session"]


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(admin.ModelAdmin):
    list_display = ["key", "session", "created_at"]
    search_fields = ["key"]
    raw_id_fields = ["session"]


@admin.register(ExtractionJob)
class ExtractionJobAdmin(admin.ModelAdmin):
    list_display = ["turn", "status", "attempts", "findings_added", "created_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["last_error", "session__key"]
    list_select_related = ["turn__session__agent"]
    raw_id_fields = ["turn", "session"]


@admin.register(PendingToolOutput)
class PendingToolOutputAdmin(admin.ModelAdmin):
    list_display = ["tool_call"]
    search_fields = ["tool_call__tool"]
    raw_id_fields = ["tool_call"]


@admin.register(CleanupRun)
class CleanupRunAdmin(admin.ModelAdmin):
    list_display = [
        "started_at",
        "dry_run",
        "status",
        "sessions_removed",
        "messages_removed",
        "rows_removed",
        "memories_expired",
        "finished_at",
    ]
    list_filter = ["status", "dry_run"]
    search_fields = ["error", "triggered_by"]
