"""Issue 11's defects, one test each (each failed before its fix), and the contract: every
API answer is JSON with `detail`, bad input is a 4xx that names the field and changes
nothing. Run on SQLite and on PostgreSQL (which refuses NUL in text, overflows int4)."""

import base64
import json

import pytest
from django.db import OperationalError
from django.test import Client

from memoryapp.core.models import ContextItem, Memory, Message, Session, Turn
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db
BASE = "/api/v1"


def turn_body(content="hello", **extra):
    return {"messages": [{"role": "user", "content": content}], **extra}


def nothing_stored():
    return Session.objects.count() == Message.objects.count() == Turn.objects.count() == 0


def locs(response) -> list[list]:
    return [error["loc"] for error in response.json()["detail"]]


# --- 1, 2: text no database can store ---------------------------------------------------


@pytest.mark.parametrize("bad", ["a\u0000b", "a\ud800b", "\udfff"])
@pytest.mark.parametrize(
    "body,loc",
    [
        (lambda t: turn_body(t), ["body", "payload", "messages", 0, "content"]),
        (lambda t: turn_body(model=t), ["body", "payload", "model"]),
        (
            lambda t: turn_body(tool_calls=[{"tool": "grep", "query": "x", "output": t}]),
            ["body", "payload", "tool_calls", 0, "output"],
        ),
        (
            lambda t: turn_body(tool_calls=[{"tool": "grep", "details": {"k": [1, t]}}]),
            ["body", "payload", "tool_calls", 0, "details", "k", 1],
        ),
    ],
)
def test_nul_and_lone_surrogates_are_a_422_naming_the_field(api, bad, body, loc):
    # json.dumps keeps \ud800 as an escape: the body is valid JSON holding a lone surrogate.
    response = api.post(f"{BASE}/sessions/s/turns", json.dumps(body(bad)))
    assert response.status_code == 422, response.content
    assert locs(response) == [loc]
    assert nothing_stored()


def test_nul_in_other_writes_is_refused_too(api):
    assert api.post(f"{BASE}/memories", {"content": "x\u0000"}).status_code == 422
    assert api.put(f"{BASE}/sessions/s/context-items/k", {"value": {"a\u0000": 1}}).status_code == (
        422
    )
    assert api.put(f"{BASE}/sessions/s", {"goal": "g\u0000"}).status_code == 422
    assert Memory.objects.count() == 0 and ContextItem.objects.count() == 0


# --- 3: a null working-context value ----------------------------------------------------


def test_a_null_context_value_is_a_422(api):
    api.post(f"{BASE}/sessions/s/turns", turn_body())
    response = api.put(f"{BASE}/sessions/s/context-items/x", {"value": None})
    assert response.status_code == 422
    assert "null" in json.dumps(response.json()["detail"])
    assert ContextItem.objects.count() == 0


# --- 4, 5: integers bounded to their columns; sums that cannot overflow -----------------


def test_token_counts_beyond_the_column_are_a_422(api):
    usage = {"input_tokens": 2**31, "output_tokens": 0}
    response = api.post(f"{BASE}/sessions/s/turns", turn_body(usage=usage))
    assert response.status_code == 422 and locs(response) == [
        ["body", "payload", "usage", "input_tokens"]
    ]
    assert nothing_stored()


def test_the_largest_accepted_usage_keeps_every_page_working(api, agent):
    usage = {"input_tokens": 2**31 - 1, "output_tokens": 2**31 - 1}
    assert api.post(f"{BASE}/sessions/s/turns", turn_body(usage=usage)).status_code == 201
    assert api.post(f"{BASE}/sessions/s/turns", turn_body(usage=usage)).status_code == 201
    viewer = logged_in_member("viewer", agent, "vera")
    for url in ("/", "/agents/coder/", "/agents/coder/sessions/s/"):
        assert viewer.get(url).status_code == 200, url
    assert "8,589,934,588" in viewer.get("/").content.decode()  # 4 × (2^31 − 1)


# --- 6, 7: cursors and offsets ------------------------------------------------------------


