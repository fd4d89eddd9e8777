"""The agent API, /api/v1: one router per resource (sessions and turns, context,
findings, memories, tools, search, agent), the error contract they share, and health.

Views stay thin: they validate input (schemas, where every request and response shape is
defined once), resolve the key's agent, and call the model layer (memoryapp.core). Every
error is JSON `{"detail": ...}`: a 4xx for a request that changes nothing, a 503 with
Retry-After when the database is unreachable, a 500 with an error id for a bug.
"""

from __future__ import annotations

import functools
import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Router, Status
from ninja.errors import AuthenticationError, ValidationError

from memoryapp.api.auth import ApiKeyAuth, RateLimited
from memoryapp.api.middleware import JsonParser
from memoryapp.api.schemas import HealthOut

logger = logging.getLogger(__name__)

api = NinjaAPI(
    title="memoryapp agent API",
    version="1",
    description="Store an agent's conversation memory and restore it pruned for the "
    "context window. Authenticate with `Authorization: Bearer <key>`.",
    auth=ApiKeyAuth(),
    urls_namespace="api_v1",
    parser=JsonParser(),
)


def _database_unreachable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The database is down or restarting: nothing was stored, try again soon."""
    logger.warning("API request failed, database unreachable: %s", exc)
    response = api.create_response(
        request, {"detail": "the database is unreachable; nothing was stored, retry"}, status=503
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _internal_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """A bug: JSON with an id to quote, the trace only in the server's log."""
    error_id = uuid.uuid4().hex[:12]
    logger.error("API error %s on %s %s", error_id, request.method, request.path, exc_info=exc)
    body = {"detail": f"internal error {error_id}: the server's log has it", "error_id": error_id}
    return api.create_response(request, body, status=500)


def _rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = api.create_response(request, {"detail": exc.detail}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


RETRY_AFTER_SECONDS = 5


def use_error_contract(target: NinjaAPI, how_to_send_the_key: str) -> None:
    """Give `target` the error answers of /api/v1 (429, 401, 503, 500, rendered the same
    way); its 401 says how that API takes its key."""

    def unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
        detail = f"missing or unknown API key: {how_to_send_the_key}"
        response = api.create_response(request, {"detail": detail}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="memoryapp"'
        return response

    target.add_exception_handler(RateLimited, _rate_limited)
    target.add_exception_handler(AuthenticationError, unauthenticated)
    target.add_exception_handler(OperationalError, _database_unreachable)
    target.add_exception_handler(InterfaceError, _database_unreachable)
    target.add_exception_handler(Exception, _internal_error)


use_error_contract(api, "send `Authorization: Bearer <key>`")

from memoryapp.api import (  # noqa: E402  (the routers use the handlers above)
    agent,
    context,
    export,
    findings,
    memories,
    search,
    sessions,
    tools,
)

ROUTERS = (
    sessions.router,
    context.router,
    findings.router,
    memories.router,
    tools.router,
    search.router,
    agent.router,
    export.router,
)


def _strict_request(operation: Any) -> None:
    """What the schemas cannot see, checked once the request is authenticated and its
    parameters validated, before the view runs (so nothing is stored):

    - a query parameter the operation does not take (`?limt=5`) is a 422 naming it, as
      an unknown body field is: never silently ignored;
    - a body holding what no database stores (the parser noted where) is a 422 naming
      the field;
    - an operation that takes no body refuses one (a DELETE with a body full of typos
      is not carried out as if it were empty).

    Wraps the view function, which django-ninja copies to each mounted operation."""
    known = frozenset(
        field.alias or name
        for model in operation.models
        if model.__ninja_param_source__ == "query"
        for name, field in model.model_fields.items()
    )
    takes_body = any(model.__ninja_param_source__ == "body" for model in operation.models)
    view = operation.view_func

    @functools.wraps(view)
    def strict(request: HttpRequest, **values: Any) -> Any:
        problems = [
            {
                "type": "extra_forbidden",
                "loc": ["query", name],
                "msg": "unknown query parameter"
                + (f"; this operation takes {', '.join(sorted(known))}" if known else ""),
            }
            for name in sorted(set(request.GET) - known)
        ]
        if not takes_body and request.body:
            problems.append(
                {"type": "extra_forbidden", "loc": ["body"], "msg": "this operation takes no body"}
            )
        unstorable = getattr(request, "unstorable", None)
        if unstorable is not None:
            path, message = unstorable
            problems.append(
                {"type": "value_error", "loc": ["body", "payload", *path], "msg": message}
            )
        if problems:
            raise ValidationError(problems)
        return view(request, **values)

    operation.view_func = strict


def mount_strict(target: NinjaAPI, router: Router) -> None:
    """Mount `router` on `target` with every operation checked by `_strict_request`."""
    for path_view in router.path_operations.values():
        for operation in path_view.operations:
            _strict_request(operation)
    target.add_router("/", router)


for _router in ROUTERS:
    mount_strict(api, _router)


@api.get("/health", auth=None, response={200: HealthOut, 503: HealthOut}, tags=["health"])
def health(request: HttpRequest):
    """Whether the database and the broker answer; no key needed (503: the database
    does not)."""
    database: dict[str, Any] = {"vendor": connection.vendor}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database["ok"] = True
    except Exception as exc:  # report, do not raise: this is the health check
        # No key is needed here: name the failure, never echo hosts or credentials.
        database.update(ok=False, error=type(exc).__name__)
    broker: dict[str, Any]
    if settings.REDIS_URL:
        broker = {"kind": "redis"}
        try:
            import redis

            client = redis.Redis.from_url(
                settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
            )
            broker["ok"] = bool(client.ping())
        except Exception as exc:
            broker.update(ok=False, error=type(exc).__name__)
    else:
        broker = {"kind": "in-process", "ok": True}
    healthy = database["ok"] and broker["ok"]
    body = {"status": "ok" if healthy else "degraded", "database": database, "broker": broker}
    return Status(200 if database["ok"] else 503, body)
