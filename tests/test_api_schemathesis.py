"""Generated requests over the live OpenAPI document (schemathesis): every operation,
valid and invalid inputs, asserting no answer is a 5xx and every answer is one the
document declares (status, content type, body shape). Also run without a key, to see
every operation refuse it (401).

The cases run in process against the WSGI application, on whichever database the tests
use. CI runs a bounded number per operation; `MEMORYAPP_SCHEMATHESIS_EXAMPLES=500` (or
more) runs a longer campaign. Path parameters name real objects half the time (a session
with turns, findings, context items, a memory, a subtask), so generated cases reach the
code behind a 404 too.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from urllib.parse import unquote

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import positive_data_acceptance

from memoryapp.api.schemas import EARLIEST_TIMESTAMP
from memoryapp.http.middleware import unstorable_at
from memoryapp.http.schemas import check_name
from memoryapp.wsgi import application
from tests.conftest import turn

pytestmark = pytest.mark.django_db(transaction=False)

EXAMPLES = int(os.environ.get("MEMORYAPP_SCHEMATHESIS_EXAMPLES", "25"))

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)

# Real objects the seeded fixture creates, so half of the generated paths resolve.
KNOWN = {"key": "s", "name": "branch"}


def _a_name(value) -> bool:
    try:
        check_name(unquote(str(value)), "a name")  # path parameters arrive percent-encoded
    except ValueError:
        return False
    return True


@schema.hook
def flatmap_path_parameters(context, path_parameters):
    """Replace a generated session key or item name by a real one, half the time (a
    Hypothesis choice, so a failure shrinks and replays); never one generated to break
    the schema's rule (a negative case stays negative)."""
    if not path_parameters:
        return st.just(path_parameters)
    return st.booleans().map(
        lambda real: {
            name: (KNOWN.get(name, value) if real and _a_name(value) else value)
            for name, value in path_parameters.items()
        }
    )


@pytest.fixture
def seeded(api, keep_connection_open, in_process_tasks, settings):
    """A session with turns, working context, a finding, a subtask and a memory. Rate
    limits are off: hundreds of cases come from one key and one address."""
    settings.MEMORYAPP_RATE_LIMIT_KEY = "off"
    settings.MEMORYAPP_RATE_LIMIT_ADDRESS = "off"
    api.post(
        "/api/v1/sessions/s/turns",
        turn(("system", "You fix bugs."), ("user", "Fix the lexer."), ("assistant", "On it.")),
    )
    api.put("/api/v1/sessions/s/context-items/branch", {"value": "main"})
    api.post("/api/v1/sessions/s/findings", {"tool": "Read", "query": "a.py", "fact": "a.py: 3"})
    api.post("/api/v1/sessions/s/subtasks", {"title": "Reproduce the bug"})
    api.post("/api/v1/memories", {"content": "The lexer splits on dots", "session": "s"})
    return api


HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


def _plausible(timestamp: str) -> bool:
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return EARLIEST_TIMESTAMP <= moment.astimezone(UTC) <= datetime.now(UTC)
    except (ValueError, OverflowError):
        return False


def _valid_only_if_issued(case) -> bool:
    """Whether the case holds a value the schema can only describe in words: a cursor
    (valid only as issued by the server), text no database
    stores, subtask or finding ids that are not this session's, a timestamp before 1970
    or in the future (each stated in the schema's descriptions). A 422 for those is the
    contract, so the check that schema-valid input is accepted skips them (every other
    check still runs). An encoding is the schema's enum, and a session key or item name
    follows the schema's pattern: checked like any value."""
    if (case.query or {}).get("cursor"):
        return True
    if unstorable_at([case.body, case.query]) is not None:
        return True  # NUL or a lone surrogate: no database stores it (a 422 naming it)
    body = case.body if isinstance(case.body, dict) else {}
    if case.path == "/api/v1/tools/call":
        return True  # `arguments` follow the tool's own schema, published by GET /tools
    if case.path == "/api/v1/import":
        return True  # an export: its numbering, totals and references are checked in words
    if isinstance(body.get("timestamp"), str) and not _plausible(body["timestamp"]):
        return True  # a model call's time: 1970 to a day from now
    if body.get("dependencies"):
        return True  # ids of this session's subtasks: others are a 422
    calls = body.get("tool_calls")
    if isinstance(calls, list) and any(
        isinstance(c, dict) and c.get("known_from") is not None for c in calls
    ):
        return True  # a finding of this session: another id is a 422
    return False


@schema.parametrize()
@HYPOTHESIS
def test_no_operation_answers_a_5xx_or_off_its_schema(case, seeded):
    excluded = [schemathesis.checks.ignored_auth]
    if _valid_only_if_issued(case):
        excluded.append(positive_data_acceptance)
    case.call_and_validate(
        headers={"Authorization": f"Bearer {seeded.key}"}, excluded_checks=excluded
    )


@schema.parametrize()
@settings(HYPOTHESIS, max_examples=3)
def test_every_operation_refuses_a_request_without_a_key(case, db, keep_connection_open, settings):
    if settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES != "off":  # many wrong keys from one address
        # Once per test, not per example: each assignment nests another settings override,
        # and POST /import gets a thousand examples (exports captured from earlier answers).
        settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES = "off"
    response = case.call()
    if case.path == "/api/v1/health":
        assert response.status_code in (200, 405, 503)
        return
    # 405: a method the path does not take (checked before the key, as Django routes).
    assert response.status_code in (401, 405), (response.status_code, response.text)
    headers = {name.lower(): values for name, values in response.headers.items()}
    if response.status_code == 401:
        assert headers["www-authenticate"][0].startswith("Bearer")
    assert headers["content-type"][0].startswith("application/json")
    assert "detail" in response.json()
