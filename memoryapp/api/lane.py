"""The agent's hottest requests, handed to their API view without the page middleware.

An agent's every turn appends (`POST /api/v1/sessions/{key}/turns`) and restores
(`GET …/history` or `GET …/context`), and `GET /api/v1/agent` is its cheapest call.
Through Django's whole stack such a request also runs the middleware the dashboard needs
(session, common, CSRF, authentication, messages, clickjacking, htmx) and the URL
resolver's walk over every pattern. None of them changes an API answer but for two
headers: after an agent's pause, with its caches cold, that code cost about 0.3 ms of
a 2.8 ms `GET /agent` in process.

ApiBodyLimitMiddleware (which still ran, after the security, database, CSP and static
middleware) hands these paths to the same django-ninja view the resolver would find, with
the same `request.resolver_match`; every other path, and these with a trailing slash or
anything else, goes the whole way as before, and so does a request with cookies. What
the skipped middleware would have done for such a request is done by their own code
(`respond`): CommonMiddleware's request step (the Host checked against ALLOWED_HOSTS, a
400 otherwise), the response steps of XFrameOptionsMiddleware and CommonMiddleware
(`X-Frame-Options`, `Content-Length`), and an exception the view raised answered as
Django's handler answers it. tests/test_lane.py
holds each answer equal, headers and cookies included, to the whole stack's, for good
and bad requests alike. MEMORYAPP_API_LANE=false sends every request the whole way.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.handlers.exception import response_for_exception
from django.http import HttpRequest, HttpResponse
from django.urls import ResolverMatch, resolve
from django.utils.module_loading import import_string

_SESSION_PATH = re.compile(r"/api/v1/sessions/([^/]+)/(turns|history|context)\Z")
_AGENT_PATH = "/api/v1/agent"

# The middleware after ApiBodyLimitMiddleware whose steps change an API answer.
_COMMON = "django.middleware.common.CommonMiddleware"
_X_FRAME = "django.middleware.clickjacking.XFrameOptionsMiddleware"


@functools.cache
def _template_match(template: str) -> ResolverMatch:
    """What the resolver matches for a path template (resolved once per process)."""
    return resolve(template.replace("{key}", "key"))


@functools.cache
def _middleware(path: str) -> Any:
    """An instance of the middleware at `path`, for its process_* steps (the lane calls
    them as Django's handler would; they keep nothing between requests)."""
    return import_string(path)(lambda request: None)


def route(request: HttpRequest) -> tuple[Callable[..., Any], dict[str, str]] | None:
    """The view and keyword arguments of a hot path (its resolver_match set), else None.
    A request with cookies goes the whole way: the session and CSRF middleware answer a
    malformed session or CSRF cookie with cookies of their own (an agent sends none)."""
    if not settings.MEMORYAPP_API_LANE or request.META.get("HTTP_COOKIE"):
        return None
    path = request.path_info
    if path == _AGENT_PATH:
        template, kwargs = _AGENT_PATH, {}
    else:
        found = _SESSION_PATH.match(path)
        if found is None:
            return None
        template = f"/api/v1/sessions/{{key}}/{found[2]}"
        kwargs = {"key": found[1]}
    cached = _template_match(template)
    request.resolver_match = ResolverMatch(
        cached.func,
        (),
        kwargs,
        url_name=cached.url_name,
        app_names=cached.app_names,
        namespaces=cached.namespaces,
        route=cached.route,
        captured_kwargs=kwargs,
    )
    return cached.func, kwargs


def respond(request: HttpRequest, view: Callable[..., Any], kwargs: dict[str, str]) -> HttpResponse:
    """The answer of a routed request, as the whole stack gives it."""
    common = _middleware(_COMMON)
    try:
        early = common.process_request(request)
    except Exception as exc:  # raised before any view: answered as that middleware's
        return response_for_exception(request, exc)
    if early is not None:
        return common.process_response(request, early)
    try:
        response = None
        if request.method == "POST" and request.path_info.endswith("/turns"):
            from memoryapp.api.sessions import post_turn_at_once

            response = post_turn_at_once(request, kwargs["key"])
        elif request.method == "GET" and request.path_info.endswith("/history"):
            from memoryapp.api.sessions import get_history_at_once

            response = get_history_at_once(request, kwargs["key"])
        if response is None:
            response = view(request, **kwargs)
    except Exception as exc:
        response = view_failed(request, exc)
    response = _middleware(_X_FRAME).process_response(request, response)
    return common.process_response(request, response)


def view_failed(request: HttpRequest, exc: Exception) -> HttpResponse:
    """What Django's handler answers for an exception a view raised: the middleware's
    process_exception (DatabaseUnavailableMiddleware's 503), else its error answer. (The
    API's own handlers answer every exception of its views, so none should reach here.)"""
    for process_exception in _exception_middleware():
        response = process_exception(request, exc)
        if response is not None:
            return response
    return response_for_exception(request, exc)


@functools.cache
def _exception_middleware() -> list[Callable[[HttpRequest, Exception], HttpResponse | None]]:
    """The process_exception of each middleware that has one, in the order Django's
    handler calls them (the last in MIDDLEWARE first)."""
    return [
        _middleware(path).process_exception
        for path in reversed(settings.MIDDLEWARE)
        if hasattr(import_string(path), "process_exception")
    ]
