"""The JSON API agents talk to (django-ninja), under /api/v1."""
