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
    # The restore's own way past the operation (sessions.get_history_at_once), and what
    # it leaves to the operation.
    ("get", SESSION + "/history?max_messages=10000&max_tokens=10000000", None, {}),
    ("get", SESSION + "/history?max_tokens=30", None, {}),
    ("get", SESSION + "/history?max_messages=05", None, {}),
    ("get", SESSION + "/history?max_messages=0&max_tokens=0", None, {}),
    ("get", SESSION + "/history?max_messages=2&max_messages=3", None, {}),
    ("get", SESSION + "/history?max_messages=", None, {}),
    ("get", SESSION + "/history?max_messages=%D9%A3", None, {}),  # an Arabic-Indic 3
    ("get", SESSION + "/history?max_messages=99999999999999999999", None, {}),
    ("get", SESSION + "/history?max_tokens=99999999999", None, {}),
    ("get", SESSION + "/history?max_tokens=" + "0" * 4301 + "5", None, {}),
    ("get", SESSION + "/history?max_messages=" + "0" * 4301 + "5", None, {}),
    ("get", SESSION + "/history", None, {"Authorization": "Bearer wrong"}),
    ("get", SESSION + "/history", None, {"Authorization": "Basic abc"}),
    ("get", SESSION + "/history", None, {"Authorization": ""}),
    ("get", SESSION + "/history", None, {"Authorization": "Bearer " + "k" * 300}),
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
    extra = {}
    if "Host" in headers:  # the test client takes the Host from SERVER_NAME otherwise
        extra["HTTP_HOST"] = headers.pop("Host")
    if body is None:
        return getattr(client, method)(path, headers=headers, **extra)
    data = body if isinstance(body, str) else json.dumps(body)
    return getattr(client, method)(
        path, data, content_type="application/json", headers=headers, **extra
    )


def _both(api_key: str, method: str, path: str, body, headers: dict, cookies: str = ""):
    """(through the lane, through the whole stack), each from the same database state."""
    answers = []
    for on in (True, False):
        with override_settings(MEMORYAPP_API_LANE=on), transaction.atomic():
            client = Client(raise_request_exception=False)
            if cookies:
                client.cookies.load(cookies)
            response = _send(client, api_key, method, path, body, dict(headers))
            answers.append(response)
            transaction.set_rollback(True)
    return answers


def _same(through_lane, whole) -> None:
    assert through_lane.status_code == whole.status_code
    assert dict(through_lane.headers) == dict(whole.headers)
    assert through_lane.content == whole.content
    assert _cookies(through_lane) == _cookies(whole)


def _cookies(response) -> dict:
    """The cookies an answer sets, a new CSRF token's value aside (random each time)."""
    return {
        name: (
            "<new token>" if name == "csrftoken" and morsel.value else morsel.value,
            {attribute: morsel[attribute] for attribute in ("max-age", "path", "samesite")},
        )
        for name, morsel in response.cookies.items()
    }


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
    _same(*_both(api_key, method, path, body, headers))


@pytest.mark.parametrize("path", ["/api/v1/agent", SESSION + "/history", SESSION + "/turns"])
def test_a_host_not_allowed_is_refused_on_the_lane_too(session_with_history, api_key, path):
    method, body = ("post", TURN) if path.endswith("/turns") else ("get", None)
    through_lane, whole = _both(api_key, method, path, body, {"Host": "evil.example"})
    assert whole.status_code == 400
    _same(through_lane, whole)


@pytest.mark.parametrize(
    "cookies", ["sessionid=x", "sessionid=", "csrftoken=bad", "sessionid=abcdefghijklmnop"]
)
@pytest.mark.parametrize("path", ["/api/v1/agent", SESSION + "/history"])
def test_a_request_with_cookies_is_answered_as_the_whole_stack_answers_it(
    session_with_history, api_key, path, cookies
):
    _same(*_both(api_key, "get", path, None, {}, cookies))


@pytest.mark.parametrize(
    "error,status", [("operational", 503), ("interface", 503), ("runtime", 500)]
)
def test_an_exception_a_view_lets_out_is_answered_as_djangos_handler_answers_it(
    session_with_history, api_key, monkeypatch, error, status
):
    """The API's handlers answer its views' exceptions; one they let out (none today)
    goes to the middleware's process_exception (the database's 503), then Django's 500."""
    from django.db import InterfaceError, OperationalError

    from memoryapp.api.api import api

    raised = {
        "operational": OperationalError("gone"),
        "interface": InterfaceError("closed"),
        "runtime": RuntimeError("a bug"),
    }[error]

    def broken(*args, **kwargs):
        raise raised

    def let_out(request, exc):
        raise exc

    monkeypatch.setattr("memoryapp.api.sessions.restore_history", broken)
    monkeypatch.setattr(api, "on_exception", let_out)
    through_lane, whole = _both(api_key, "get", SESSION + "/history", None, {})
    assert whole.status_code == status
    _same(through_lane, whole)


