import logging

from django.apps import AppConfig


class AmsConfig(AppConfig):
    name = "memoryapp.ams"
    label = "ams"
    verbose_name = "Redis Agent Memory Server API"

    def ready(self) -> None:
        # Its client's key is in the path: the development server's request log (runserver,
        # as ./bin/demo serves) would show it. gunicorn's logger redacts its own.
        from memoryapp.http.middleware import RedactKeys

        logging.getLogger("django.server").addFilter(RedactKeys())
