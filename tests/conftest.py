"""Shared fixtures: agents with API keys, and an API client that sends a key.

The tests run on the embedded setup (SQLite file in var/) by default, and on PostgreSQL
when DATABASE_URL=postgres://... is set; REDIS_URL=redis://... adds the broker checks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from memoryapp.core.models import Agent, ApiKey
from tests import browser_support


@dataclass
class ApiClient:
    """Django's test client with a bearer key and JSON helpers."""

    client: Client
    key: str

    def _headers(self, extra: dict | None) -> dict:
        headers = {"Authorization": f"Bearer {self.key}"}
        headers.update(extra or {})
        return headers

    def get(self, path: str, params: dict | None = None, headers: dict | None = None):
        return self.client.get(path, params or {}, headers=self._headers(headers))

    def post(self, path: str, body: Any = None, headers: dict | None = None):
        data = body if isinstance(body, str | bytes) else ("" if body is None else json.dumps(body))
        return self.client.post(
            path, data, content_type="application/json", headers=self._headers(headers)
        )

    def put(self, path: str, body: Any, headers: dict | None = None):
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.put(
            path, data, content_type="application/json", headers=self._headers(headers)
        )

    def patch(self, path: str, body: Any, headers: dict | None = None):
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.patch(
            path, data, content_type="application/json", headers=self._headers(headers)
        )

    def delete(self, path: str, headers: dict | None = None):
        return self.client.delete(path, headers=self._headers(headers))


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    """Rate-limit counters live in the cache: each test starts from none (every test
    client comes from 127.0.0.1, so counters would carry over between tests)."""
    from django.core.cache import cache, caches
    from django.core.cache.backends.redis import RedisCache

    if isinstance(caches["default"], RedisCache):
        # Only our keys: the broker shares this Redis database (a FLUSHDB would drop the
        # worker's queue bindings).
        client = cache._cache.get_client(None, write=True)
        for key in client.scan_iter(match="memoryapp:*"):
            client.delete(key)
    else:
        cache.clear()
    from memoryapp.http import ratelimit

    ratelimit.reset_cache_backoff()
    yield
    ratelimit.reset_cache_backoff()


@pytest.fixture
def keep_connection_open(monkeypatch):
    """The in-process WSGI app (seed_demo, import_transcript) closes the database connection
    around each request, as a server should; inside a test transaction it must stay open.
    (Disconnecting the signal is not enough: Django's test client connects it again after
    each of its own requests.)"""
    for connection in connections.all():
        monkeypatch.setattr(connection, "close_if_unusable_or_obsolete", lambda: None)


def count_health_checks(monkeypatch) -> list[int]:
    """A list that gets an item for each of Django's connection health checks (its
    `is_usable`, a `SELECT 1`) from now on; the checks still run."""
    from django.db import connection

    checks: list[int] = []
    wrapper = type(connections[connection.alias])
    real = wrapper.is_usable
    monkeypatch.setattr(wrapper, "is_usable", lambda self: checks.append(1) or real(self))
    return checks


def without_times(answer: dict) -> dict:
    """An append's answer without its session's key and wall-clock times."""
    summary = {k: v for k, v in answer["session"].items() if k != "key" and not k.endswith("_at")}
    return {**answer, "session": summary}


# Real tool calls and outputs from agent transcripts (tests/fixtures/SOURCE.txt says whence).
TOOL_OUTPUTS: dict[str, dict] = json.loads(
    (Path(__file__).parent / "fixtures" / "tool_outputs.json").read_text()
)


def tool_call(name: str, **overrides: Any):
    """The fixture call `name` as extraction takes it (`ToolCallData`)."""
    from memoryapp.lib.extraction import ToolCallData

    call = {**TOOL_OUTPUTS[name], **overrides}
    return ToolCallData(
        call["tool"],
        call["query"],
        call["output"],
        call.get("success"),
        details=call.get("details"),
    )


@pytest.fixture
def in_process_tasks():
    """Tasks (extraction, cleanup) run in this process whatever REDIS_URL says: these tests
    have no worker. The integration tests use a real one."""
    from memoryapp import celery_app
    from memoryapp.core import dispatch

    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    dispatch.reset_broker_backoff()
    yield
    celery_app.conf.task_always_eager = previous
    dispatch.reset_broker_backoff()


@pytest.fixture
def agent(db) -> Agent:
    return Agent.objects.create(name="coder")


@pytest.fixture
def api_key(agent) -> str:
    return ApiKey.issue(agent, name="test")[1]


@pytest.fixture
def api(api_key) -> ApiClient:
    return ApiClient(Client(), api_key)


@pytest.fixture
def other_api(db) -> ApiClient:
    other = Agent.objects.create(name="other")
    return ApiClient(Client(), ApiKey.issue(other)[1])


def turn(*messages: tuple[str, str], **extra: Any) -> dict:
    """A turn body from (role, content) pairs."""
    return {"messages": [{"role": r, "content": c} for r, c in messages], **extra}


def logged_in_member(
    role: str | None, agent: Agent, name: str, *, staff: bool = False, csrf_checks: bool = False
) -> Client:
    """A test client logged in as a new user holding `role` on `agent` (none: no role).
    `csrf_checks`: the client's writes are checked for the CSRF token, as a browser's are."""
    from django.contrib.auth import get_user_model

    from memoryapp.dashboard.models import Membership

    user = get_user_model().objects.create_user(name, password="pw-for-tests-only", is_staff=staff)
    if role:
        Membership.objects.create(user=user, agent=agent, role=role)
    client = Client(enforce_csrf_checks=csrf_checks)
    client.force_login(user)
    return client


# --- browser tests (tests/browser_support.py has the helpers) ---------------------------


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests
    # make between browser steps are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=browser_support.CHROMIUM,
                headless=True,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                ],
            )
            yield browser
            browser.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def page(browser):
    context = browser.new_context()
    watched = browser_support.Watched(context.new_page())
    yield watched
    context.close()


@pytest.fixture(autouse=True)
def no_embedding_behind_a_tests_back(settings):
    """Tests embed when they mean to (memoryapp.core.embeddings.embed_pending): no thread
    or task writes vectors behind their back."""
    settings.MEMORYAPP_EMBED_ON_WRITE = False
