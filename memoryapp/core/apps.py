from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "memoryapp.core"
    label = "core"
    verbose_name = "Agent memory"

    def ready(self) -> None:
        from django.conf import settings
        from django.core.signals import request_started
        from django.db.models.signals import post_save

        # The Celery tasks registered in every process, the web's own included: dispatch
        # looks the extraction task up by its name (memoryapp.core.dispatch).
        from memoryapp.core import embeddings, moving, tasks  # noqa: F401
        from memoryapp.core.formats import letta, mem0
        from memoryapp.core.models import Finding, Memory

        # The memory systems memory moves in from (the AMS API adds its own).
        for system in (mem0.SYSTEM_ENTRY, letta.SYSTEM_ENTRY):
            moving.add_system(system)
        # An imported memory's origin goes with it in memoryapp's own export and import.
        from memoryapp.core.export import add_memory_section

        add_memory_section(moving.ORIGINS)
        # A memory or finding written is embedded soon after, off the request path.
        for model in (Memory, Finding):
            post_save.connect(
                embeddings.embed_after_commit, sender=model, dispatch_uid=f"embed-{model.KIND}"
            )
        # Without a broker (the embedded setup), the first request of a process starts
        # the background thread on what an earlier process left unembedded.
        if settings.CELERY_TASK_ALWAYS_EAGER:
            request_started.connect(embeddings.catch_up, dispatch_uid=embeddings.CATCH_UP)
