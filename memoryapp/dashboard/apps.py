from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "memoryapp.dashboard"
    label = "dashboard"
    verbose_name = "Dashboard"
