from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "memoryapp.core"
    label = "core"
    verbose_name = "Agent memory"

    def ready(self) -> None:
        # The Celery tasks registered in every process, the web's own included: dispatch
        # looks the extraction task up by its name (memoryapp.core.dispatch).
        from memoryapp.core import tasks  # noqa: F401
