"""Issue 13: the hot paths made fast keep their behaviour.

PostgreSQL appends a turn to a live session in one statement (conversation._APPEND_PG)
instead of the general path's eight; it must store exactly what the general path stores
and answer exactly what it answers. On SQLite only the general path exists, and these
tests compare it with itself (they still check the answer's numbers).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.core import conversation, restore
from memoryapp.core.models import ExtractionJob, IdempotencyRecord, Message, Session, Turn
from tests.conftest import without_times

pytestmark = pytest.mark.django_db

TIMESTAMP = "2026-11-20T10:00:00+00:00"
BODY = {
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Which file parses the header? Ünïcode ✓"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "grep", "arguments": '{"q": "header"}'},
                }
            ],
        },  # fmt: skip
        {
            "role": "tool",
            "content": "src/parser.py:12: def parse_header",
            "tool_call_id": "c1",
            "name": "grep",
        },  # fmt: skip
    ],
    "usage": {"input_tokens": 812, "output_tokens": 64},
    "model": "gpt-test",
    "timestamp": TIMESTAMP,
}


def stored(session: Session) -> dict:
    """What an append left in the database, without ids and wall-clock times."""
    session.refresh_from_db()
    messages = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values("seq", "role", "content", "name", "tool_call_id", "tool_calls", "token_count",
                "created_at", "client_id", "removed_at", "revisions", "turn__iteration")
    )  # fmt: skip
    turns = list(
        Turn.objects.filter(session=session)
        .order_by("iteration")
        .values("iteration", "message_count", "input_tokens", "output_tokens",
                "tool_call_count", "usage_source", "model", "first_seq", "last_seq", "timestamp")
    )  # fmt: skip
    jobs = list(
        ExtractionJob.objects.filter(session=session)
        .order_by("turn__iteration")
        .values("turn__iteration", "attempts", "last_error", "findings_added",
                "context_items_set", "finished_at")
    )  # fmt: skip
    return {
        "messages": messages,
        "turns": turns,
        "jobs": jobs,
        "totals": session.totals(),
        "lifetime": session.expires_at - session.last_activity_at,
        "metadata": session.metadata,
    }


@pytest.mark.parametrize("idempotent", [False, True])
def test_the_one_statement_append_stores_and_answers_what_the_general_path_does(
    api, monkeypatch, idempotent
):
    results = {}
    for path in ("one statement", "general"):
        if path == "general":
            monkeypatch.setattr(conversation, "_ONE_STATEMENT", {})
        key = f"s-{path.replace(' ', '-')}"
        created = api.put(f"/api/v1/sessions/{key}", {"ttl_seconds": 120, "metadata": {"a": [1]}})
        assert created.status_code == 201
        answers = []
        for n in range(2):
            headers = {"Idempotency-Key": f"k{n}"} if idempotent else None
            response = api.post(f"/api/v1/sessions/{key}/turns", BODY, headers=headers)
            assert response.status_code == 201, response.content
            answers.append(without_times(response.json()))
        if idempotent:  # a retry answers the first answer and stores nothing
            again = api.post(
                f"/api/v1/sessions/{key}/turns", BODY, headers={"Idempotency-Key": "k1"}
            )
            assert again.headers["Idempotent-Replayed"] == "true"
            assert without_times(again.json()) == answers[1]
        results[path] = (answers, stored(Session.objects.get(key=key)))
    assert results["one statement"] == results["general"]
    answers, rows = results["general"]
    assert [a["first_seq"] for a in answers] == [1, 5]
    assert rows["totals"]["messages"] == 8 and rows["totals"]["turns"] == 2
    assert rows["totals"]["input_tokens"] == 2 * 812
    assert rows["lifetime"].total_seconds() == 120
    assert rows["messages"][2]["tool_calls"][0]["function"]["name"] == "grep"
    assert rows["messages"][3]["name"] == "grep" and rows["messages"][3]["tool_call_id"] == "c1"


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the one-statement append is PostgreSQL's"
)
@pytest.mark.parametrize("idempotent", [False, True])
def test_on_postgresql_an_append_to_a_live_session_is_one_statement(api, idempotent):
    """With an Idempotency-Key too (what agents/client.py sends with every append): the
    record of the answer is written by the same statement. Before, a transaction of its
    own around the statement and an INSERT: four round trips, 1.06 ms more in process.
    The request is the key's lookup, then the append."""
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    headers = {"Idempotency-Key": "once"} if idempotent else None
    with CaptureQueriesContext(connection) as queries:
        response = api.post("/api/v1/sessions/live/turns", BODY, headers=headers)
    assert response.status_code == 201
    statements = [
        q["sql"]
        for q in queries.captured_queries
        # The savepoint a keyed append takes inside a caller's transaction (the test's).
        if "SAVEPOINT" not in q["sql"]
    ]
    assert len(statements) == 2 and "core_apikey" in statements[0]
    assert "WITH s AS" in statements[1][:40]
    assert IdempotencyRecord.objects.count() == (1 if idempotent else 0)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the one-statement append is PostgreSQL's"
)
@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_keyed_append_opens_none(api, monkeypatch):
    """In autocommit (as a request runs) the keyed append's one statement is its own
    transaction: no transaction.atomic, whose BEGIN is a round trip of its own."""
    import traceback

    opened = []
    real = conversation.transaction.atomic

    def atomic(*args, **kwargs):
        caller = traceback.extract_stack()[-2]
        if caller.filename == conversation.__file__:  # not the in-process extraction's
            opened.append(caller.lineno)
        return real(*args, **kwargs)

    assert api.put("/api/v1/sessions/auto", {}).status_code == 201
    monkeypatch.setattr(conversation.transaction, "atomic", atomic)
    headers = {"Idempotency-Key": "k"}
    assert api.post("/api/v1/sessions/auto/turns", BODY, headers=headers).status_code == 201
    assert opened == [] and IdempotencyRecord.objects.count() == 1


@pytest.mark.parametrize("microsecond", [0, 120000])
def test_an_idempotent_appends_answer_is_written_as_the_general_path_writes_it(
    api, monkeypatch, microsecond
):
    """The one statement writes the answer it records (and answers) in SQL: its times as
    session_summary writes them (isoformat: microseconds only when there are any), its
    numbers and metadata as the session row holds them; a retry answers it again."""
    moment = datetime(2026, 11, 24, 23, 31, 41, microsecond, tzinfo=UTC)
    monkeypatch.setattr(timezone, "now", lambda: moment)
    results = {}
    for path in ("one statement", "general"):
        if path == "general":
            monkeypatch.setattr(conversation, "_ONE_STATEMENT", {})
        key = f"s-{path.replace(' ', '-')}"
        body = {"ttl_seconds": 90, "metadata": {"b": 1, "a": [2.5], "c": {"z": None}}}
        assert api.put(f"/api/v1/sessions/{key}", body).status_code == 201
        headers = {"Idempotency-Key": "k"}
        answer = api.post(f"/api/v1/sessions/{key}/turns", BODY, headers=headers)
        again = api.post(f"/api/v1/sessions/{key}/turns", BODY, headers=headers)
        assert answer.status_code == again.status_code == 201
        assert again.headers["Idempotent-Replayed"] == "true" and again.json() == answer.json()
        record = IdempotencyRecord.objects.get(session__key=key).response
        results[path] = [
            {**a, "session": {**a["session"], "key": "-"}} for a in (answer.json(), record)
        ]
    assert results["one statement"] == results["general"]
    stored = results["general"][1]["session"]
    expected = (moment + timedelta(seconds=90)).isoformat()
    assert stored["expires_at"] == expected and ("." in expected) == bool(microsecond)


