from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "memoryapp.api"
    label = "memoryapi"
    verbose_name = "Agent API"
