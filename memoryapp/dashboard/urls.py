from django.urls import path

from memoryapp.dashboard import (
    cleanup_views,
    memory_views,
    moving_views,
    search_views,
    session_views,
    settings_views,
    views,
)

app_name = "dashboard"
urlpatterns = [
    path("", views.agents_overview, name="agents"),
    path("cleanup/", cleanup_views.cleanup_page, name="cleanup"),
    path("cleanup/run/", cleanup_views.cleanup_start, name="cleanup_start"),
    path("cleanup/runs/<int:run_id>/", cleanup_views.cleanup_progress, name="cleanup_progress"),
    path("cleanup/extend/", cleanup_views.extend_sessions, name="cleanup_extend"),
    path("agents/<slug:name>/", views.agent_detail, name="agent"),
    path("agents/<slug:name>/sessions/<str:key>/", session_views.session_detail, name="session"),
    path("agents/<slug:name>/sessions/<str:key>/older/", session_views.session_older, name="older"),
    path("agents/<slug:name>/sessions/<str:key>/live/", session_views.session_live, name="live"),
    path("agents/<slug:name>/settings/", settings_views.agent_settings, name="agent_settings"),
    path(
        "agents/<slug:name>/settings/retention/",
        settings_views.retention_preview,
        name="retention_preview",
    ),
    path("agents/<slug:name>/move/", moving_views.moving_page, name="moving"),
    path(
        "agents/<slug:name>/move/export/<slug:system>/",
        moving_views.export_memory,
        name="moving_export",
    ),
    path("agents/<slug:name>/keys/", settings_views.create_key, name="create_key"),
    path(
        "agents/<slug:name>/keys/<int:key_id>/revoke/", settings_views.revoke_key, name="revoke_key"
    ),
    path("agents/<slug:name>/memories/", memory_views.memories, name="memories"),
    path(
        "agents/<slug:name>/memories/add/",
        memory_views.item_add,
        {"kind": "memory"},
        name="add_memory",
    ),
    path("agents/<slug:name>/memories/bulk/", memory_views.memories_bulk, name="memories_bulk"),
    path(
        "agents/<slug:name>/sessions/<str:key>/add/<str:kind>/",
        memory_views.item_add,
        name="add_item",
    ),
    path("agents/<slug:name>/search/", search_views.search_page, name="search"),
    path(
        "agents/<slug:name>/memories/<int:pk>/<str:action>/",
        memory_views.memory_status,
        name="memory_status",
    ),
    path(
        "agents/<slug:name>/items/<str:kind>/<int:pk>/edit/",
        memory_views.item_edit,
        name="item_edit",
    ),
    path(
        "agents/<slug:name>/items/<str:kind>/<int:pk>/history/",
        memory_views.item_history,
        name="item_history",
    ),
    path(
        "agents/<slug:name>/items/<str:kind>/<int:pk>/revert/<int:event_id>/",
        memory_views.item_revert,
        name="item_revert",
    ),
]