@pytest.mark.parametrize("state", ["absent", "expired"])
def test_an_append_to_an_absent_or_expired_session_still_starts_it(api, state):
    """The one-statement path finds no live session and writes nothing; the general path
    creates the session (an expired one afresh)."""
    if state == "expired":
        api.put("/api/v1/sessions/s", {"ttl_seconds": 60})
        api.post("/api/v1/sessions/s/turns", BODY)
        Session.objects.filter(key="s").update(expires_at="2020-01-01T00:00:00Z")
    response = api.post("/api/v1/sessions/s/turns", BODY)
    assert response.status_code == 201
    assert response.json()["first_seq"] == 1
    assert Message.objects.filter(session__key="s").count() == 4


# --- answers written without ninja's validation (api/answers.py) --------------------------


def as_ninja_writes(schema, body: dict) -> dict:
    """`body` validated by `schema` and written as django-ninja writes a view's answer
    (model_dump by alias, then its JSON encoder): what api/answers.py must write."""
    import json

    from ninja.responses import NinjaJSONEncoder

    dumped = schema.model_validate(_sub_millisecond(body)).model_dump(by_alias=True)
    return json.loads(json.dumps(dumped, cls=NinjaJSONEncoder))


def _sub_millisecond(value):
    """`value` with every time written as `.000` given back the microseconds it had: the
    encoder writes no fraction for a whole second, so `.000` means 1-999 µs, which
    reading the text alone would turn into a whole second (and `Z`, not `.000Z`)."""
    import re

    if isinstance(value, dict):
        return {k: _sub_millisecond(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sub_millisecond(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.000(Z|[+-]\d\d:\d\d)$",
                      r"\1.000500\2", value)  # fmt: skip
    return value


def test_the_reference_keeps_a_time_written_within_a_millisecond_of_the_second():
    """A time 1-999 µs past a second is written `.000Z` by ninja's encoder too: the
    reference must not read it back as a whole second and expect `Z`."""
    from memoryapp.api.schemas import HistoryMessageOut

    message = {"seq": 1, "role": "user", "content": "hi", "token_count": 3,
               "created_at": "2026-12-02T04:16:54.000Z"}  # fmt: skip
    assert as_ninja_writes(HistoryMessageOut, message)["created_at"] == message["created_at"]


def both_ways(schema, response):
    """The JSON answer api/answers.py wrote, and what ninja writes for it by `schema`."""
    assert response["Content-Type"] == "application/json; charset=utf-8"
    body = response.json()
    return body, as_ninja_writes(schema, body)


def a_full_session(api, key: str) -> None:
    """A session with everything an answer can hold: a system message, tool calls, a
    pruned part with its summary, working context, findings and memories."""
    api.put(f"/api/v1/sessions/{key}", {"goal": "fix the header parser"})
    api.post(f"/api/v1/sessions/{key}/turns", BODY)
    for n in range(60):
        api.post(
            f"/api/v1/sessions/{key}/turns",
            {"messages": [{"role": "user", "content": f"step {n}: run the tests again"},
                          {"role": "assistant", "content": f"Ran them: {n} passed."}],
             "tool_calls": [{"tool": "bash", "query": "pytest -q", "output": f"{n} passed",
                             "success": True}]},
        )  # fmt: skip
    api.put(f"/api/v1/sessions/{key}/context-items/branch", {"value": "fix-header"})
    api.post("/api/v1/memories", {"content": "Tests run with pytest -q.", "confidence": 0.9})


def test_read_answers_are_what_ninja_would_answer(api):
    from memoryapp.api.schemas import ContextOut, HistoryOut, MessagePage

    a_full_session(api, "full")
    base = "/api/v1/sessions/full"
    for path, params, schema in [
        (f"{base}/history", {}, HistoryOut),
        (f"{base}/history", {"max_messages": 10000, "max_tokens": 10_000_000}, HistoryOut),
        (f"{base}/history", {"max_messages": 0}, HistoryOut),
        (f"{base}/messages", {"limit": 7}, MessagePage),
        (f"{base}/context", {}, ContextOut),
        (f"{base}/context", {"query_hint": "pytest", "token_budget": 300}, ContextOut),
        # Budgets where the system message alone overflows the conversation's share.
        (f"{base}/context", {"token_budget": 10}, ContextOut),
        (f"{base}/context", {"token_budget": 40}, ContextOut),
    ]:
        fast, slow = both_ways(schema, api.get(path, params))
        assert fast == slow, path
        assert list(fast) == list(slow), path
    history = api.get(f"{base}/history").json()
    assert history["summary"] is not None and history["pruned_count"] > 0
    assert history["messages"][0]["role"] == "system"
    assert history["messages"][0]["created_at"].endswith("Z")
    assert "name" in history["messages"][-1] and history["messages"][-1]["name"] is None


def test_a_context_writes_its_conversation_as_the_history_does(api):
    """/context writes its conversation as /history does: a session read whole, with
    tool calls, a message its client changed and removed (the Redis Agent Memory Server
    API's fields) and times with and without microseconds, is answered as
    ninja would answer it, message for message what /history answers."""
    api.post("/api/v1/sessions/small/turns", BODY)
    Message.objects.filter(session__key="small", seq=2).update(
        client_id="m-2",
        removed_at=datetime(2026, 11, 24, 5, 17, 38, 500000, tzinfo=UTC),
        revisions=[{"action": "removed", "at": "2026-11-24T05:17:38Z"}],
    )
    Message.objects.filter(session__key="small", seq=3).update(
        created_at=datetime(2026, 11, 24, 5, 17, 38, tzinfo=UTC)
    )
    from memoryapp.api.schemas import ContextOut

    fast, slow = both_ways(ContextOut, api.get("/api/v1/sessions/small/context"))
    assert fast == slow
    messages = api.get("/api/v1/sessions/small/history").json()["messages"]
    assert fast["conversation"] == messages and len(messages) == 4
    assert [list(m) for m in fast["conversation"]] == [list(m) for m in messages]
    changed = fast["conversation"][1]
    assert changed["client_id"] == "m-2" and changed["removed_at"] == "2026-11-24T05:17:38.500Z"
    assert fast["conversation"][2]["created_at"] == "2026-11-24T05:17:38Z"
    assert fast["conversation"][2]["tool_calls"][0]["id"] == "c1"


@pytest.mark.parametrize(
    "columns",
    [
        {},
        {"name": "bash", "tool_call_id": "call_1", "tool_calls": [{"id": "call_1"}]},
        {"tool_calls": [], "revisions": [], "name": "", "client_id": ""},
        {"client_id": "m-7", "removed_at": "2026-11-24T05:17:38.000001+00:00",
         "revisions": [{"action": "removed", "at": "2026-11-24T05:17:38Z"}]},
        {"created_at": "2026-11-24T05:17:38+00:00"},
        {"created_at": "2026-11-24T05:17:38.5+02:00"},
    ],
)  # fmt: skip
def test_a_history_message_is_written_in_one_step_as_in_two(columns):
    """answers.history_message writes in one step what message_dict and then the
    answer's shaper write (the history and messages answers use it)."""
    from datetime import datetime

    from memoryapp.api import answers
    from memoryapp.api.schemas import HistoryMessageOut
    from memoryapp.core.restore import message_dict

    row = {"seq": 3, "role": "tool", "content": "ok", "token_count": 5,
           "created_at": "2026-11-24T05:17:38.487535+00:00", "name": "", "tool_call_id": "",
           "tool_calls": None, "client_id": "", "removed_at": None, "revisions": None,
           **columns}  # fmt: skip
    for time_field in ("created_at", "removed_at"):
        if row[time_field] is not None:
            row[time_field] = datetime.fromisoformat(row[time_field])
    expected = answers._model_shaper(HistoryMessageOut)(message_dict(row))
    written = answers.history_message(row)
    assert written == expected and list(written) == list(expected)


def test_a_list_written_for_another_schema_is_shaped_and_checked():
    """answers.Written passes through only where the answer declares a list of the
    schema it was written for; anywhere else its items are shaped, unknown keys refused."""
    from memoryapp.api import answers
    from memoryapp.api.schemas import HistoryMessageOut, HistoryOut, TurnMetaOut

    message = {"seq": 1, "role": "user", "content": "hi", "token_count": 3,
               "created_at": "2026-11-24T05:17:38+00:00", "surprise": True}  # fmt: skip
    history = {"token_count": 3, "pruned_count": 0, "pruned_tokens": 0, "max_messages": 1,
               "max_tokens": 9}  # fmt: skip
    passed = answers.answer(HistoryOut, {**history, "messages": answers.Written(
        HistoryMessageOut, [message])})  # fmt: skip
    assert b'"surprise":true' in passed.content  # trusted as written
    with pytest.raises(ValueError, match="does not declare"):
        answers.answer(HistoryOut, {**history, "messages": answers.Written(TurnMetaOut, [message])})


def normalised(answer: dict) -> dict:
    """An append's answer without what differs between two sessions (key, wall clock),
    keeping the times' format."""
    import re

    session = {
        k: (re.sub(r"\d", "9", v) if k.endswith("_at") else v)
        for k, v in answer["session"].items()
        if k != "key"
    }
    return {**answer, "session": session}


@pytest.mark.parametrize("headers", [None, {"Idempotency-Key": "once"}])
def test_append_answers_are_what_ninja_would_answer(api, headers):
    from memoryapp.api.schemas import TurnOut

    first = api.post("/api/v1/sessions/s/turns", BODY, headers=headers)
    second = api.post("/api/v1/sessions/s/turns", BODY, headers=headers)
    assert first.status_code == second.status_code == 201
    assert ("Idempotent-Replayed" in second) == (headers is not None)
    for response in (first, second):
        fast, slow = both_ways(TurnOut, response)
        assert fast == slow and list(fast) == list(slow)
    assert (second.json() == first.json()) == (headers is not None)


def test_an_answer_with_a_key_its_schema_does_not_declare_is_refused():
    from memoryapp.api import answers
    from memoryapp.api.schemas import TurnOut

    with pytest.raises(ValueError, match="does not declare"):
        answers.answer(TurnOut, {"iteration": 1, "surprise": True})


@pytest.mark.parametrize(
    "moment",
    [
        "2026-11-24T05:17:38.487535+00:00",
        "2026-11-24T05:17:38+00:00",
        "2026-11-24T05:17:38.000001+02:00",
        "2026-11-24T05:17:38.5+00:00",  # not isoformat's own text: parsed first
    ],
)
def test_times_are_written_as_ninjas_encoder_writes_them(moment):
    from datetime import datetime

    from ninja.responses import NinjaJSONEncoder

    from memoryapp.api.answers import json_time

    expected = NinjaJSONEncoder().default(datetime.fromisoformat(moment))
    assert json_time(moment) == expected
    assert json_time(datetime.fromisoformat(moment)) == expected


def test_a_time_written_again_is_its_own_text_not_the_last_ones():
    """json_time reuses the text of the time it wrote last (one turn's messages share a
    time): the same instant in another zone, or another instant, is written anew."""
    from datetime import UTC, datetime, timedelta, timezone

    from memoryapp.api.answers import json_time

    utc = datetime(2026, 11, 24, 5, 17, 38, 487535, tzinfo=UTC)
    plus_two = utc.astimezone(timezone(timedelta(hours=2)))
    assert utc == plus_two
    written = [json_time(t) for t in (utc, utc.replace(), plus_two, utc, utc + timedelta(0, 1))]
    assert written == [
        "2026-11-24T05:17:38.487Z",
        "2026-11-24T05:17:38.487Z",
        "2026-11-24T07:17:38.487+02:00",
        "2026-11-24T05:17:38.487Z",
        "2026-11-24T05:17:39.487Z",
    ]
    # A wall time that comes twice (clocks going back): the two compare equal in one
    # zone, and each keeps its own offset.
    from zoneinfo import ZoneInfo

    first = datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Berlin"))
    second = first.replace(fold=1)
    assert first == second
    assert [json_time(first), json_time(second)] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:30:00+01:00",
    ]


# --- the extraction job is handed to the broker after the answer is sent ---------------


def wsgi_append(key: str, path: str = "/api/v1/sessions/w/turns"):
    """An append through Django's WSGI handler as gunicorn calls it; (status, the
    response iterable, not yet closed)."""
    import io
    import json

    from django.core import signals
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import close_old_connections

    body = json.dumps(BODY).encode()
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "testserver",
        "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json",
        "HTTP_AUTHORIZATION": f"Bearer {key}", "REMOTE_ADDR": "127.0.0.1",
    }  # fmt: skip
    started = []
    # As Django's test client does: the test's database connection stays open.
    signals.request_started.disconnect(close_old_connections)
    try:
        result = WSGIHandler()(environ, lambda status, headers: started.append(status))
    finally:
        signals.request_started.connect(close_old_connections)
    return started[0], result


