"""memoryapp: a memory server and dashboard for LLM agents."""

from memoryapp.celery import app as celery_app

__all__ = ["celery_app"]
