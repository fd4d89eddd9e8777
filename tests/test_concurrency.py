"""Concurrent appends to one session: nothing lost, nothing duplicated, seq gapless.

Real threads with their own database connections against the real database (a SQLite
file in WAL mode on the embedded setup, PostgreSQL when DATABASE_URL says so).
"""

import threading
from collections import defaultdict

import pytest
from django.db import connection
from django.test import Client

from memoryapp.core.models import Agent, ApiKey, Message, Session, Turn

pytestmark = pytest.mark.django_db(transaction=True)

APPENDERS = 20
TURNS_EACH = 3


def run_threads(count, target):
    errors = []
    barrier = threading.Barrier(count)

    def wrapped(index):
        try:
            barrier.wait(timeout=30)
            target(index)
        except Exception as exc:  # surfaced by the assertion below
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []


def test_twenty_concurrent_appenders_give_a_gapless_sequence():
    agent = Agent.objects.create(name="busy")
    key = ApiKey.issue(agent)[1]
    statuses = []

    def append(index):
        client = Client()
        for j in range(TURNS_EACH):
            body = {
                "messages": [
                    {"role": "user", "content": f"w{index}-t{j}-q"},
                    {"role": "assistant", "content": f"w{index}-t{j}-a"},
                ]
            }
            response = client.post(
                "/api/v1/sessions/shared/turns",
                body,
                content_type="application/json",
                headers={"Authorization": f"Bearer {key}"},
            )
            statuses.append(response.status_code)

    run_threads(APPENDERS, append)

    assert statuses == [201] * (APPENDERS * TURNS_EACH)
    assert Session.objects.count() == 1  # concurrent first writes created one session
    total = APPENDERS * TURNS_EACH * 2
    rows = list(Message.objects.order_by("seq").values_list("seq", "content", "turn__iteration"))
    assert [seq for seq, _, _ in rows] == list(range(1, total + 1))
    contents = [content for _, content, _ in rows]
    assert sorted(contents) == sorted(
        f"w{i}-t{j}-{part}"
        for i in range(APPENDERS)
        for j in range(TURNS_EACH)
        for part in ("q", "a")
    )
    # A turn's messages are consecutive and each writer's turns keep their order.
    by_writer = defaultdict(list)
    for seq, content, iteration in rows:
        by_writer[content.split("-")[0]].append((seq, content, iteration))
    for writer, items in by_writer.items():
        expected = [f"{writer}-t{j}-{part}" for j in range(TURNS_EACH) for part in ("q", "a")]
        assert [c for _, c, _ in items] == expected
        for (seq_q, _, it_q), (seq_a, _, it_a) in zip(items[::2], items[1::2], strict=True):
            assert seq_a == seq_q + 1 and it_q == it_a
    iterations = sorted(Turn.objects.values_list("iteration", flat=True))
    assert iterations == list(range(1, APPENDERS * TURNS_EACH + 1))
    session = Session.objects.get()
    assert session.message_count == total
    assert session.turn_count == APPENDERS * TURNS_EACH
    assert session.token_count == sum(Message.objects.values_list("token_count", flat=True))


@pytest.mark.parametrize("session_exists", [False, True])
def test_concurrent_retries_with_one_idempotency_key_store_once(session_exists):
    """Whether the first retry creates the session (the general path) or finds it live
    (PostgreSQL's one-statement append, where the retries race on the row lock and on
    the Idempotency-Key's unique record)."""
    agent = Agent.objects.create(name="retry")
    key = ApiKey.issue(agent)[1]
    if session_exists:
        Client().put("/api/v1/sessions/r", {}, content_type="application/json",
                     headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    answers = []

    def retry(index):
        response = Client().post(
            "/api/v1/sessions/r/turns",
            {"messages": [{"role": "user", "content": "only once"}]},
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "same"},
        )
        answers.append((response.status_code, response.json()["first_seq"]))

    run_threads(8, retry)
    assert answers == [(201, 1)] * 8
    assert Message.objects.count() == 1
