import logging

from django.apps import AppConfig


class AmsConfig(AppConfig):
    name = "memoryapp.ams"
    label = "ams"
    verbose_name = "Redis Agent Memory Server API"

    def ready(self) -> None:
        from memoryapp.ams import moving
        from memoryapp.ams.export import RECORDS
        from memoryapp.core.export import add_memory_section
        from memoryapp.http.middleware import RedactKeys

        # A memory's record goes with it in every export and import (core knows it only
        # as a section).
        add_memory_section(RECORDS)
        # Memory moves in from a Redis Agent Memory Server, and out to one.
        moving.register()
        # Its client's key is in the path: the development server's request log (runserver,
        # as ./bin/demo serves) would show it. gunicorn's logger redacts its own.
        logging.getLogger("django.server").addFilter(RedactKeys())
