"""The Celery app: configured from Django settings (CELERY_ namespace), JSON only.

A worker keeps its database connection from task to task as the web process keeps its
own from request to request (closed past CONN_MAX_AGE, or when it fails its health check
after errors; checked before its next statement): Celery's Django fixup would close it
before and after every task (CELERY_DB_REUSE_MAX unset), and a new connection per
extraction job cost more than the job (4 ms a job on a kept connection, 10-11 ms on a new
one, in process here; on the same cores as the server), and would prepare the job's
statements anew each time.
"""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")

app = Celery("memoryapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _connections_as_between_requests(sender=None, **kwargs) -> None:
    """Before and after each task what Django does before and after each request:
    close a connection past its age, with errors, or (CONN_MAX_AGE=0) any; the next
    statement checks a kept one first. Not for a task run in a request (eager)."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()
