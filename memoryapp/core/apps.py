from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "memoryapp.core"
    label = "core"
    verbose_name = "Agent memory"
