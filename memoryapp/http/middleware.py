"""The middleware every API request goes through before any view sees it, each doing one
thing (settings.MIDDLEWARE runs them in the order listed here):

- KeyInPathMiddleware: the Redis Agent Memory Server API (memoryapp/ams) takes its key in
  the path, since its client sends no headers, and so may an MCP client: `/ams/<key>/v1/…`
  becomes `Authorization: Bearer <key>`, is routed as `/ams/v1/…`, and reads
  `/ams/[redacted]/v1/…` wherever the path is logged or shown (Django's request log,
  error answers, the WSGI environ gunicorn logs from). From here on /ams/ is an API path
  like /api/.
- AfterAnswerMiddleware: work a view leaves for after its answer (dispatching a turn's
  extraction job) runs when the server closes the response, after sending it.
- ApiJsonErrorsMiddleware: every API answer is JSON with `detail`, also those no API view
  gave (an unknown path, a bad method).
- AddressRateLimitMiddleware: per-address limits (too many requests, too many wrong keys):
  a JSON 429 with Retry-After before the body is read (`/api/v1/health` is exempt). The
  same round trip to the cache counts the request's key, whose limit authentication
  applies (http/auth.py).
- ApiBodyLimitMiddleware: too large is a JSON 413 (Django would raise RequestDataTooBig, a
  400, deep inside body parsing); a chunked body without Content-Length is read here
  (Django would read it as empty); a body shorter than its Content-Length that never
  arrives (gunicorn.conf.py bounds each read) is a JSON 408, and the connection closes.

The body's content is checked by the API's parser (`JsonParser`), after authentication.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, UnreadablePostError
from ninja.parser import Parser

from memoryapp.core import dispatch
from memoryapp.http.auth import address_refusal

AMS_PREFIX = "/ams/"
MCP_PREFIX = "/mcp/"
# Paths whose first segment after the prefix may be an API key (see _key_from_path).
KEYED_PREFIXES = (AMS_PREFIX, MCP_PREFIX)
API_PREFIXES = ("/api/", AMS_PREFIX, "/mcp")
REDACTED = "[redacted]"
# A key in a path, where clients that send no headers put it: Redis Agent Memory
# Server's (/ams/<key>/…) and MCP clients (/mcp/<key>). gunicorn.conf.py redacts the same
# from gunicorn's logs.
_KEY_IN_PATH = re.compile(r"(/(?:ams|mcp)/)[^/?#\s\"]*")


def redact_keys(text: str) -> str:
    return _KEY_IN_PATH.sub(r"\g<1>" + REDACTED, text)


class RedactKeys(logging.Filter):
    """Keeps keys in paths out of a logger's lines: the development server logs each raw
    request line (installed on `django.server` by memoryapp/ams/apps.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_keys(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_keys(a) if isinstance(a, str) else a for a in record.args)
        return True


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIXES)


class KeyInPathMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(KEYED_PREFIXES):
            _key_from_path(request)
        return self.get_response(request)


class AfterAnswerMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not _is_api(request):
            return self.get_response(request)
        with dispatch.collect_after_answer() as later:
            response = self.get_response(request)
        if later:  # run when the server closes the response, after sending it
            response._resource_closers.append(lambda: dispatch.run_after_answer(later))
        return response


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        return _as_json(request, response) if _is_api(request) else response


class AddressRateLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _is_api(request) and request.path != "/api/v1/health":
            refused = address_refusal(request)
            if refused is not None:
                return refused.response()
        return self.get_response(request)


class ApiBodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not _is_api(request):
            return self.get_response(request)
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
            request.body  # noqa: B018 (reads and caches, raising when too big)
        except RequestDataTooBig:
            return _too_large(limit)
        except UnreadablePostError:
            # Shorter than its Content-Length, and the rest never came (gunicorn.conf.py
            # bounds each read): the connection is closed after this answer.
            response = JsonResponse(
                {"detail": "the request body did not arrive (shorter than Content-Length)"},
                status=408,
            )
            response["Connection"] = "close"
            return response
        return self.get_response(request)


def _key_from_path(request: HttpRequest) -> None:
    """`/ams/<key>/<rest>` and `/mcp/<key>`: the key becomes the request's bearer key, the
    request is routed as `/ams/<rest>` (`/mcp`), and its path (what Django's request log
    and the error answers show) and the environ's copies of it read
    `/ams/[redacted]/<rest>` (`/mcp/[redacted]`)."""
    prefix = next(p for p in KEYED_PREFIXES if request.path_info.startswith(p))
    key, slash, rest = request.path_info.removeprefix(prefix).partition("/")
    script = request.path.removesuffix(request.path_info)
    tail = slash + rest
    shown = f"{prefix}{REDACTED}{tail}"
    request.META["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    request.__dict__.pop("headers", None)  # request.headers is cached from META
    request.path_info = prefix.rstrip("/") + tail
    request.path = script + shown
    request.META["PATH_INFO"] = shown
    for name in ("RAW_URI", "REQUEST_URI"):
        if name in request.META:
            request.META[name] = redact_keys(request.META[name])


def _as_json(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Every API error is JSON with `detail`, also those no API view answered: an
    unknown path (Django's 404 page), a method the path does not take (a bare 405)."""
    if request.path.startswith(AMS_PREFIX) and response.status_code in (301, 302, 307, 308):
        # Django's redirect to the path with a slash would name the redacted path.
        detail = (
            f"no such endpoint: {request.method} {request.path} (did you mean {request.path}/?)"
        )
        return JsonResponse({"detail": detail}, status=404)
    if response.status_code < 400 or response.get("Content-Type", "").startswith(
        "application/json"
    ):
        return response
    if response.status_code == 404:
        guide = "the README" if request.path.startswith(AMS_PREFIX) else "/api/v1/docs"
        detail = f"no such endpoint: {request.method} {request.path} (see {guide})"
    elif response.status_code == 405:
        detail = f"{request.method} is not allowed here; allowed: {response.get('Allow', '')}"
    else:
        detail = HTTPStatus(response.status_code).phrase
    answer = JsonResponse({"detail": detail}, status=response.status_code)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            answer[header] = response[header]
    return answer


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable_at(value: Any) -> tuple[list, str] | None:
    """Where the body holds what no database stores, and what: a NUL character or a lone
    surrogate in a string or a key (PostgreSQL refuses NUL in text and JSON; a lone
    surrogate is not Unicode text at all), or a number that is not finite (NaN,
    Infinity, 1e400: not JSON, and no JSON column takes it). Walks without recursion,
    so a deeply nested body cannot exhaust the stack."""
    stack: list[tuple[Any, list]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                return path, "text must not contain NUL characters or lone surrogates"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, "numbers must be finite (NaN and Infinity are not JSON)"
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                if _UNSTORABLE.search(key):
                    safe = key.encode("utf-8", "backslashreplace").decode()
                    return [*path, safe], "keys must not contain NUL characters or lone surrogates"
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in reversed(list(enumerate(item))))
    return None


class JsonParser(Parser):
    """django-ninja's JSON parser, noting (not refusing: the parser runs before the view
    and a refusal here would be a 400 without the field's name) where the body holds
    what no database stores. The API refuses it with a 422 naming the field, after
    authentication, before anything is stored (`contract._strict_request`)."""

    def parse_body(self, request: HttpRequest) -> Any:
        data = json.loads(request.body, parse_constant=float)  # NaN: noted below, refused
        request.unstorable = unstorable_at(data)
        return data


def _too_large(limit: int) -> JsonResponse:
    return JsonResponse(
        {"detail": f"request body is larger than the limit of {limit} bytes"}, status=413
    )
