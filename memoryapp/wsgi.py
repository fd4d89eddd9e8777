"""WSGI entry point (gunicorn memoryapp.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")
application = get_wsgi_application()
