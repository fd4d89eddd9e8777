"""A real Celery worker against a real Redis: findings and working context appear after an
API append; with the broker down, ingest still answers 201 and the sweep catches up.

Needs REDIS_URL=redis://... (a real broker); `.ci/run` runs these in its PostgreSQL +
Redis pass. The worker is a separate process on the test database.
"""

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from memoryapp import celery_app
from memoryapp.core import dispatch
from memoryapp.core.models import Agent, ApiKey, ContextItem, ExtractionJob, Finding
from memoryapp.core.tasks import extract_turn
from tests.conftest import TOOL_OUTPUTS

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = TOOL_OUTPUTS

pytestmark = [
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs a real broker: set REDIS_URL=redis://..."
    ),
    pytest.mark.django_db(transaction=True),
]


def _database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///" + str(Path(db["NAME"]).resolve())
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return f"postgres://{db['USER']}{password}@{host}/{db['NAME']}"


@pytest.fixture
def worker(tmp_path):
    celery_app.control.purge()  # messages other tests queued for rows that are gone
    log = tmp_path / "worker.log"
    env = {**os.environ, "DATABASE_URL": _database_url(), "REDIS_URL": settings.REDIS_URL}
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "memoryapp", "worker", "--pool", "solo",
         "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "worker did not start:\n" + log.read_text()
            time.sleep(0.2)
        yield log
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_for(condition, log, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("timed out; worker log:\n" + log.read_text()[-3000:])


def append(key, body):
    return Client().post(
        "/api/v1/sessions/s1/turns", body, content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )  # fmt: skip


def turn_body():
    call = OUTPUTS["swe_find_file_3"]
    return {
        "messages": [
            {"role": "user", "content": "Where is the numpy handler?"},
            {
                "role": "assistant",
                "content": "Let's open `pydicom/pixel_data_handlers/numpy_handler.py`.",
            },
        ],
        "tool_calls": [{"tool": call["tool"], "query": call["query"], "output": call["output"]}],
    }


def test_findings_and_context_appear_after_an_append(worker):
    key = ApiKey.issue(Agent.objects.create(name="live"))[1]
    assert append(key, turn_body()).status_code == 201
    wait_for(lambda: ExtractionJob.objects.filter(status="done").exists(), worker)
    finding = Finding.objects.get()
    assert finding.fact.startswith(
        "3 files under /pydicom__pydicom/pydicom: overlays/numpy_handler.py"
    )
    assert finding.source == "extracted"
    item = ContextItem.objects.get()
    assert (item.key, item.value) == ("current_task", "Where is the numpy handler?")
    assert "extract_turn" in worker.read_text()


def test_broker_down_then_recovery(worker, monkeypatch):
    key = ApiKey.issue(Agent.objects.create(name="outage"))[1]
    publish = extract_turn.apply_async

    def through_a_dead_broker(*args, **kwargs):
        # A real connection to a port nothing listens on: what a down Redis looks like.
        with celery_app.connection_for_write("redis://127.0.0.1:1/0") as dead:
            return publish(*args, connection=dead, **kwargs)

    monkeypatch.setattr(extract_turn, "apply_async", through_a_dead_broker)
    dispatch.reset_broker_backoff()
    started = time.monotonic()
    assert append(key, turn_body()).status_code == 201
    assert time.monotonic() - started < 30  # bounded by the connect timeout, not a hang
    assert ExtractionJob.objects.get().status == "pending"
    assert Finding.objects.count() == 0
    monkeypatch.undo()
    # The broker is back: the beat's sweep dispatches what could not be queued.
    assert dispatch.sweep_extractions(now=timezone.now() + timedelta(minutes=1)) == 1
    wait_for(lambda: ExtractionJob.objects.filter(status="done").exists(), worker)
    assert Finding.objects.count() == 1 and ContextItem.objects.count() == 1


def test_the_sweep_reads_the_real_queue_length(worker):
    """The sweep redoes a queued job only when the broker's queue is empty; that length
    comes from Redis itself (0 once the worker drained it)."""
    key = ApiKey.issue(Agent.objects.create(name="depth"))[1]
    assert append(key, turn_body()).status_code == 201
    wait_for(lambda: ExtractionJob.objects.filter(status="done").exists(), worker)
    assert dispatch._broker_backlog() == 0
