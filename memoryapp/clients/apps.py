from django.apps import AppConfig


class ClientsConfig(AppConfig):
    name = "memoryapp.clients"
    label = "memoryclients"
    verbose_name = "Client commands"
