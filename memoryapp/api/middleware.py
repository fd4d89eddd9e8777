"""Checks an API request's body before any view sees it.

- Too large: Django would raise RequestDataTooBig (a 400) deep inside body parsing;
  agents deserve to know the request was too large, so API paths get a JSON 413.
- Not a JSON object, or text no database can store (a NUL character; a lone surrogate,
  which is not Unicode text at all): a 422 naming the field, before anything is stored.
  PostgreSQL refuses NUL in text and JSON, so without this check such a request was a 500.

The parsed body is kept on the request (`request.api_json`), and the API's parser
(`JsonParser`) reads it from there: the body is parsed once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja.parser import Parser

from memoryapp.api.auth import client_address
from memoryapp.core import ratelimit


class ApiBodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/") and request.path != "/api/v1/health":
            refused = _over_address_limits(request)
            if refused is not None:
                return refused
        if request.path.startswith("/api/"):
            limit = settings.MEMORYAPP_MAX_BODY_BYTES
            try:
                declared = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return JsonResponse({"detail": "Content-Length is not a number"}, status=400)
            if declared > limit:
                return _too_large(limit)
            if not declared and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", ""):
                # No Content-Length: Django would read the body as empty (a misleading 422).
                # Read the chunks ourselves (the server de-chunks wsgi.input), up to the limit.
                stream = request.META.get("wsgi.input")
                data = stream.read(limit + 1) if stream is not None else b""
                if len(data) > limit:
                    return _too_large(limit)
                request._body = data
            try:
                body = request.body  # reads and caches, raising when too big
            except RequestDataTooBig:
                return _too_large(limit)
            if body:
                refused = _check_json(request, body)
                if refused is not None:
                    return refused
            return _as_json(request, self.get_response(request))
        return self.get_response(request)


def _as_json(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Every API error is JSON with `detail`, also those no API view answered: an
    unknown path (Django's 404 page), a method the path does not take (a bare 405)."""
    if response.status_code < 400 or response.get("Content-Type", "").startswith(
        "application/json"
    ):
        return response
    if response.status_code == 404:
        detail = f"no such endpoint: {request.method} {request.path} (see /api/v1/docs)"
    elif response.status_code == 405:
        detail = f"{request.method} is not allowed here; allowed: {response.get('Allow', '')}"
    else:
        detail = HTTPStatus(response.status_code).phrase
    answer = JsonResponse({"detail": detail}, status=response.status_code)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            answer[header] = response[header]
    return answer


def _over_address_limits(request: HttpRequest) -> JsonResponse | None:
    """Too many requests, or too many wrong keys, from one client address: 429."""
    address = client_address(request)
    failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
    retry_after = ratelimit.blocked("auth-failure", address, failures)
    detail = f"too many requests with a wrong API key from {address}"
    if retry_after is None:
        limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_ADDRESS)
        retry_after = ratelimit.hit("address", address, limit)
        detail = f"more than {limit.count} requests in {limit.seconds} seconds from {address}"
    if retry_after is None:
        return None
    response = JsonResponse({"detail": f"{detail}; retry after {retry_after} seconds"}, status=429)
    response["Retry-After"] = str(retry_after)
    return response


def _check_json(request: HttpRequest, body: bytes) -> JsonResponse | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None  # the API answers its own 400 for a body that is not JSON
    if not isinstance(data, dict):
        return _invalid([], "the body must be a JSON object")
    path = _bad_text(data, [])
    if path is not None:
        return _invalid(path, "text must not contain NUL characters or lone surrogates")
    request.api_json = data
    return None


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _bad_text(value: Any, path: list) -> list | None:
    """The path of the first string (key or value) holding a NUL or a lone surrogate."""
    if isinstance(value, str):
        return path if _UNSTORABLE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _UNSTORABLE.search(key):
                return [*path, key.encode("utf-8", "backslashreplace").decode()]
            found = _bad_text(item, [*path, key])
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _bad_text(item, [*path, index])
            if found is not None:
                return found
    return None


def _invalid(path: list, message: str) -> JsonResponse:
    """The shape of the API's other 422s (django-ninja's validation errors)."""
    return JsonResponse(
        {"detail": [{"type": "value_error", "loc": ["body", "payload", *path], "msg": message}]},
        status=422,
    )


class JsonParser(Parser):
    """django-ninja's JSON parser, reading the body the middleware already parsed."""

    def parse_body(self, request: HttpRequest) -> dict:
        data = getattr(request, "api_json", None)
        return data if data is not None else super().parse_body(request)


def _too_large(limit: int) -> JsonResponse:
    return JsonResponse(
        {"detail": f"request body is larger than the limit of {limit} bytes"}, status=413
    )
