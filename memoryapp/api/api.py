"""The agent API, /api/v1: one router per resource (sessions and turns, context,
findings, memories, tools, search, agent), the error contract they share, and health.

Views stay thin: they validate input (schemas, where every request and response shape is
defined once), resolve the key's agent, and call the model layer (memoryapp.core). Every
error is JSON `{"detail": ...}`: a 4xx for a request that changes nothing, a 503 with
Retry-After when the database is unreachable, a 500 with an error id for a bug.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest
from ninja import NinjaAPI, Status

from memoryapp.api.schemas import HealthOut
from memoryapp.http.auth import ApiKeyAuth
from memoryapp.http.contract import mount_strict, use_error_contract
from memoryapp.http.middleware import JsonParser

api = NinjaAPI(
    title="memoryapp agent API",
    version="1",
    description="Store an agent's conversation memory and restore it pruned for the "
    "context window. Authenticate with `Authorization: Bearer <key>`.",
    auth=ApiKeyAuth(),
    urls_namespace="api_v1",
    parser=JsonParser(),
)

use_error_contract(api, "send `Authorization: Bearer <key>`")

from memoryapp.api import (  # noqa: E402  (mounted once the API has its error contract)
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
