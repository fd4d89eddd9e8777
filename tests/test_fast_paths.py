"""Issue 13: the hot paths made fast keep their behaviour.

PostgreSQL appends a turn to a live session in one statement (conversation._APPEND_PG)
instead of the general path's eight; it must store exactly what the general path stores
and answer exactly what it answers. On SQLite only the general path exists, and these
tests compare it with itself (they still check the answer's numbers).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryapp.core import conversation
from memoryapp.core.models import ExtractionJob, Message, Session, Turn

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


def without_times(answer: dict) -> dict:
    summary = {k: v for k, v in answer["session"].items() if k != "key" and not k.endswith("_at")}
    return {**answer, "session": summary}


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
def test_on_postgresql_an_append_to_a_live_session_is_one_statement(api):
    assert api.put("/api/v1/sessions/live", {}).status_code == 201
    with CaptureQueriesContext(connection) as queries:
        response = api.post("/api/v1/sessions/live/turns", BODY)
    assert response.status_code == 201
    statements = [q["sql"] for q in queries.captured_queries if "core_apikey" not in q["sql"]]
    assert len(statements) == 1 and statements[0].lstrip().startswith("WITH s AS")


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
