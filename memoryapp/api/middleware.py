"""Answers an oversized API request with 413 before any view sees it.

Django would raise RequestDataTooBig (a 400) deep inside body parsing; agents deserve to
know the request was too large, so API paths get a JSON 413 that stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse


class ApiBodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            limit = settings.MEMORYAPP_MAX_BODY_BYTES
            try:
                declared = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return JsonResponse({"detail": "Content-Length is not a number"}, status=400)
            if declared > limit:
                return _too_large(limit)
            try:
                request.body  # noqa: B018 - reads and caches, raising when too big
            except RequestDataTooBig:
                return _too_large(limit)
        return self.get_response(request)


def _too_large(limit: int) -> JsonResponse:
    return JsonResponse(
        {"detail": f"request body is larger than the limit of {limit} bytes"}, status=413
    )