@pytest.mark.django_db(transaction=True)  # the job is dispatched when the append commits
@pytest.mark.parametrize("broker", [True, False])
def test_the_extraction_job_is_published_after_the_answer_went_out(
    api_key, settings, monkeypatch, broker
):
    """With a broker the agent does not wait for the publish: it happens when the server
    closes the response (after writing it). Without one, extraction runs in the request
    and the answer comes after it, as before."""
    from django.core import signals
    from django.db import close_old_connections

    from memoryapp.core import dispatch

    settings.CELERY_TASK_ALWAYS_EAGER = not broker
    published = []
    monkeypatch.setattr(dispatch, "dispatch_extraction", lambda job_id: published.append(job_id))
    for _ in range(2):  # the first creates the session (general path), the second does not
        published.clear()
        status, result = wsgi_append(api_key)
        assert status.startswith("201")
        b"".join(result)  # the server writes the answer...
        assert len(published) == (0 if broker else 1)
        signals.request_finished.disconnect(close_old_connections)
        try:
            result.close()  # ...then closes the response
        finally:
            signals.request_finished.connect(close_old_connections)
        assert len(published) == 1
        assert ExtractionJob.objects.filter(pk=published[0]).exists()


# --- the summary of the default restore is rolled ahead by the worker ------------------


