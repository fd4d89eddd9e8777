"""The error contract of both APIs and the strict mounting of their routers.

Every error is JSON `{"detail": ...}`: a 4xx for a request that changes nothing, a 429
with Retry-After over a rate limit, a 503 with Retry-After when the database is
unreachable, a 500 with an error id for a bug (`use_error_contract`). Every operation of
a router mounted with `mount_strict` refuses, with a 422 naming it, a query parameter it
does not take, a body holding what no database stores, and a body it does not take.
"""

from __future__ import annotations

import functools
import logging
import uuid
from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Router
from ninja.errors import AuthenticationError, ValidationError

from memoryapp.http.auth import RateLimited

logger = logging.getLogger(__name__)


RETRY_AFTER_SECONDS = 5


def _database_unreachable(target: NinjaAPI, request: HttpRequest, exc: Exception) -> HttpResponse:
    """The database is down or restarting: nothing was stored, try again soon."""
    logger.warning("API request failed, database unreachable: %s", exc)
    response = target.create_response(
        request, {"detail": "the database is unreachable; nothing was stored, retry"}, status=503
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _internal_error(target: NinjaAPI, request: HttpRequest, exc: Exception) -> HttpResponse:
    """A bug: JSON with an id to quote, the trace only in the server's log."""
    error_id = uuid.uuid4().hex[:12]
    logger.error("API error %s on %s %s", error_id, request.method, request.path, exc_info=exc)
    body = {"detail": f"internal error {error_id}: the server's log has it", "error_id": error_id}
    return target.create_response(request, body, status=500)


def _rate_limited(target: NinjaAPI, request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = target.create_response(request, {"detail": exc.detail}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


def use_error_contract(target: NinjaAPI, how_to_send_the_key: str) -> None:
    """Give `target` the error answers every API of ours gives (429, 401, 503, 500, JSON
    with `detail`); its 401 says how that API takes its key."""

    def unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
        detail = f"missing or unknown API key: {how_to_send_the_key}"
        response = target.create_response(request, {"detail": detail}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="memoryapp"'
        return response

    target.add_exception_handler(RateLimited, functools.partial(_rate_limited, target))
    target.add_exception_handler(AuthenticationError, unauthenticated)
    unreachable = functools.partial(_database_unreachable, target)
    target.add_exception_handler(OperationalError, unreachable)
    target.add_exception_handler(InterfaceError, unreachable)
    target.add_exception_handler(Exception, functools.partial(_internal_error, target))


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