def test_the_lane_skips_only_middleware_it_stands_in_for():
    """The lane does what the middleware after ApiBodyLimitMiddleware does for an API
    request under these settings; another middleware there, or one of these settings
    turned on, would make it answer differently: look at the lane again first."""
    from django.conf import settings

    after = settings.MIDDLEWARE[
        settings.MIDDLEWARE.index("memoryapp.api.middleware.ApiBodyLimitMiddleware") + 1 :
    ]
    assert after == [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
        "django_htmx.middleware.HtmxMiddleware",
    ]
    assert not settings.PREPEND_WWW
    assert not settings.DISALLOWED_USER_AGENTS
    assert not settings.SESSION_SAVE_EVERY_REQUEST
    assert not any(db.get("ATOMIC_REQUESTS") for db in settings.DATABASES.values())


def test_a_views_unexpected_error_is_the_same_500(session_with_history, api_key, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("memoryapp.api.sessions.restore_history", broken)
    monkeypatch.setattr("uuid.uuid4", lambda: type("U", (), {"hex": "0" * 32})())
    through_lane, whole = _both(api_key, "get", SESSION + "/history", None, {})
    assert whole.status_code == 500
    _same(through_lane, whole)


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


def restores_past_the_operation(monkeypatch) -> list[bool]:
    """Whether each restore from now on went past the operation
    (sessions.get_history_at_once answered it) or the usual way."""
    from memoryapp.api import sessions

    taken: list[bool] = []
    at_once = sessions.get_history_at_once

    def counted(request, key):
        answer = at_once(request, key)
        taken.append(answer is not None)
        return answer

    monkeypatch.setattr(sessions, "get_history_at_once", counted)
    return taken


def test_a_common_restore_goes_past_the_operation(session_with_history, api_key, monkeypatch):
    """The lane's restore answers without django-ninja's operation, the same answer."""
    taken = restores_past_the_operation(monkeypatch)
    for query in ("", "?max_messages=3", "?max_messages=3&max_tokens=40", "?max_messages=x"):
        _same(*_both(api_key, "get", SESSION + "/history" + query, None, {}))
    assert taken == [True, True, True, False]


def test_a_restore_past_the_operation_uses_the_apis_own_authentication(
    session_with_history, api_key, monkeypatch
):
    """get_history_at_once authenticates with the API's configured ApiKeyAuth (that
    instance), and leaves the request to the operation when the API is configured with
    any other authentication."""
    from memoryapp.api.api import api as ninja_api
    from memoryapp.api.auth import ApiKeyAuth

    (configured,) = ninja_api.auth
    used = []
    authenticate = configured.authenticate
    monkeypatch.setattr(
        configured, "authenticate", lambda r, t: used.append(t) or authenticate(r, t)
    )
    taken = restores_past_the_operation(monkeypatch)
    client = Client()
    headers = {"Authorization": f"Bearer {api_key}"}
    assert client.get(SESSION + "/history", headers=headers).status_code == 200
    assert taken == [True] and used == [api_key]

    class Other(ApiKeyAuth):
        pass

    monkeypatch.setattr(ninja_api, "auth", [Other()])
    assert client.get(SESSION + "/history", headers=headers).status_code == 200
    assert taken == [True, False]  # not the key's own: the operation's way


@pytest.mark.parametrize("path", [SESSION + "/history", "/api/v1/sessions/absent/history"])
def test_a_restore_with_a_body_is_the_whole_stacks(session_with_history, api_key, path):
    """The API's strict requests answer a GET with a body 422: so does the lane."""
    answers = []
    for on in (True, False):
        with override_settings(MEMORYAPP_API_LANE=on):
            client = Client(raise_request_exception=False)
            answers.append(
                client.generic(
                    "GET",
                    path,
                    json.dumps({"max_messages": 1}),
                    content_type="application/json",
                    headers={"Authorization": f"Bearer {api_key}"},
                )
            )
    _same(*answers)
    assert answers[0].status_code == 422