@pytest.mark.parametrize("broker", [True, False])
def test_the_worker_rolls_the_default_restores_summary_ahead(
    api, agent, settings, monkeypatch, broker
):
    """With a broker, a turn's extraction job also rolls forward the summary the default
    restore answers, so the agent's next restore finds it current and writes nothing.
    Without one (extraction in the request) the restore rolls it, as before."""
    from memoryapp.core import dispatch, workers

    agent.max_messages = 4
    agent.save()
    settings.CELERY_TASK_ALWAYS_EAGER = not broker
    monkeypatch.setattr(dispatch, "dispatch_extraction", lambda job_id: True)
    for n in range(4):
        api.post("/api/v1/sessions/s/turns", {"messages": [
            {"role": "user", "content": f"step {n}: run pytest -q in the repository"},
            {"role": "assistant", "content": f"Ran it: {n} passed."}]})  # fmt: skip
    job = ExtractionJob.objects.filter(session__key="s").order_by("-id").first()
    assert workers.run_extraction(job.pk) == "done"
    session = Session.objects.get(key="s")
    assert session.summary_through_seq == (4 if broker else 0)  # 8 messages, 4 kept
    with CaptureQueriesContext(connection) as queries:
        history = api.get("/api/v1/sessions/s/history").json()
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert (writes == []) == broker
    assert history["summary"]["covers_through_seq"] == 4
    assert history["summary"]["text"] and history["summary"]["stale"] is False


def test_rolling_the_summary_reads_what_the_orm_read(
    api, agent, django_capture_on_commit_callbacks, in_process_tasks
):
    """summaries._said and _calls read a span's messages and its turns' tool calls by fixed
    statements: exactly what the querysets they replace gave (every column _events uses,
    JSON details decoded, the turn's numbers, the finding or None), on both databases."""
    from memoryapp.core import summaries
    from memoryapp.core.models import ToolCall

    calls = [
        {"tool": "Grep", "query": {"pattern": "parse_header"}, "output": "src/parser.py:12",
         "details": {"numFiles": 1, "filenames": ["src/parser.py"]}, "call_id": "a"},
        {"tool": "Bash", "query": {"command": "pytest -q"}, "output": "1 failed",
         "success": False},
        {"tool": "Read", "query": "src/parser.py", "output": "def parse_header(): ...",
         "file_path": "src/parser.py"},
    ]  # fmt: skip
    for n in range(3):
        body = {
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": f"step {n}: fix the parser ✓"},
                {"role": "user", "content": "observation: 3 lines", "name": "swe"},
                {"role": "assistant", "content": f"Done {n}."},
                {"role": "tool", "content": "ok", "name": "Bash", "tool_call_id": "a"},
            ],
            "tool_calls": calls,
        }
        with django_capture_on_commit_callbacks(execute=True):
            api.post("/api/v1/sessions/s/turns", body)
    session = Session.objects.get(key="s")
    # One call not extracted yet, one whose finding is gone: the ORM's None as well.
    first, second = ToolCall.objects.filter(session=session).order_by("id")[:2]
    ToolCall.objects.filter(pk=first.pk).update(kind="", fact="", fact_success=None, finding=None)
    second.finding.delete()
    for low, high in ((1, 15), (3, 9), (6, 6), (16, 99)):
        said = list(
            Message.objects.filter(session=session, seq__gte=low, seq__lte=high)
            .exclude(role=Message.Role.SYSTEM)
            .order_by("seq")
            .values_list("seq", "role", "content", "name")
        )
        assert [tuple(row) for row in summaries._said(session, low, high)] == said
        expected = list(
            ToolCall.objects.filter(session=session, turn__last_seq__gte=low,
                                    turn__last_seq__lte=high)
            .select_related("turn", "finding")
            .order_by("turn__iteration", "id")
        )  # fmt: skip
        read = summaries._calls(session, low, high)
        assert len(read) == len(expected)
        assert bool(expected) == any(low <= end <= high for end in (5, 10, 15))  # turns' ends

        def shown(call):
            finding = call.finding
            return (
                *(getattr(call, ToolCall._meta.get_field(f).attname)
                  for f in summaries._CALL_FIELDS),
                call.turn.iteration, call.turn.last_seq,
                None if finding is None else (finding.query, finding.file_path, finding.details),
            )  # fmt: skip

        with CaptureQueriesContext(connection) as queries:
            got = [shown(call) for call in read]
        assert len(queries) == 0  # the turn and the finding came with the call
        assert got == [shown(call) for call in expected]
    kinds = {c.tool: (c.kind, c.finding_id) for c in summaries._calls(session, 1, 5)}
    assert kinds["Grep"] == ("", None) and kinds["Bash"][1] is None and kinds["Read"][1]


def test_a_roll_reads_the_task_only_for_a_summary_without_one(api, agent):
    """The rolled state keeps the task it was first given, so a roll from a state that
    has one does not look for it again (one query fewer on every later roll); the
    summary still names the first task, not a later goal."""
    agent.max_messages = 4
    agent.save()
    for n in range(4):
        api.post("/api/v1/sessions/s/turns", {"messages": [
            {"role": "user", "content": f"step {n}: make the parser accept tabs"},
            {"role": "assistant", "content": f"Step {n} done."}]})  # fmt: skip
    assert "make the parser accept tabs" in api.get("/api/v1/sessions/s/history").json()[
        "summary"]["text"]  # fmt: skip
    api.put("/api/v1/sessions/s", {"goal": "A later goal"})
    api.post("/api/v1/sessions/s/turns", {"messages": [
        {"role": "user", "content": "step 4"},
        {"role": "assistant", "content": "Done."}]})  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        summary = api.get("/api/v1/sessions/s/history").json()["summary"]
    assert summary["covers_through_seq"] == 6
    assert "Task: step 0: make the parser accept tabs" in summary["text"]
    assert "A later goal" not in summary["text"]
    assert not [q for q in queries.captured_queries if "'user'" in q["sql"] and "LIMIT" in q["sql"]]


