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
anything else, goes the whole way as before. What the skipped middleware would have
added to the answer is added here: `Content-Length` (CommonMiddleware) and
`X-Frame-Options` (XFrameOptionsMiddleware). tests/test_lane.py holds each answer equal,
headers included, to the whole stack's, for good and bad requests alike.
MEMORYAPP_API_LANE=false sends every request the whole way (for measurements).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import ResolverMatch, resolve

_SESSION_PATH = re.compile(r"/api/v1/sessions/([^/]+)/(turns|history|context)\Z")
_AGENT_PATH = "/api/v1/agent"

# Path template -> what the resolver matched for it (resolved once per process).
_matches: dict[str, ResolverMatch] = {}


def _template_match(template: str) -> ResolverMatch:
    match = _matches.get(template)
    if match is None:
        match = _matches[template] = resolve(template.replace("{key}", "key"))
    return match


def route(request: HttpRequest) -> tuple[Callable[..., Any], dict[str, str]] | None:
    """The view and keyword arguments of a hot path (its resolver_match set), else None."""
    if not settings.MEMORYAPP_API_LANE:
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


def finish(response: HttpResponse) -> HttpResponse:
    """The headers the middleware after ApiBodyLimitMiddleware would have added."""
    if response.get("X-Frame-Options") is None and not getattr(
        response, "xframe_options_exempt", False
    ):
        response["X-Frame-Options"] = getattr(settings, "X_FRAME_OPTIONS", "DENY").upper()
    if not response.streaming and not response.has_header("Content-Length"):
        response.headers["Content-Length"] = str(len(response.content))
    return response
