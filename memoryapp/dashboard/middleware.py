"""The database unreachable while a page is asked for: a 503 that says so, with
Retry-After, instead of a server error page. (The API answers its own JSON 503.)"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5

# No template: rendering one would ask the database for the user again.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Unavailable · memoryapp</title>
<link rel="stylesheet" href="/static/memoryapp.css"></head>
<body><main><h1>The database is unreachable</h1>
<p>Nothing was changed. This page will work again once the database is back; try again
in a few seconds.</p></main></body></html>
"""


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, OperationalError | InterfaceError):
            return None
        logger.warning("page %s failed, database unreachable: %s", request.path, exc)
        if request.headers.get("HX-Request"):
            body, content_type = "The database is unreachable; try again shortly.", "text/plain"
        else:
            body, content_type = PAGE, "text/html"
        response = HttpResponse(body, status=503, content_type=f"{content_type}; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