@pytest.mark.parametrize("reads", ["context", "history"])
def test_the_worker_rolls_ahead_for_the_restore_the_agent_reads(
    api, agent, settings, monkeypatch, reads
):
    """/context's conversation also gets what the other sections leave, so when the
    token budget binds it prunes less than the default restore. The worker rolls the
    summary ahead for the limits of the restore that rolled it last: an agent reading
    /context (or /history) after each turn finds it current and writes nothing, where it
    used to roll it back from a checkpoint and store it on every call. The summary never
    covers a message the answer keeps."""
    from memoryapp.core import dispatch, workers

    agent.token_budget = 2000  # conversation 1,250 tokens: about a dozen of these messages
    agent.save()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr(dispatch, "dispatch_extraction", lambda job_id: True)
    words = "the parser splits the header on dots and the lexer keeps each token " * 5
    path = "/api/v1/sessions/s/context" if reads == "context" else "/api/v1/sessions/s/history"

    def turn_then_worker(n):
        api.post("/api/v1/sessions/s/turns", {"messages": [
            {"role": "user", "content": f"step {n}: {words}"},
            {"role": "assistant", "content": f"done {n}: {words}"}]})  # fmt: skip
        job = ExtractionJob.objects.filter(session__key="s").order_by("-id").first()
        assert workers.run_extraction(job.pk) == "done"

    for n in range(16):
        turn_then_worker(n)
    assert api.get(path).json()["summary"]  # the first read that prunes rolls it for its limits
    for n in range(16, 20):
        turn_then_worker(n)
        with CaptureQueriesContext(connection) as queries:
            answer = api.get(path).json()
        writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
        kept = answer["conversation"] if reads == "context" else answer["messages"]
        first_kept = min(m["seq"] for m in kept if m["role"] != "system")
        assert answer["summary"]["covers_through_seq"] == first_kept - 1
        assert writes == []
    session = Session.objects.get(key="s")
    defaults = (agent.max_messages, agent.default_conversation_budget())
    limits = (session.summary_max_messages, session.summary_max_tokens)
    history = api.get("/api/v1/sessions/s/history").json()
    if reads == "context":  # it pruned less than the default restore would
        assert limits[0] == agent.max_messages and limits[1] > defaults[1]
        assert answer["summary"]["covers_through_seq"] < history["summary"]["covers_through_seq"]
        # The default restore, read now, rolled it further and recorded its own limits.
        session.refresh_from_db()
        assert (session.summary_max_messages, session.summary_max_tokens) == defaults
    else:  # none recorded (the worker's was always current) means the defaults
        assert limits in ((None, None), defaults)


def test_a_person_looking_does_not_change_what_the_worker_rolls_ahead(api, agent):
    """The dashboard assembles the same context to show it (record_access=False): it may
    roll the summary, but the limits the worker rolls ahead for stay the agent's."""
    from memoryapp.core.context import assemble_context

    agent.token_budget = 2000
    agent.save()
    words = "the parser splits the header on dots and the lexer keeps each token " * 5
    for n in range(14):
        api.post("/api/v1/sessions/s/turns", {"messages": [
            {"role": "user", "content": f"step {n}: {words}"},
            {"role": "assistant", "content": f"done {n}: {words}"}]})  # fmt: skip
    api.get("/api/v1/sessions/s/history")
    session = Session.objects.select_related("agent").get(key="s")
    recorded = (session.summary_max_messages, session.summary_max_tokens)
    assert recorded == (agent.max_messages, agent.default_conversation_budget())
    looked = assemble_context(session, record_access=False)
    session.refresh_from_db()
    assert looked["summary"]["covers_through_seq"] == session.summary_through_seq  # it rolled
    assert (session.summary_max_messages, session.summary_max_tokens) == recorded


def test_the_session_a_path_names_is_the_keys_agents_and_live(api, agent, other_api):
    """A `/sessions/{key}/…` request reads its session once; another agent's, an
    expired and an absent session are 404, a key the API refuses 422."""
    from datetime import timedelta

    from django.utils import timezone

    api.post("/api/v1/sessions/s/turns", BODY)
    with CaptureQueriesContext(connection) as queries:
        answer = api.get("/api/v1/sessions/s")
    assert answer.status_code == 200 and answer.json()["totals"]["messages"] == 4
    reads = [q["sql"] for q in queries.captured_queries if 'FROM "core_session"' in q["sql"]]
    assert len(reads) == 1
    history = api.get("/api/v1/sessions/s/history").json()
    assert [m["seq"] for m in history["messages"]] == [1, 2, 3, 4]
    assert other_api.get("/api/v1/sessions/s").status_code == 404
    assert api.get("/api/v1/sessions/absent/history").status_code == 404
    assert api.get("/api/v1/sessions/" + "x" * 300).status_code == 422
    Session.objects.filter(agent=agent, key="s").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert api.get("/api/v1/sessions/s/context").status_code == 404


def test_a_restore_keeps_what_the_reference_pruning_keeps(agent, monkeypatch):
    """restore_history reads a session at once when it has no more messages than the
    limit, else its system messages and then pages of the newest others; both ways keep
    exactly what lib.pruning.prune keeps of the whole list, and read every kept message
    as message_dict gives it from the model."""
    import random

    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
    from memoryapp.core.restore import message_dict, restore_history
    from memoryapp.lib.pruning import MessageCost, prune

    monkeypatch.setattr(restore, "_HISTORY_PAGE", 7)  # many pages, and page edges
    rng = random.Random(13)
    roles = ["system", "user", "assistant", "tool", "user", "assistant"]
    batch = [
        MessageInput(role=rng.choice(roles), content="word " * rng.randint(0, 40))
        for _ in range(60)
    ]
    # The same but for its oldest other message, a tool result: never kept, even when
    # everything else fits (lib.pruning.keeps_all).
    first_other = next(i for i, m in enumerate(batch) if m.role != "system")
    orphan = [*batch[:first_other], MessageInput(role="tool", content="3 passed"),
              *batch[first_other + 1 :]]  # fmt: skip
    for key, messages in (("r", batch), ("orphan", orphan)):
        append_turn(agent, key, TurnInput(messages=messages))
        session = Session.objects.get(agent=agent, key=key)
        stored = list(Message.objects.filter(session=session).order_by("seq"))
        costs = [MessageCost(m.seq, m.role, m.token_count) for m in stored]
        by_seq = {m.seq: message_dict(m) for m in stored}
        systems = sum(m.role == "system" for m in stored)
        for max_messages in (0, 1, systems, 12, 30, 58, 59, 60, 61, 500):
            for max_tokens in (0, 50, 300, 900, 10_000):
                got = restore_history(session, max_messages=max_messages, max_tokens=max_tokens)
                kept, cost = prune(costs, max_messages=max_messages, max_tokens=max_tokens)
                assert [m["seq"] for m in got["messages"]] == kept, (max_messages, max_tokens)
                assert got["messages"] == [by_seq[seq] for seq in kept]
                assert got["token_count"] == cost
                assert got["pruned_count"] == 60 - len(kept)
                kept_tokens = sum(by_seq[seq]["token_count"] for seq in kept)
                assert got["pruned_tokens"] == session.token_count - kept_tokens
        assert len(restore_history(session, max_messages=500, max_tokens=10_000)["messages"]) == (
            60 if key == "r" else 59
        )


