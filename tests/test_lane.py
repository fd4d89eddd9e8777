"""Issue 13: the agent's hottest requests skip the page middleware (memoryapp/api/lane.py).

Every answer must be what the whole stack answers, status, headers and body alike: each
request below is made twice in the same state of the database (the first's writes
rolled back), once through the lane and once with MEMORYAPP_API_LANE off, and the two
answers compared.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone

from memoryapp.api import lane
from memoryapp.core import conversation

pytestmark = pytest.mark.django_db

SESSION = "/api/v1/sessions/lane"
TURN = {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}
NOW = datetime(2026, 11, 25, 9, 30, 0, 123456, tzinfo=UTC)

# (method, path, body, extra headers): good and bad requests on the lane's paths, and
# their neighbours that must go the whole way.
REQUESTS = [
    ("get", "/api/v1/agent", None, {}),
    ("get", "/api/v1/agent", None, {"Authorization": "Bearer wrong"}),
    ("get", "/api/v1/agent", None, {"Authorization": ""}),
    ("post", "/api/v1/agent", TURN, {}),
    ("get", "/api/v1/agent/", None, {}),
    ("get", "/api/v1/agent?verbose=1", None, {}),
    ("get", SESSION + "/history", None, {}),
    ("get", SESSION + "/history?max_messages=1", None, {}),
    ("get", SESSION + "/history?max_messages=-1", None, {}),
    ("get", SESSION + "/history?limt=5", None, {}),
    ("get", "/api/v1/sessions/absent/history", None, {}),
    ("get", "/api/v1/sessions/" + "k" * 300 + "/history", None, {}),
    ("get", "/api/v1/sessions/bad%20key/history", None, {}),
    ("delete", SESSION + "/history", None, {}),
    ("get", SESSION + "/context", None, {}),
    ("get", SESSION + "/context?token_budget=50", None, {}),
    ("get", SESSION + "/context?token_budget=x", None, {}),
    ("post", SESSION + "/turns", TURN, {}),
    ("post", SESSION + "/turns", TURN, {"Idempotency-Key": "once"}),
    ("post", SESSION + "/turns", {"messages": [{"role": "wizard", "content": "x"}]}, {}),
    ("post", SESSION + "/turns", "{not json", {}),
    ("post", SESSION + "/turns", {"messages": [{"role": "user", "content": "a\u0000b"}]}, {}),
    ("post", "/api/v1/sessions/new-one/turns", TURN, {}),
    ("get", SESSION + "/turns", None, {}),
    ("get", SESSION + "/history/", None, {}),
    ("get", SESSION + "/messages", None, {}),
    ("get", SESSION, None, {}),
]


def _send(client: Client, key: str, method: str, path: str, body, headers: dict):
    headers = {"Authorization": f"Bearer {key}", **headers}
    if body is None:
        return getattr(client, method)(path, headers=headers)
    data = body if isinstance(body, str) else json.dumps(body)
    return getattr(client, method)(path, data, content_type="application/json", headers=headers)


def _both(api_key: str, method: str, path: str, body, headers: dict):
    """(through the lane, through the whole stack), each from the same database state."""
    answers = []
    for on in (True, False):
        with override_settings(MEMORYAPP_API_LANE=on), transaction.atomic():
            response = _send(Client(), api_key, method, path, body, headers)
            answers.append(response)
            transaction.set_rollback(True)
    return answers


@pytest.fixture
def session_with_history(api, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    assert api.put(SESSION, {}).status_code == 201
    for _ in range(3):
        assert api.post(SESSION + "/turns", TURN).status_code == 201
    assert api.post(SESSION + "/turns", TURN, {"Idempotency-Key": "once"}).status_code == 201


@pytest.mark.parametrize("method,path,body,headers", REQUESTS)
def test_an_answer_through_the_lane_is_the_whole_stacks(
    session_with_history, api_key, method, path, body, headers
):
    through_lane, whole = _both(api_key, method, path, body, headers)
    assert through_lane.status_code == whole.status_code
    assert dict(through_lane.headers) == dict(whole.headers)
    assert through_lane.content == whole.content
    assert dict(through_lane.cookies) == dict(whole.cookies)


def test_a_views_unexpected_error_is_the_same_500(session_with_history, api_key, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("memoryapp.api.sessions.restore_history", broken)
    monkeypatch.setattr("uuid.uuid4", lambda: type("U", (), {"hex": "0" * 32})())
    through_lane, whole = _both(api_key, "get", SESSION + "/history", None, {})
    assert through_lane.status_code == whole.status_code == 500
    assert dict(through_lane.headers) == dict(whole.headers)
    assert through_lane.content == whole.content


@pytest.mark.parametrize(
    "path,taken",
    [
        ("/api/v1/agent", True),
        (SESSION + "/history", True),
        (SESSION + "/context", True),
        (SESSION + "/messages", False),
        ("/api/v1/agent/", False),
    ],
)
def test_only_the_hot_paths_skip_the_page_middleware(session_with_history, api, path, taken):
    # SessionMiddleware, which the lane skips, gives every request it sees a session.
    response = api.get(path)
    assert hasattr(response.wsgi_request, "session") is not taken
    with override_settings(MEMORYAPP_API_LANE=False):
        assert hasattr(api.get(path).wsgi_request, "session")


def test_the_lane_sets_the_match_authentication_reads(session_with_history, api, monkeypatch):
    """Authentication reads the session a path names in the key's own query, from the
    request's resolver_match: the lane's request has the one the resolver would give."""
    reads = []
    real = conversation.restore_history

    def spy(session, **kwargs):
        reads.append(getattr(session, "pk", None))
        return real(session, **kwargs)

    monkeypatch.setattr("memoryapp.api.sessions.restore_history", spy)
    response = api.get(SESSION + "/history")
    assert response.status_code == 200
    match = response.wsgi_request.resolver_match
    assert match.kwargs == {"key": "lane"}
    with override_settings(MEMORYAPP_API_LANE=False):
        whole = api.get(SESSION + "/history").wsgi_request.resolver_match
    assert (match.func, match.url_name, match.route, match.namespaces) == (
        whole.func,
        whole.url_name,
        whole.route,
        whole.namespaces,
    )
    assert reads[0] == reads[1]
    assert lane.route.__doc__