@pytest.mark.parametrize("cursor", ["³", "١٢", "9" * 40, "-1"])
def test_a_bad_cursor_is_a_422_never_a_500(api, cursor):
    api.post(f"{BASE}/sessions/s/turns", turn_body())
    for path in ("/memories", "/sessions/s/findings"):
        response = api.get(f"{BASE}{path}", {"cursor": cursor})
        assert response.status_code == 422, (path, response.content)
    encoded = base64.urlsafe_b64encode(cursor.encode()).decode().rstrip("=")
    assert api.get(f"{BASE}/sessions", {"cursor": encoded}).status_code == 422


def _pages(api, path, params, limit=2):
    """Every item of a listing, page by page, following next_cursor."""
    items, cursor = [], None
    while True:
        page = api.get(
            f"{BASE}{path}", {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        )
        assert page.status_code == 200, page.content
        body = page.json()
        items += body["items"]
        cursor = body["next_cursor"]
        if not cursor:
            return items


def test_every_listing_pages_with_one_opaque_cursor_scheme_and_writes_shift_nothing(api):
    """One scheme: sessions, turns, findings, memories (with and without a query) and
    search page the same way; a keyset listing loses and repeats nothing when rows are
    written between pages, even among equal sort keys."""
    for i in range(5):
        api.post(f"{BASE}/sessions/s{i}/turns", turn_body(f"lexer step {i}"))
        api.post(f"{BASE}/sessions/s0/turns", turn_body(f"more lexer work {i}"))
        api.post(
            f"{BASE}/sessions/s0/findings",
            {"tool": "Read", "query": f"f{i}.py", "fact": f"f{i}.py: {i} lines"},
        )
        # Equal confidence: the keyset must tell them apart by time and id.
        api.post(f"{BASE}/memories", {"content": f"lexer fact {i}", "confidence": 0.5})
    listings = {
        "/sessions": {},
        "/sessions/s0/turns": {},
        "/sessions/s0/findings": {},
        "/memories": {},
        "/memories?query": {"query": "lexer"},
        "/search": {"q": "lexer"},
    }
    for path, params in listings.items():
        items = _pages(api, path.split("?")[0], params)
        ids = [json.dumps(i, sort_keys=True) for i in items]
        assert len(ids) == len(set(ids)) and len(items) >= 5, path

    # Rows written between two pages of a keyset listing: the next page goes on from
    # where the first stopped.
    first = api.get(f"{BASE}/memories", {"limit": 2}).json()
    api.post(f"{BASE}/memories", {"content": "a newer fact, equally confident", "confidence": 0.5})
    rest = api.get(f"{BASE}/memories", {"limit": 50, "cursor": first["next_cursor"]}).json()
    seen = [m["content"] for m in first["items"] + rest["items"]]
    assert sorted(seen) == sorted(f"lexer fact {i}" for i in range(5))

    # A cursor belongs to its listing.
    cursor = api.get(f"{BASE}/sessions", {"limit": 1}).json()["next_cursor"]
    refused = api.get(f"{BASE}/sessions/s0/findings", {"cursor": cursor})
    assert refused.status_code == 422 and "another listing" in refused.json()["detail"]


@pytest.mark.parametrize("offset", ["99999999999999999999", "-5", "x", "1e3", "³"])
def test_dashboard_offsets_beyond_reason_are_a_404_not_a_500(agent, offset):
    viewer = logged_in_member("viewer", agent, "vera")
    assert viewer.get("/agents/coder/memories/", {"offset": offset}).status_code == 404
    bad = viewer.get("/agents/coder/memories/", {"min_confidence": "nan"})
    assert bad.status_code == 404
    assert viewer.get("/agents/coder/search/", {"q": "x", "page": offset}).status_code in (
        200,
        404,
    )


# --- 10: one rule for session keys and item names ---------------------------------------


@pytest.mark.parametrize(
    "key", [".", "..", "a\u0085b", "a\u2028b", "\ufeffkey", "abc\u202edcba", "a\u200bb", "a\tb"]
)
def test_keys_that_hide_or_reorder_text_or_read_as_dot_segments_are_refused(api, key):
    from urllib.parse import quote

    response = api.put(f"{BASE}/sessions/{quote(key, safe='')}", {"goal": "g"})
    assert response.status_code == 422, key
    item = api.put(f"{BASE}/sessions/s/context-items/{quote(key, safe='')}", {"value": "v"})
    assert item.status_code == 422, key
    assert Session.objects.filter(key=key).count() == 0


def test_ordinary_names_still_work(api):
    for key in ("run-1", "claude-code:ab12", "naïve résumé", "日本語", "a.b", "..a"):
        from urllib.parse import quote

        assert api.put(f"{BASE}/sessions/{quote(key, safe='')}", {"goal": "g"}).status_code in (
            200,
            201,
        ), key


# --- 11: strict types, unknown fields, bodies that are not objects -----------------------


@pytest.mark.parametrize("confidence", ["0.5", True, None])
def test_confidence_is_a_number_not_a_string_or_boolean(api, confidence):
    response = api.post(f"{BASE}/memories", {"content": "x", "confidence": confidence})
    assert response.status_code == 422
    assert Memory.objects.count() == 0


def test_unknown_fields_are_a_422_naming_them(api):
    response = api.post(f"{BASE}/memories", {"content": "x", "confidense": 0.5})
    assert response.status_code == 422 and ["body", "payload", "confidense"] in locs(response)
    typo = api.post(f"{BASE}/sessions/s/turns", {"mesages": [], "messages": [{"role": "user"}]})
    assert typo.status_code == 422 and nothing_stored()
    nested = api.post(
        f"{BASE}/sessions/s/turns",
        {"messages": [{"role": "user", "content": "x", "contnet": "y"}]},
    )
    assert nested.status_code == 422 and nothing_stored()


@pytest.mark.parametrize("body", ["null", "[]", "5", '"x"'])
def test_a_body_that_is_not_an_object_is_a_422(api, agent, body):
    before = (agent.ttl_seconds, agent.max_messages)
    assert api.patch(f"{BASE}/agent", body).status_code == 422
    assert api.put(f"{BASE}/sessions/s", body).status_code == 422
    agent.refresh_from_db()
    assert (agent.ttl_seconds, agent.max_messages) == before and nothing_stored()


# --- the contract: JSON everywhere ----------------------------------------------------------


def test_an_unknown_api_path_is_a_json_404(api):
    response = api.get(f"{BASE}/no/such/thing")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert "no such endpoint" in response.json()["detail"]


def test_a_method_the_path_does_not_take_is_a_json_405(api):
    response = api.client.post(f"{BASE}/health")
    assert response.status_code == 405
    assert response.json()["detail"].startswith("POST is not allowed here")
    assert "GET" in response["Allow"]


def test_a_401_says_how_to_authenticate():
    response = Client().get(f"{BASE}/sessions")
    assert (
        response.status_code == 401 and "Authorization: Bearer <key>" in response.json()["detail"]
    )


def test_a_bug_is_a_json_500_with_an_error_id_and_no_trace(api, monkeypatch, caplog):
    from memoryapp.api import sessions as module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("secret internals")

    monkeypatch.setattr(module, "restore_history", broken)
    client = Client(raise_request_exception=False)
    response = client.get(
        f"{BASE}/sessions/s/history", headers={"Authorization": f"Bearer {api.key}"}
    )
    api.post(f"{BASE}/sessions/s/turns", turn_body())
    response = client.get(
        f"{BASE}/sessions/s/history", headers={"Authorization": f"Bearer {api.key}"}
    )
    assert response.status_code == 500
    body = response.json()
    assert body["error_id"] in body["detail"] and "secret" not in json.dumps(body)
    assert "Traceback" not in response.content.decode()
    assert body["error_id"] in caplog.text  # the log has it, with the trace


def test_an_unreachable_database_is_a_json_503_with_retry_after(api, monkeypatch):
    from memoryapp.api import sessions as module

    api.post(f"{BASE}/sessions/s/turns", turn_body())

    def down(*args, **kwargs):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(module, "restore_history", down)
    response = api.get(f"{BASE}/sessions/s/history")
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert "unreachable" in response.json()["detail"]


def test_a_stored_turn_is_answered_201_even_when_the_database_fails_right_after(
    api, monkeypatch, in_process_tasks, django_capture_on_commit_callbacks
):
    """Defect 8: the embedded setup committed turns and then answered 500 (the in-process
    extraction failed on the database that had just gone, and so did marking the job
    pending). Now the agent hears 201 (a retry would store the turn twice) and the job
    stays queued for the sweep."""
    from memoryapp.core import dispatch
    from memoryapp.core.models import ExtractionJob, Turn
    from memoryapp.core.tasks import extract_turn

    def database_gone(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(extract_turn, "apply_async", database_gone)
    monkeypatch.setattr(
        dispatch.ExtractionJob.objects, "filter", lambda *a, **k: _Failing(database_gone)
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"{BASE}/sessions/s/turns", turn_body())
    monkeypatch.undo()
    assert response.status_code == 201, response.content
    assert Turn.objects.filter(session__key="s").count() == 1
    assert ExtractionJob.objects.get().status == ExtractionJob.Status.QUEUED


class _Failing:
    def __init__(self, failure):
        self.update = failure


# --- 11: a chunked body without Content-Length ---------------------------------------------


def _chunked(api_key, body: bytes):
    """A request as a server hands over a chunked upload: no Content-Length, the
    de-chunked body on wsgi.input; through the middleware to the view."""
    import io

    from django.test import RequestFactory
    from django.urls import resolve

    from memoryapp.http.middleware import ApiBodyLimitMiddleware

    request = RequestFactory().generic(
        "POST",
        f"{BASE}/sessions/s/turns",
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_key}", "Transfer-Encoding": "chunked"},
    )
    request.META.pop("CONTENT_LENGTH", None)
    request.META["wsgi.input"] = io.BytesIO(body)
    request._stream = io.BytesIO(b"")  # what Django reads without a Content-Length

    def view(request):
        match = resolve(request.path)
        return match.func(request, *match.args, **match.kwargs)

    return ApiBodyLimitMiddleware(view)(request)


def test_a_chunked_body_over_the_limit_is_a_413_not_an_empty_body(api_key, settings):
    settings.MEMORYAPP_MAX_BODY_BYTES = 1000
    big = json.dumps(turn_body("x" * 5000)).encode()
    assert _chunked(api_key, big).status_code == 413
    assert nothing_stored()


def test_a_chunked_body_within_the_limit_is_read(api_key, settings):
    settings.MEMORYAPP_MAX_BODY_BYTES = 100_000
    response = _chunked(api_key, json.dumps(turn_body("chunked hello")).encode())
    assert response.status_code == 201, response.content
    assert Message.objects.get().content == "chunked hello"


def test_a_dashboard_page_is_a_503_when_the_database_is_unreachable(agent, monkeypatch):
    """bench/faults.py saw the live poll answer HTML 500s while PostgreSQL was down (the
    login check reads the session from the database): now a 503 that says so."""
    from django.contrib.sessions.backends.db import SessionStore

    viewer = logged_in_member("viewer", agent, "vera")

    def down(self, *args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(SessionStore, "load", down)
    page = viewer.get("/agents/coder/")
    assert page.status_code == 503 and int(page["Retry-After"]) > 0
    assert "database is unreachable" in page.content.decode()
    poll = viewer.get("/agents/coder/", headers={"HX-Request": "true"})
    assert poll.status_code == 503 and poll["Content-Type"].startswith("text/plain")


@pytest.mark.postgres
def test_appends_lock_the_session_row_not_the_agents(api):
    """bench/faults.py saw deadlocks under load: `select_for_update()` joined to the agent
    locked the agent's one row on every append (FOR UPDATE without OF), against commit-time
    foreign-key checks on the same row. Only the session is locked now."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...): SQLite has no row locks")
    with CaptureQueriesContext(connection) as queries:
        assert api.post(f"{BASE}/sessions/s/turns", turn_body()).status_code == 201
        assert api.put(f"{BASE}/sessions/s/context-items/k", {"value": 1}).status_code == 200
    joined = [q["sql"] for q in queries if "FOR UPDATE" in q["sql"] and "JOIN" in q["sql"]]
    assert joined  # the session locked with its agent joined, as lock_session reads it
    for sql in joined:
        locked = sql.split("FOR UPDATE")[1]
        assert locked.startswith(" OF") and "core_agent" not in locked, sql