@pytest.mark.parametrize("counts", [{}, {"message_count": 61}, {"token_count": 7}])
def test_a_restore_that_fits_answers_as_the_general_path(agent, monkeypatch, counts):
    """A session whose every message fits is written as stored (lib.pruning.keeps_all)
    with the counts the general path answers, also when the session's stored totals
    disagree with its rows (pruned_count and pruned_tokens come from the totals)."""
    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
    from memoryapp.core.restore import restore_history

    batch = [
        MessageInput(role=("user", "assistant")[n % 2], content=f"step {n}") for n in range(60)
    ]
    append_turn(agent, "r", TurnInput(messages=batch))
    Session.objects.filter(agent=agent, key="r").update(**counts)
    session = Session.objects.get(agent=agent, key="r")
    for max_messages, max_tokens in ((60, 10_000), (61, 10_000), (500, 10_000_000)):
        fitted = restore_history(session, max_messages=max_messages, max_tokens=max_tokens)
        monkeypatch.setattr(restore, "keeps_all", lambda *a, **k: None)
        chosen = restore_history(session, max_messages=max_messages, max_tokens=max_tokens)
        monkeypatch.undo()
        assert fitted == chosen and len(fitted["messages"]) == 60
        assert fitted["pruned_count"] == session.message_count - 60
        assert fitted["pruned_tokens"] == session.token_count - sum(
            m["token_count"] for m in fitted["messages"]
        )


def test_context_reads_what_the_orm_reads(api, agent):
    """assemble_context reads its sections by fixed statements (core/rows.py): the same
    rows in the same order as the querysets they replace, and findings with the
    provenance select_related gave (a link whose row is gone reads as None)."""
    from memoryapp.core.context import (
        FINDING_PROVENANCE,
        assemble_context,
        finding_dict,
        read_findings,
    )
    from memoryapp.core.models import ContextItem, Finding, Memory, Subtask, ToolCall, Turn

    api.post("/api/v1/sessions/s/turns", BODY)
    session = Session.objects.get(agent=agent, key="s")
    turn = Turn.objects.get(session=session)
    message = Message.objects.get(session=session, seq=4)
    call = ToolCall.objects.create(turn=turn, session=session, tool="grep", call_id="c1",
                                   file_path="src/parser.py")  # fmt: skip
    Finding.objects.filter(session=session).delete()
    links = [{}, {"turn": turn}, {"turn": turn, "message": message, "tool_call": call},
             {"message": message}]  # fmt: skip
    for n, link in enumerate(links * 2):
        Finding.objects.create(session=session, tool="grep", query=f"q{n}", fact=f"{n} hits",
                               step=n % 3, **link)  # fmt: skip
    for n, confidence in enumerate([0.5, 0.9, 0.9, 0.7]):
        ContextItem.objects.create(session=session, key=f"k{n}", value=f"v{n}",
                                   confidence=confidence)  # fmt: skip
    for n, confidence in enumerate([0.95, 0.8, 0.8, 0.99, 0.9, 0.85, 0.6]):
        about = " about the parser to review" if n in (1, 4) else ""
        Memory.objects.create(agent=agent, content=f"fact {n}{about}", confidence=confidence)
    Session.objects.filter(pk=session.pk).update(goal="Review each parser fact")
    session.refresh_from_db()
    Subtask.objects.create(session=session, title="later", position=2)
    Subtask.objects.create(session=session, title="now", position=5,
                           status=Subtask.Status.IN_PROGRESS)  # fmt: skip
    Subtask.objects.create(session=session, title="done", position=0,
                           status=Subtask.Status.DONE)  # fmt: skip

    # Ties that only the later keys of each order break.
    from datetime import timedelta

    from django.utils import timezone

    Finding.objects.filter(session=session).update(updated_at=timezone.now())
    later = timezone.now() + timedelta(seconds=5)
    Memory.objects.filter(agent=agent, content="fact 1").update(updated_at=later)
    ContextItem.objects.filter(session=session, key="k1").update(updated_at=later)

    got = read_findings(session, 200)
    expected = list(
        Finding.objects.filter(session=session)
        .select_related("turn", "message", "tool_call")
        .only(*(f.name for f in Finding._meta.concrete_fields), *FINDING_PROVENANCE)
        .order_by("-updated_at", "-id")
    )
    assert [finding_dict(f) for f in got] == [finding_dict(f) for f in expected]
    assert [(f.turn_id, f.message_id, f.tool_call_id) for f in got] == [
        (f.turn_id, f.message_id, f.tool_call_id) for f in expected
    ]
    assert finding_dict(got[1])["provenance"] == {"turn": 1, "message_seq": 4,
                                                  "tool_call_id": "c1"}  # fmt: skip
    assert len(read_findings(session, 3)) == 3
    # The dashboard's: with the call's tool and query, and the live poll's, after an id.
    shown = read_findings(session, 200, call_columns=("call_id", "tool", "query"))
    assert [(f.id, f.tool_call.tool if f.tool_call else None) for f in shown] == [
        (f.id, f.tool_call.tool if f.tool_call else None) for f in expected
    ]
    first = min(f.id for f in expected)
    after = read_findings(session, 3, after=first)
    assert [f.id for f in after] == sorted(f.id for f in expected)[1:4]
    assert all(f.session is session for f in after)

    context = assemble_context(session, record_access=False)
    items = ContextItem.objects.filter(session=session).order_by(
        "-confidence", "-updated_at", "-id"
    )
    assert [i["key"] for i in context["working_context_items"]] == [i.key for i in items]
    # Without a hint: the memories that bear on the session's goal (two of its words), by
    # confidence.
    memories = Memory.objects.filter(agent=agent, content__contains="parser").order_by(
        "-confidence", "-updated_at", "-id"
    )
    assert [m["id"] for m in context["long_term_memories"]] == [m.id for m in memories]
    assert len(memories) == 2
    # With a query hint: recall's ranking (memoryapp.core.recall), the rows as the ORM
    # reads them; never a superseded memory.
    from memoryapp.core import recall
    from memoryapp.core.context import memory_dict

    Memory.objects.create(agent=agent, content="a fact about parsers", confidence=0.3)
    Memory.objects.create(agent=agent, content="a parser fact", status=Memory.Status.SUPERSEDED)
    hinted = assemble_context(session, query_hint="fact parser", record_access=False)
    expected_memories = recall.rank(agent, "fact parser", status="active")[:10]
    assert len(expected_memories) == 8
    assert all(m.status == "active" for m in expected_memories)
    assert hinted["long_term_memories"] == [memory_dict(m) for m in expected_memories]
    assert all(m["why"]["terms"] for m in hinted["long_term_memories"])
    assert "now" in context["prompt"] and "later" not in context["prompt"]
    assert "grep" in context["prompt"] and "src/parser.py" in context["prompt"]
    Subtask.objects.filter(session=session, title="now").update(status=Subtask.Status.DONE)
    Subtask.objects.create(session=session, title="first", position=1)
    prompt = assemble_context(session, record_access=False)["prompt"]
    assert "first" in prompt and "later" not in prompt  # no task in progress: by position

    if connection.vendor == "postgresql":  # no constraint: the message row can go alone
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM core_message WHERE id = %s", [message.pk])
        gone = {f.id: f for f in read_findings(session, 200)}
        assert all(f.message is None for f in gone.values())
        assert {f.message_id for f in gone.values()} == {None, message.pk}


def test_messages_and_turns_have_no_single_column_session_index():
    """Migration 0011: the (session, seq) and (session, iteration) unique constraints
    serve every lookup by session; a single-column index only cost writes, and misled
    PostgreSQL into reading a whole grown session to find its newest messages."""
    with connection.cursor() as cursor:
        for table in ("core_message", "core_turn"):
            constraints = connection.introspection.get_constraints(cursor, table)
            by_session = [c["columns"] for c in constraints.values() if c["index"] or c["unique"]]
            assert ["session_id"] not in by_session, table
            assert any(cols[:1] == ["session_id"] and len(cols) == 2 for cols in by_session)


def test_a_findings_message_link_has_no_database_constraint_and_still_behaves():
    """Migration 0012: PostgreSQL no longer checks finding -> message at commit once per
    deleted message (most of TTL cleanup's time). The link still behaves: cleanup removes
    a session's findings with its messages, and a message deleted on its own leaves its
    finding with no message, as the ORM's SET_NULL says."""
    from datetime import timedelta

    from django.utils import timezone

    from memoryapp.core.cleanup import purge_sessions
    from memoryapp.core.models import Agent, Finding

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            constraints = connection.introspection.get_constraints(cursor, "core_finding")
        assert not [c for c in constraints.values() if c["foreign_key"] and
                    c["columns"] == ["message_id"]]  # fmt: skip
    agent = Agent.objects.create(name="links")
    sessions = []
    for key in ("gone", "kept"):
        session = Session.objects.create(agent=agent, key=key, expires_at=timezone.now())
        message = Message.objects.create(session=session, seq=1, role="tool", content="3 hits",
                                         token_count=3)  # fmt: skip
        Finding.objects.create(session=session, tool="grep", query="q", fact="3 hits",
                               message=message)  # fmt: skip
        sessions.append(session)
    gone, kept = sessions
    Session.objects.filter(pk=kept.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    purge_sessions([gone.pk, kept.pk], timezone.now())
    assert not Finding.objects.filter(session_id=gone.pk).exists()
    assert not Message.objects.filter(session_id=gone.pk).exists()
    Message.objects.filter(session=kept).delete()
    assert Finding.objects.get(session=kept).message_id is None


@pytest.mark.parametrize("working_budget", [40, 90, 160, 400, 100_000])
def test_context_keeps_the_longest_prefix_of_findings_that_fits(agent, working_budget):
    """assemble_context tries all the findings first (one exact count), and searches only
    when they do not fit: either way, the newest findings that fit, and the next one
    would not have."""
    from memoryapp.core.context import (
        _finding_items,
        assemble_context,
        findings_for_prompt,
        read_findings,
    )
    from memoryapp.core.models import Finding
    from memoryapp.lib import prompt as fmt
    from memoryapp.lib import tokens

    agent.working_budget = working_budget
    agent.save()
    session = Session.objects.create(agent=agent, key="f", expires_at="2099-01-01T00:00:00Z")
    for n in range(12):
        Finding.objects.create(session=session, tool="grep", query=f"symbol_{n}",
                               fact=f"{n} matches of symbol_{n} in src/module_{n}.py")  # fmt: skip
    context = assemble_context(session, record_access=False)
    kept = len(context["findings"])
    found = findings_for_prompt(session, read_findings(session, 100), [])
    ordered = found.findings
    encoding = tokens.get_encoding(agent.encoding)

    def cost(count):
        text = fmt.findings_section(_finding_items(ordered[:count], found))
        return tokens.count_text(encoding, text + "\n\n") if text else 0

    room = context["budget"]["working"] - context["token_counts"]["working"] + cost(kept)
    assert cost(kept) <= room
    assert kept == len(ordered) or cost(kept + 1) > room
    if working_budget <= 90:
        assert 0 < kept < 12 or (working_budget == 40 and kept < 12)  # the search ran
    if working_budget == 100_000:
        assert kept == 12  # all fit: no search


def test_rolling_ahead_reads_nothing_for_a_session_that_fits(api, agent):
    """The worker's roll-ahead costs a session whose whole history fits no query at all
    (most sessions, most of the time); one over its max_messages it restores."""
    from memoryapp.core.summaries import roll_summary_ahead

    api.post("/api/v1/sessions/small/turns", BODY)
    session = Session.objects.select_related("agent").get(key="small")
    with CaptureQueriesContext(connection) as queries:
        roll_summary_ahead(session)
    assert len(queries) == 0
    agent.max_messages = 2
    agent.save()
    session = Session.objects.select_related("agent").get(key="small")
    with CaptureQueriesContext(connection) as queries:
        roll_summary_ahead(session)
    assert len(queries) > 0 and Session.objects.get(key="small").summary_through_seq > 0


def test_the_session_page_reads_its_findings_once(api, agent):
    """The page shows the newest findings and its assembled context fits the same ones:
    one read serves both (before: two, with every related row's columns), and the
    context's findings keep their provenance."""
    from memoryapp.core.models import Finding, ToolCall
    from tests.conftest import logged_in_member

    api.post("/api/v1/sessions/s/turns", {
        "messages": [{"role": "user", "content": "find the parser"}],
        "tool_calls": [{"tool": "grep", "query": f"symbol_{n}", "call_id": f"c{n}"}
                       for n in range(5)]})  # fmt: skip
    session = Session.objects.get(key="s")
    Finding.objects.filter(session=session).delete()
    for call in ToolCall.objects.filter(session=session):
        Finding.objects.create(session=session, tool="grep", query=call.query, fact="1 match",
                               tool_call=call, turn=call.turn)  # fmt: skip
    viewer = logged_in_member("viewer", agent, "vera")
    with CaptureQueriesContext(connection) as queries:
        page = viewer.get(f"/agents/{agent.name}/sessions/s/")
    assert page.status_code == 200
    newest = [
        q["sql"]
        for q in queries.captured_queries
        if 'FROM "core_finding"' in q["sql"] and '"core_finding"."updated_at" DESC' in q["sql"]
    ]
    assert len(newest) == 1, newest
    context = page.context["prompt"]
    assert all(f"symbol_{n}" in context for n in range(5))
    answered = api.get("/api/v1/sessions/s/context").json()["findings"]
    assert sorted(f["provenance"]["tool_call_id"] for f in answered) == [f"c{n}" for n in range(5)]


def test_extraction_deletes_the_whole_outputs_it_read_and_no_others(
    api, settings, django_capture_on_commit_callbacks
):
    """The worker deletes the whole outputs (PendingToolOutput) of the turn it extracted,
    read with its tool calls, and asks nothing more when there are none; another turn's,
    not extracted yet, stay."""
    from memoryapp.core.models import PendingToolOutput

    long_output = "src/parser.py:12: def parse_header\n" * 400
    assert len(long_output) > settings.MEMORYAPP_TOOL_OUTPUT_EXCERPT_CHARS

    def turn(key: str) -> dict:
        return {"messages": [{"role": "user", "content": "find it"}],
                "tool_calls": [{"tool": "grep", "query": "parse_header", "output": long_output},
                               {"tool": "ls", "query": "src", "output": "parser.py"}]}  # fmt: skip

    from memoryapp.core.workers import run_extraction

    with django_capture_on_commit_callbacks(execute=False):  # no extraction yet, either mode
        for key in ("done", "later"):
            assert api.post(f"/api/v1/sessions/{key}/turns", turn(key)).status_code == 201
    assert PendingToolOutput.objects.count() == 2
    assert run_extraction(ExtractionJob.objects.get(session__key="done").pk) == "done"
    left = PendingToolOutput.objects.values_list("tool_call__session__key", flat=True)
    assert list(left) == ["later"]
    assert Session.objects.get(key="done").findings.filter(tool="grep").exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_the_worker_holds_its_jobs_row_lock_and_only_that_one():
    """workers._locked_job locks the job's row for the transaction (another worker
    waits), and not its turn's: FOR UPDATE OF the job alone."""
    import threading

    from django.db import OperationalError, connections

    from memoryapp.core import workers
    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
    from memoryapp.core.models import Agent

    agent = Agent.objects.create(name="locks")
    append_turn(agent, "s", TurnInput([MessageInput("user", "hello")]))
    job = ExtractionJob.objects.get(session__agent=agent)
    outcome: dict = {}

    def other_worker() -> None:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("BEGIN")
                for table, pk in (("core_turn", job.turn_id), ("core_extractionjob", job.pk)):
                    try:
                        cursor.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE NOWAIT",
                                       [pk])  # fmt: skip
                        outcome[table] = "free"
                    except OperationalError:
                        outcome[table] = "locked"
                        break
                cursor.execute("ROLLBACK")
        finally:
            other.close()

    with transaction.atomic():
        assert workers._locked_job(job.pk)[0].turn_id == job.turn_id
        thread = threading.Thread(target=other_worker)
        thread.start()
        thread.join()
    assert outcome == {"core_turn": "free", "core_extractionjob": "locked"}
    agent.delete()


def test_messages_page_through_a_session_in_windows_of_seq(api):
    """GET /messages reads a page as a window of seq (never a keyset page that the planner
    could turn into a scan of the rest of the session): every message once, in order,
    whatever the limit, a page of exactly the last messages ends the listing, and a
    missing seq (a message deleted on its own) only makes a page read further."""
    batch = [{"role": "user", "content": f"m{i}"} for i in range(23)]
    api.post("/api/v1/sessions/pages/turns", {"messages": batch})

    def listing(limit: int) -> tuple[list[str], int]:
        seen, cursor, pages = [], None, 0
        while True:
            params = {"limit": limit, **({"cursor": cursor} if cursor else {})}
            answer = api.get("/api/v1/sessions/pages/messages", params).json()
            assert len(answer["items"]) <= limit
            seen += [m["content"] for m in answer["items"]]
            pages += 1
            cursor = answer["next_cursor"]
            if cursor is None:
                return seen, pages

    for limit in (1, 5, 22, 23, 24, 100):
        seen, pages = listing(limit)
        assert seen == [f"m{i}" for i in range(23)], limit
        assert pages == -(-23 // limit)  # a full last page says there is no more
    with CaptureQueriesContext(connection) as captured:
        api.get("/api/v1/sessions/pages/messages", {"limit": 5})
    (page_sql,) = [q["sql"] for q in captured.captured_queries if "core_message" in q["sql"]]
    assert "LIMIT" not in page_sql.upper() and '"seq" <= 6' in page_sql
    Message.objects.filter(session__key="pages", seq__in=[3, 4, 11]).delete()
    seen, _ = listing(5)
    assert seen == [f"m{i}" for i in range(23) if i + 1 not in (3, 4, 11)]


def test_recording_a_change_does_not_read_its_session_again(agent):
    """ContextItem.put and Finding.record change a row they read with the session in
    hand: the event they write names the session's agent without a query for it (the
    extraction worker does this for each turn whose evidence moves)."""
    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
    from memoryapp.core.models import ContextItem, Finding, MemoryEvent

    append_turn(agent, "events", TurnInput([MessageInput("user", "find the parser")]))
    session = Session.objects.get(agent=agent, key="events")
    with transaction.atomic():
        ContextItem.put(session, "task", "a", source="inferred", confidence=0.5, actor="t")
        Finding.record(session, tool="grep", query="x", fact="1 match", actor="t")
    fresh = Session.objects.get(pk=session.pk)  # as a worker reads it: nothing cached
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        ContextItem.put(fresh, "task", "b", source="inferred", confidence=0.6, actor="t")
        Finding.record(fresh, tool="grep", query="x", fact="2 matches", actor="t")
    session_reads = [
        q["sql"] for q in captured.captured_queries if 'FROM "core_session"' in q["sql"]
    ]
    assert session_reads == []
    events = MemoryEvent.objects.filter(agent=agent, action=MemoryEvent.Action.UPDATE)
    assert events.count() == 2


@pytest.mark.parametrize(
    ("max_messages", "max_tokens"),
    [(100, 100_000), (6, 100_000), (100, 120), (7, 90), (2, 100_000), (0, 100_000), (100, 5)],
)
def test_the_pruned_point_is_the_restores(api, agent, max_messages, max_tokens):
    """restore.pruned_point (the worker's roll-ahead) reads only each message's seq,
    role and tokens: it must prune exactly where restore_history does, whatever binds
    (count, tokens, system messages alone over the limit, a tool result at the edge)."""
    from memoryapp.core.restore import pruned_point, pruned_through, restore_history

    api.post("/api/v1/sessions/s/turns", BODY)  # system, user, assistant call, tool result
    for n in range(4):
        api.post("/api/v1/sessions/s/turns", {"messages": [
            {"role": "user", "content": f"step {n}: " + "run the tests " * (n + 1)},
            {"role": "assistant", "content": "", "tool_calls": BODY["messages"][2]["tool_calls"]},
            {"role": "tool", "content": "12 passed " * (4 - n), "tool_call_id": "c1",
             "name": "grep"}]})  # fmt: skip
    session = Session.objects.get(key="s")
    history = restore_history(session, max_messages=max_messages, max_tokens=max_tokens)
    expected = (history["pruned_count"], pruned_through(session, history["messages"]))
    assert pruned_point(session, max_messages=max_messages, max_tokens=max_tokens) == expected
