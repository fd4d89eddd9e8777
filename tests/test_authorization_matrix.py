"""The authorization matrix: every agent-API operation and every dashboard URL, requested
by every kind of caller, with the status each must get written down as a table.

The callers (columns) are: anonymous (no key, not logged in), a wrong API key, a revoked
key of the agent's, another agent's valid key, the agent's own key, and people logged in
to the dashboard: with no role at all, viewer, editor and staff of the agent
(memoryapp/dashboard/models.py), a Django `is_staff` user with no role (cleanup needs
`is_staff`, not the staff role), and a superuser. The agent under test is `coder`; every
object its URLs name (session with turns, memory, finding, working-context item, subtask,
API key, history event) is real and holds CANARY, so an answer that shows coder's data to
someone who may not see it is caught.

The tables are literal on purpose: they say what the code must do, not what it does. The
API rows come from the OpenAPI document and the dashboard rows from the URL resolver, and
both are checked against the tables, so a URL or method added without a row fails here.
Rules applied to every cell besides its status:
- a refused request (401, 403, 404, 405, a redirect to the login page) changes no row;
- another agent's key never changes coder's data, even where it gets a 2xx (it acts on
  its own agent: a PUT of a session with coder's key name creates its own, 201 not 200);
- whoever has no right to coder's data never gets an answer that contains it.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, transaction
from django.http import HttpResponse
from django.test import Client
from django.test.client import ClientHandler
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from memoryapp.ams.api import router as ams_router
from memoryapp.ams.models import MemoryRecord, RecordTag
from memoryapp.api.api import api as agent_api
from memoryapp.core.models import (
    Agent,
    ApiKey,
    CleanupRun,
    ContextItem,
    ExtractionJob,
    Finding,
    IdempotencyRecord,
    Memory,
    MemoryEvent,
    Message,
    PendingToolOutput,
    Session,
    Subtask,
    ToolCall,
    Turn,
    hash_api_key,
)
from memoryapp.dashboard.models import Membership
from tests.conftest import ApiClient, logged_in_member, turn
from tests.test_export import COMPLETE_DOCUMENT

# The import page's dry run reads a real agent file (tests/fixtures/letta/SOURCE.txt).
LETTA_FILE = Path(__file__).parent / "fixtures" / "letta" / "loop.af"

pytestmark = pytest.mark.django_db

CANARY = "quokkazanzibar"  # in every object of coder's that a URL names
THEIR_MARK = "wallabyottawa"  # in the other agent's objects (which it may see)
SESSION = "task-1"  # coder's session
THEIR_SESSION = "their-task"  # the other agent's session (a key coder does not have)
ITEM = "current_task"  # the working-context item in each session

# --- the callers -----------------------------------------------------------------------------

ANON = "anonymous"
WRONG_KEY = "wrong-key"
REVOKED_KEY = "revoked-key"  # coder's own, revoked
OTHER_KEY = "other-agents-key"
OWN_KEY = "own-key"
NO_ROLE = "no-role"
VIEWER = "viewer"
EDITOR = "editor"
STAFF = "staff"
DJANGO_STAFF = "django-staff"
SUPERUSER = "superuser"

KEYS = (WRONG_KEY, REVOKED_KEY, OTHER_KEY, OWN_KEY)
LOGINS = (NO_ROLE, VIEWER, EDITOR, STAFF, DJANGO_STAFF, SUPERUSER)
PRINCIPALS = (ANON, *KEYS, *LOGINS)
# No right to any of coder's data. (The Django staff user sees the cleanup page, which
# lists every agent's expired sessions by design; coder has none expired here.)
OUTSIDERS = {ANON, WRONG_KEY, REVOKED_KEY, OTHER_KEY, NO_ROLE, DJANGO_STAFF}

LOGIN = "login"  # a redirect to the login page
REFUSED = {401, 403, 404, 405, LOGIN}


# --- the API table -----------------------------------------------------------------------------
# Paths under /api/v1, as in the OpenAPI document. "login" is each of the six people logged
# in to the dashboard, sending their session cookie and no key: a login is not an API key.
# Excluded, public by design: GET /health (a load balancer's check, no agent data), the
# docs page and openapi.json; django-ninja's root /api/v1/ answers 404 (all checked by
# test_public_api_urls_are_only_the_documented_ones).

API_MATRIX = """
method  path                                    variant   anon wrong revoked other own login
GET     /agent                                  -         401  401   401     200   200 401
PATCH   /agent                                  -         401  401   401     200   200 401
GET     /sessions                               -         401  401   401     200   200 401
PUT     /sessions/{key}                         -         401  401   401     201   200 401
GET     /sessions/{key}                         -         401  401   401     404   200 401
DELETE  /sessions/{key}                         -         401  401   401     404   204 401
POST    /sessions/{key}/turns                   -         401  401   401     201   201 401
GET     /sessions/{key}/turns                   -         401  401   401     404   200 401
GET     /sessions/{key}/history                 -         401  401   401     404   200 401
GET     /sessions/{key}/messages                -         401  401   401     404   200 401
GET     /sessions/{key}/stats                   -         401  401   401     404   200 401
GET     /sessions/{key}/context                 -         401  401   401     404   200 401
GET     /sessions/{key}/context-items           -         401  401   401     404   200 401
PUT     /sessions/{key}/context-items/{name}    -         401  401   401     404   200 401
DELETE  /sessions/{key}/context-items/{name}    -         401  401   401     404   204 401
GET     /sessions/{key}/findings                -         401  401   401     404   200 401
POST    /sessions/{key}/findings                -         401  401   401     404   201 401
GET     /sessions/{key}/findings/check          -         401  401   401     200   200 401
POST    /sessions/{key}/findings/check          -         401  401   401     200   200 401
GET     /sessions/{key}/subtasks                -         401  401   401     404   200 401
POST    /sessions/{key}/subtasks                -         401  401   401     404   201 401
PATCH   /sessions/{key}/subtasks/{subtask_id}   -         401  401   401     404   200 401
DELETE  /sessions/{key}/subtasks/{subtask_id}   -         401  401   401     404   204 401
POST    /memories                               -         401  401   401     201   201 401
POST    /memories                               session   401  401   401     404   201 401
GET     /memories                               -         401  401   401     200   200 401
GET     /memories/{memory_id}                   -         401  401   401     404   200 401
PATCH   /memories/{memory_id}                   -         401  401   401     404   200 401
DELETE  /memories/{memory_id}                   -         401  401   401     404   204 401
POST    /memories/{memory_id}/restore           -         401  401   401     404   200 401
GET     /memories/{memory_id}/history           -         401  401   401     404   200 401
GET     /tools                                  -         401  401   401     200   200 401
POST    /tools/call                             forget    401  401   401     200   200 401
POST    /tools/call                             recall    401  401   401     200   200 401
POST    /tools/call                             remember  401  401   401     404   200 401
GET     /search                                 -         401  401   401     200   200 401
GET     /sessions/{key}/export                  -         401  401   401     404   200 401
GET     /agent/export                           -         401  401   401     200   200 401
POST    /import                                 -         401  401   401     201   201 401
"""
API_COLUMNS = {
    "anon": (ANON,),
    "wrong": (WRONG_KEY,),
    "revoked": (REVOKED_KEY,),
    "other": (OTHER_KEY,),
    "own": (OWN_KEY,),
    "login": LOGINS,
}

# What each row sends, besides its path (ids are filled in from coder's objects).
API_QUERY = {
    "GET /sessions/{key}/history": "?max_messages=2",
    "GET /sessions/{key}/findings/check": "?tool=grep&query=config",
    "GET /memories": "?query=config",
    "GET /search": "?q=config",
}
API_BODY: dict[str, object] = {
    "PATCH /agent": {"max_messages": 50},
    "PUT /sessions/{key}": {"goal": "a new goal"},
    "POST /sessions/{key}/turns": turn(("user", "and now?"), ("assistant", "Now the tests.")),
    "PUT /sessions/{key}/context-items/{name}": {"value": "a new value"},
    "POST /sessions/{key}/findings": {"tool": "grep", "query": "TODO", "fact": "no TODOs"},
    "POST /sessions/{key}/findings/check": {"tool": "grep", "query": "config"},
    "POST /sessions/{key}/subtasks": {"title": "write the tests"},
    "PATCH /sessions/{key}/subtasks/{subtask_id}": {"status": "done"},
    "POST /memories": {"content": "The tests run with pytest."},
    # Learned in a session: coder's session key, which another agent's key does not have.
    "POST /memories session": {"content": "The tests run with pytest.", "session": SESSION},
    "PATCH /memories/{memory_id}": {"confidence": 0.5},
    # forget: the memory id is coder's (filled in by api_request).
    "POST /tools/call forget": {"name": "forget", "arguments": {"memory_id": None}},
    # recall: words of coder's memory, not the canary (the answer may echo the query).
    "POST /tools/call recall": {"name": "recall", "arguments": {"query": "settings config"}},
    # Into the key's own agent: another agent's key imports into its own, never coder's.
    "POST /import": COMPLETE_DOCUMENT,
    "POST /tools/call remember": {
        "name": "remember",
        "arguments": {"content": "The tests run with pytest."},
        "session": SESSION,
    },
}


# --- the dashboard table -------------------------------------------------------------------------
# Rows by URL name (memoryapp/dashboard/urls.py). "key" is each API key (wrong, revoked,
# another agent's, coder's own) sent as a bearer header: a key is not a dashboard login.
# 302 is the view's own redirect after a write (never to the login page). Variants: the
# kind of item, or the action posted. Excluded, public by design: the login page (outside this
# urlconf, like the rest of /accounts/ and Django's /admin/, which are Django's own views)
# and /static/ (served by whitenoise's middleware, not a URL of the project).

DASHBOARD_MATRIX = """
method url-name          variant         anon  key   none viewer editor staff dstaff super
GET    agents            -               login login 200  200    200    200   200    200
GET    cleanup           -               login login 403  403    403    403   200    200
GET    cleanup_start     -               login login 403  403    403    403   200    200
POST   cleanup_start     dry_run         login login 403  403    403    403   302    302
GET    cleanup_progress  -               login login 403  403    403    403   200    200
POST   cleanup_extend    -               login login 403  403    403    403   302    302
GET    agent             -               login login 404  200    200    200   404    200
GET    session           -               login login 404  200    200    200   404    200
GET    older             -               login login 404  200    200    200   404    200
GET    live              -               login login 404  200    200    200   404    200
GET    search            -               login login 404  200    200    200   404    200
GET    agent_settings    -               login login 404  403    403    200   404    200
POST   agent_settings    -               login login 404  403    403    302   404    302
POST   create_key        -               login login 404  403    403    200   404    200
POST   revoke_key        -               login login 404  403    403    302   404    302
POST   retention_preview -               login login 404  403    403    200   404    200
GET    moving            -               login login 404  403    403    200   404    200
POST   moving            preview         login login 404  403    403    200   404    200
GET    moving_export     -               login login 404  200    200    200   404    200
GET    memories          -               login login 404  200    200    200   404    200
GET    add_memory        -               login login 404  403    200    200   404    200
POST   add_memory        -               login login 404  403    302    302   404    302
POST   memories_bulk     archive         login login 404  403    302    302   404    302
POST   memories_bulk     delete          login login 404  403    302    302   404    302
POST   memory_status     archive         login login 404  403    302    302   404    302
POST   memory_status     restore         login login 404  403    302    302   404    302
GET    add_item          finding         login login 404  403    200    200   404    200
POST   add_item          finding         login login 404  403    302    302   404    302
POST   add_item          context_item    login login 404  403    302    302   404    302
POST   add_item          memory          login login 404  403    302    302   404    302
GET    item_edit         memory          login login 404  403    200    200   404    200
GET    item_edit         memory:display  login login 404  302    302    302   404    302
POST   item_edit         memory          login login 404  403    302    302   404    302
POST   item_edit         finding         login login 404  403    302    302   404    302
POST   item_edit         context_item    login login 404  403    302    302   404    302
GET    item_history      memory          login login 404  200    200    200   404    200
GET    item_history      finding         login login 404  200    200    200   404    200
GET    item_history      context_item    login login 404  200    200    200   404    200
POST   item_revert       memory          login login 404  403    302    302   404    302
POST   item_revert       finding         login login 404  403    302    302   404    302
POST   item_revert       context_item    login login 404  403    302    302   404    302
"""
DASHBOARD_COLUMNS = {
    "anon": (ANON,),
    "key": KEYS,
    "none": (NO_ROLE,),
    "viewer": (VIEWER,),
    "editor": (EDITOR,),
    "staff": (STAFF,),
    "dstaff": (DJANGO_STAFF,),
    "super": (SUPERUSER,),
}

SETTINGS_FORM = {
    "ttl_seconds_amount": "2",
    "ttl_seconds_unit": "hours",
    "max_messages": "50",
    "token_budget": "16000",
    "encoding": "cl100k_base",
}
MEMORY_FORM = {"content": "The tests run with pytest.", "memory_type": "fact", "confidence": "0.7"}


# --- reading the tables ------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    method: str
    path: str  # an API path template, or a dashboard URL name
    variant: str  # "-" when the operation has one row
    expected: tuple[tuple[str, int | str], ...]  # (principal, status or LOGIN)

    @property
    def label(self) -> str:
        variant = "" if self.variant == "-" else f" {self.variant}"
        return f"{self.method} {self.path}{variant}"

    def expect(self, principal: str) -> int | str:
        return dict(self.expected)[principal]


def _parse(table: str, columns: dict[str, tuple[str, ...]]) -> list[Row]:
    lines = [line.split() for line in table.strip().splitlines()]
    header, body = lines[0], lines[1:]
    names = header[-len(columns) :]
    assert names == list(columns), f"the table's columns are {names}"
    rows = []
    for method, path, variant, *cells in body:
        assert len(cells) == len(columns), f"{method} {path}: {len(cells)} cells"
        expected = tuple(
            (principal, cell if cell == LOGIN else int(cell))
            for column, cell in zip(columns, cells, strict=True)
            for principal in columns[column]
        )
        rows.append(Row(method, path, variant, expected))
    labels = [row.label for row in rows]
    assert len(set(labels)) == len(labels), "a row twice: give one a variant"
    return rows


API_ROWS = _parse(API_MATRIX, API_COLUMNS)
DASHBOARD_ROWS = _parse(DASHBOARD_MATRIX, DASHBOARD_COLUMNS)


def _cells(rows: list[Row]) -> list:
    return [
        pytest.param(row, principal, id=f"{row.label} as {principal}")
        for row in rows
        for principal in PRINCIPALS
    ]


# --- coder's objects, and the other agent's ------------------------------------------------------


@dataclass
class Objects:
    """One agent's objects that URLs name, made through the API as an agent makes them."""

    session: Session
    memory: Memory  # active
    archived_memory: Memory
    finding: Finding
    context_item: ContextItem
    subtask_id: int
    spare_key: ApiKey  # a key to revoke, not the one the tests send

    def item(self, kind: str) -> Memory | Finding | ContextItem:
        items = {"memory": self.memory, "finding": self.finding, "context_item": self.context_item}
        return items[kind]

    def added(self, kind: str) -> MemoryEvent:
        """The event that added the item of `kind`: reverting it is a real change."""
        item = self.item(kind)
        return MemoryEvent.objects.get(target_kind=kind, target_id=item.pk, action="add")


def _ok(response, status: int) -> dict:
    assert response.status_code == status, response.content
    return response.json() if response.content else {}


def _make_objects(api: ApiClient, key: str, mark: str) -> Objects:
    """A session `key` with two turns, a working-context item, a finding, a memory (and
    an archived one), a subtask and a spare key; each text holds `mark`."""
    base = f"/api/v1/sessions/{key}"
    _ok(api.put(base, {"goal": f"port the parser ({mark})"}), 201)
    _ok(
        api.post(
            f"{base}/turns",
            turn(("user", f"Where is the {mark} config?"), ("assistant", "In settings.py.")),
        ),
        201,
    )
    _ok(
        api.post(f"{base}/turns", turn(("user", "And the tests?"), ("assistant", "In tests/."))),
        201,
    )
    _ok(api.put(f"{base}/context-items/{ITEM}", {"value": f"find the {mark} config"}), 200)
    finding = _ok(
        api.post(
            f"{base}/findings",
            {"tool": "grep", "query": "config", "fact": f"{mark} is set in settings.py"},
        ),
        201,
    )
    memory = _ok(
        api.post(
            "/api/v1/memories",
            {"content": f"The {mark} config is in settings.py", "session": key},
        ),
        201,
    )
    archived = _ok(api.post("/api/v1/memories", {"content": f"{mark} was in setup.cfg"}), 201)
    _ok(api.delete(f"/api/v1/memories/{archived['memory']['id']}"), 204)
    subtask = _ok(api.post(f"{base}/subtasks", {"title": f"move the {mark} config"}), 201)
    agent = ApiKey.objects.get(key_hash=hash_api_key(api.key)).agent
    session = Session.objects.select_related("agent").get(agent=agent, key=key)
    return Objects(
        session=session,
        memory=Memory.objects.get(pk=memory["memory"]["id"]),
        archived_memory=Memory.objects.get(pk=archived["memory"]["id"]),
        finding=Finding.objects.get(pk=finding["finding"]["id"]),
        context_item=ContextItem.objects.get(session=session, key=ITEM),
        subtask_id=subtask["id"],
        spare_key=ApiKey.issue(session.agent, name="spare")[0],
    )


@dataclass
class World:
    agent: Agent  # coder
    own: ApiClient  # coder's key
    revoked_key: str  # another key of coder's, revoked
    other: ApiClient  # the other agent's key
    mine: Objects  # coder's
    theirs: Objects  # the other agent's
    cleanup_run: CleanupRun  # runs are not any agent's: the cleanup page is global


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[World]:
    """Both agents and their objects, built once for the module (some 800 cells) inside a
    transaction rolled back at its end. Each test runs in a savepoint of it (pytest-django's
    `db`, rolled back after the test), so no cell sees another cell's writes. The agents
    are made as conftest's `api` and `other_api` make them; those fixtures are per test."""
    with django_db_blocker.unblock(), transaction.atomic():
        coder, other = Agent.objects.create(name="coder"), Agent.objects.create(name="other")
        own = ApiClient(Client(), ApiKey.issue(coder, name="test")[1])
        others = ApiClient(Client(), ApiKey.issue(other)[1])
        revoked, revoked_key = ApiKey.issue(coder, name="revoked")
        revoked.revoke()
        run = CleanupRun.objects.create(dry_run=True, status=CleanupRun.Status.DONE)
        yield World(
            agent=coder,
            own=own,
            revoked_key=revoked_key,
            other=others,
            mine=_make_objects(own, SESSION, CANARY),
            theirs=_make_objects(others, THEIR_SESSION, THEIR_MARK),
            cleanup_run=run,
        )
        transaction.set_rollback(True)


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    """Each cell logs in a new user; these tests are about roles, not password hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- who is asking -------------------------------------------------------------------------------


@dataclass
class Caller:
    client: Client
    headers: dict[str, str]


@functools.cache
def _handler() -> ClientHandler:
    return ClientHandler(enforce_csrf_checks=False)


def _served(client: Client) -> Client:
    """The client, sending through the module's one request handler. Django's test client
    loads the middleware for each new client, and whitenoise's then indexes the static
    files (a tenth of a second, some 800 times); a server loads it once."""
    client.handler = _handler()
    return client


def caller(principal: str, world: World) -> Caller:
    """A client for `principal`; people get a new user, logged in, with the role named."""
    bearer = {
        WRONG_KEY: "mk_" + secrets.token_urlsafe(32),  # well-formed, but no such key
        REVOKED_KEY: world.revoked_key,
        OTHER_KEY: world.other.key,
        OWN_KEY: world.own.key,
    }
    if principal == ANON:
        return Caller(_served(Client()), {})
    if principal in bearer:
        return Caller(_served(Client()), {"Authorization": f"Bearer {bearer[principal]}"})
    if principal == SUPERUSER:
        client = Client()
        client.force_login(get_user_model().objects.create_superuser("root", password="pw-root"))
        return Caller(_served(client), {})
    role = {NO_ROLE: None, VIEWER: "viewer", EDITOR: "editor", STAFF: "staff", DJANGO_STAFF: None}
    client = logged_in_member(
        role[principal], world.agent, principal, staff=principal == DJANGO_STAFF
    )
    return Caller(_served(client), {})


def outcome(response) -> int | str:
    """The status, with a redirect to the login page told apart from a view's redirect."""
    if response.status_code == 302 and response["Location"].startswith(settings.LOGIN_URL):
        return LOGIN
    return response.status_code


# --- what a request may change -------------------------------------------------------------------

# Every model a request could write, with the lookup of its rows' agent id.
TRACKED: dict[type, str | None] = {
    Agent: "pk",
    ApiKey: "agent_id",
    Session: "agent_id",
    Turn: "session__agent_id",
    Message: "session__agent_id",
    ToolCall: "session__agent_id",
    PendingToolOutput: "tool_call__session__agent_id",
    IdempotencyRecord: "session__agent_id",
    ExtractionJob: "session__agent_id",
    ContextItem: "session__agent_id",
    Finding: "session__agent_id",
    Memory: "agent_id",
    MemoryEvent: "agent_id",
    Subtask: "session__agent_id",
    Subtask.dependencies.through: "from_subtask__session__agent_id",
    Membership: "agent_id",
    MemoryRecord: "agent_id",
    RecordTag: "record__agent_id",
    CleanupRun: None,  # not any agent's
}
# Written on every request a key authenticates (at most once a minute), by design.
VOLATILE = {"last_used_at"}


def _columns(model: type) -> list:
    return [f for f in model._meta.concrete_fields if f.attname not in VOLATILE]


def everything() -> dict[str, list[tuple]]:
    """Every row of every tracked table. Plain SQL: this runs before and after hundreds of
    cells, and the ORM's query building would be most of the module's time."""
    quote = connection.ops.quote_name
    tables = {}
    with connection.cursor() as cursor:
        for model in TRACKED:
            columns = ", ".join(quote(f.column) for f in _columns(model))
            cursor.execute(f"SELECT {columns} FROM {quote(model._meta.db_table)} ORDER BY 1")
            tables[model._meta.db_table] = cursor.fetchall()
    return tables


def coders(agent: Agent) -> dict[str, list[tuple]]:
    """The rows of the tracked tables that are coder's."""
    tables = {}
    with connection.cursor() as cursor:
        for model, path in TRACKED.items():
            if path is not None:
                cursor.execute(*_owned_query(model, path, agent.pk))
                tables[model._meta.db_table] = cursor.fetchall()
    return tables


@functools.cache
def _owned_query(model: type, path: str, agent_id: int) -> tuple[str, tuple]:
    """The SQL of one agent's rows of `model`, built by the ORM once."""
    owned = model.objects.filter(**{path: agent_id}).order_by("pk")
    return owned.values_list(*(f.attname for f in _columns(model))).query.sql_with_params()


def run_cell(row: Row, principal: str, world: World, send: Callable[[], HttpResponse]) -> None:
    """Send the cell's request and check its status and the three rules (module docstring).
    Rows are compared only where a rule needs them: a snapshot costs some 16 queries."""
    expected = row.expect(principal)
    before = everything() if expected in REFUSED else None
    coder_before = coders(world.agent) if principal == OTHER_KEY else None
    response = send()
    got = outcome(response)
    content = b"".join(response.streaming_content) if response.streaming else response.content
    body = content.decode(errors="replace")
    assert got == expected, (
        f"{row.label} as {principal}: expected {expected}, got {got}\n{body[:500]}"
    )
    if before is not None:
        assert everything() == before, f"{row.label} as {principal} was refused but changed data"
    if coder_before is not None:
        assert coders(world.agent) == coder_before, "another agent's key changed coder's data"
    if principal in OUTSIDERS:
        assert CANARY not in body, f"{row.label} as {principal} shows coder's data"
        assert f"/agents/{world.agent.name}/" not in body, f"{principal} sees a link to coder"


# --- API -----------------------------------------------------------------------------------------


def api_request(row: Row, objects: Objects) -> tuple[str, str | None]:
    """The URL and JSON body of `row`, naming `objects`."""
    memory = objects.archived_memory if row.path.endswith("/restore") else objects.memory
    ids = {
        "key": objects.session.key,
        "name": ITEM,
        "memory_id": memory.pk,
        "subtask_id": objects.subtask_id,
    }
    label = row.label
    url = "/api/v1" + row.path.format(**ids) + API_QUERY.get(label, "")
    body = API_BODY.get(label)
    if label == "POST /tools/call forget":
        body = {"name": "forget", "arguments": {"memory_id": objects.memory.pk}}
    return url, None if body is None else json.dumps(body)


def send_api(who: Caller, method: str, url: str, body: str | None):
    if method == "GET":
        return who.client.get(url, headers=who.headers)
    send = getattr(who.client, method.lower())
    return send(url, body or "", content_type="application/json", headers=who.headers)


@pytest.mark.parametrize(("row", "principal"), _cells(API_ROWS))
def test_api(world: World, row: Row, principal: str):
    who = caller(principal, world)
    url, body = api_request(row, world.mine)
    run_cell(row, principal, world, lambda: send_api(who, row.method, url, body))


def test_every_api_operation_has_a_row():
    schema = agent_api.get_openapi_schema()
    operations, public = set(), set()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in {"get", "put", "post", "patch", "delete"}:
                where = operations if operation.get("security") else public
                where.add((method.upper(), path.removeprefix("/api/v1")))
    assert public == {("GET", "/health")}, "an operation without a key is public: say why"
    assert len(operations) >= 30
    assert {(row.method, row.path) for row in API_ROWS} == operations


def test_public_api_urls_are_only_the_documented_ones(world: World):
    """The API's URLs that are not operations (the docs page, openapi.json, django-ninja's
    root) and GET /health: public by design, they answer without a key and hold nothing
    of any agent."""
    schema_paths = set(agent_api.get_openapi_schema()["paths"])
    routes = {
        "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(p.pattern)) for p in agent_api.urls[0]
    }
    assert routes - schema_paths == {"/api/v1/openapi.json", "/api/v1/docs", "/api/v1/"}
    anonymous = Client()
    for url in ("/api/v1/health", "/api/v1/openapi.json", "/api/v1/docs"):
        response = anonymous.get(url)
        assert response.status_code == 200, url
        assert CANARY not in response.content.decode() and SESSION not in response.content.decode()
    assert anonymous.get("/api/v1/").status_code == 404


# --- dashboard -----------------------------------------------------------------------------------


@functools.cache
def _dashboard_patterns() -> dict[str, URLPattern]:
    """The dashboard's URLs, as the project's resolver mounts them."""
    (dashboard,) = [
        p for p in get_resolver().url_patterns if getattr(p, "namespace", None) == "dashboard"
    ]
    patterns = {}
    for pattern in dashboard.url_patterns:
        assert not isinstance(pattern, URLResolver), "a nested include: walk it here too"
        patterns[pattern.name] = pattern
    return patterns


# Form data for the dashboard's writes; each is valid, so the cells that may write do.
DASHBOARD_FORMS: dict[tuple[str, str], Callable[[Objects], dict]] = {
    ("cleanup_start", "dry_run"): lambda o: {"dry_run": "1"},
    ("cleanup_extend", "-"): lambda o: {"session": o.session.pk, "seconds": "3600"},
    ("agent_settings", "-"): lambda o: SETTINGS_FORM,
    ("create_key", "-"): lambda o: {"name": "from the dashboard"},
    ("revoke_key", "-"): lambda o: {},
    ("retention_preview", "-"): lambda o: {"ttl_seconds_amount": "1", "ttl_seconds_unit": "days"},
    ("moving", "preview"): lambda o: {
        "system": "letta",
        "action": "preview",
        "files": SimpleUploadedFile("loop.af", LETTA_FILE.read_bytes()),
    },
    ("add_memory", "-"): lambda o: MEMORY_FORM,
    ("memories_bulk", "archive"): lambda o: {
        "action": "archive",
        "ids": [o.memory.pk],
        "confirm": "1",
    },
    ("memories_bulk", "delete"): lambda o: {
        "action": "delete",
        "ids": [o.memory.pk, o.archived_memory.pk],
        "confirm": "1",
    },
    ("memory_status", "archive"): lambda o: {},
    ("memory_status", "restore"): lambda o: {},
    ("add_item", "finding"): lambda o: {"tool": "grep", "query": "TODO", "fact": "no TODOs"},
    ("add_item", "context_item"): lambda o: {
        "key": "framework",
        "value": "django",
        "confidence": "1",
    },
    ("add_item", "memory"): lambda o: MEMORY_FORM,
    ("item_edit", "memory"): lambda o: {**MEMORY_FORM, "content": "Config is in pyproject."},
    ("item_edit", "finding"): lambda o: {"query": "config", "fact": "it moved", "success": "on"},
    ("item_edit", "context_item"): lambda o: {"value": "write the tests", "confidence": "0.9"},
    ("item_revert", "memory"): lambda o: {},
    ("item_revert", "finding"): lambda o: {},
    ("item_revert", "context_item"): lambda o: {},
}
DASHBOARD_QUERY = {("older", "-"): "?before=3", ("item_edit", "memory:display"): "?display=1"}


def dashboard_request(row: Row, agent_name: str, objects: Objects, run: CleanupRun):
    """The URL and form data of `row`: agent `agent_name`, the objects of `objects`."""
    pattern = _dashboard_patterns()[row.path]
    kind = row.variant.split(":")[0]
    values = {
        "name": agent_name,
        "key": objects.session.key,
        "run_id": run.pk,
        "key_id": objects.spare_key.pk,
        "kind": kind,
        "action": row.variant,
        "system": "mem0",
    }
    if row.path == "memory_status":
        memory = objects.archived_memory if row.variant == "restore" else objects.memory
        values["pk"] = memory.pk
    elif "pk" in pattern.pattern.converters:
        values["pk"] = objects.item(kind).pk
    if "event_id" in pattern.pattern.converters:
        values["event_id"] = objects.added(kind).pk
    kwargs = {name: values[name] for name in pattern.pattern.converters}
    url = reverse(f"dashboard:{row.path}", kwargs=kwargs)
    url += DASHBOARD_QUERY.get((row.path, row.variant), "")
    form = DASHBOARD_FORMS.get((row.path, row.variant))
    return url, form(objects) if form else None


def send_dashboard(who: Caller, method: str, url: str, form: dict | None):
    if method == "GET":
        return who.client.get(url, headers=who.headers)
    assert method == "POST" and form is not None, f"{method} {url}: no form data in the test"
    return who.client.post(url, form, headers=who.headers)


@pytest.mark.parametrize(("row", "principal"), _cells(DASHBOARD_ROWS))
def test_dashboard(world: World, row: Row, principal: str):
    who = caller(principal, world)
    url, form = dashboard_request(row, world.agent.name, world.mine, world.cleanup_run)
    run_cell(row, principal, world, lambda: send_dashboard(who, row.method, url, form))


def test_every_dashboard_url_has_a_row():
    patterns = _dashboard_patterns()
    assert len(patterns) >= 20
    assert {row.path for row in DASHBOARD_ROWS} == set(patterns)


def test_what_the_cells_send_is_for_rows_that_exist():
    """A request spec whose row was renamed would silently send nothing."""
    api_labels = {row.label for row in API_ROWS}
    assert set(API_BODY) | set(API_QUERY) <= api_labels
    dashboard_keys = {(row.path, row.variant) for row in DASHBOARD_ROWS}
    assert set(DASHBOARD_FORMS) | set(DASHBOARD_QUERY) <= dashboard_keys


@pytest.mark.parametrize("name", sorted({row.path for row in DASHBOARD_ROWS}))
def test_dashboard_methods_are_the_tables(world: World, name: str):
    """Each URL's allowed methods, from its view's 405 answer (Allow), are those the table
    has rows for: a view that starts taking POST needs rows for POST."""
    rows = [row for row in DASHBOARD_ROWS if row.path == name]
    who = caller(SUPERUSER, world)
    url, _ = dashboard_request(rows[0], world.agent.name, world.mine, world.cleanup_run)
    response = who.client.delete(url)  # no dashboard view takes DELETE
    assert response.status_code == 405, f"{name} does not say which methods it takes"
    allowed = {method.strip() for method in response["Allow"].split(",")}
    assert allowed == {row.method for row in rows}


def test_the_project_mounts_only_what_the_matrix_covers():
    """A new top-level mount (an export view, another API version) needs its own rows."""
    mounted = [str(p.pattern) for p in get_resolver().url_patterns]
    assert mounted == [
        "",
        "accounts/login/",
        "accounts/",
        "admin/",
        "api/v1/",
        "ams/v1/",
        *MCP_MOUNTS,
    ]


# --- MCP over streamable HTTP ------------------------------------------------------------------
# The endpoint authenticates the key (in the URL or a Bearer header) before any MCP message
# is read; its tools then call the agent API with that key, whose cells are above. Here:
# who gets an MCP session at all. "other" gets one for its own agent.

MCP_MOUNTS = ["mcp"]
MCP_MATRIX = """
method  path            variant   anon wrong revoked other own login
POST    mcp             header    401  401   401     200   200 401
POST    mcp             in-url    401  401   401     200   200 401
"""
MCP_ROWS = _parse(MCP_MATRIX, API_COLUMNS)
MCP_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "matrix", "version": "1"},
    },
}


@pytest.mark.parametrize(("row", "principal"), _cells(MCP_ROWS))
def test_mcp(world: World, row: Row, principal: str):
    who = caller(principal, world)
    headers = {**who.headers, "Accept": "application/json, text/event-stream"}
    url = "/mcp"
    if row.variant == "in-url":
        # The key moves from the header into the URL; people and anonymous send none.
        bearer = headers.pop("Authorization", "Bearer ").removeprefix("Bearer ")
        url = f"/mcp/{bearer or 'none'}"
    body = json.dumps(MCP_INITIALIZE)
    run_cell(
        row,
        principal,
        world,
        lambda: who.client.post(url, body, content_type="application/json", headers=headers),
    )


def test_mcp_rows_are_the_mounts():
    assert {row.path for row in MCP_ROWS} == set(MCP_MOUNTS)


# --- the other agent's objects behind coder's name -----------------------------------------------
# coder's staff and a superuser, on coder's URLs naming the other agent's session, key,
# memory, finding, working-context item or history event: a 404, never someone else's row.

FOREIGN_ROWS = [
    row
    for row in DASHBOARD_ROWS
    if set(_dashboard_patterns()[row.path].pattern.converters) & {"key", "key_id", "pk"}
]


@pytest.mark.parametrize(
    ("row", "principal"),
    [
        pytest.param(row, principal, id=f"{row.label} as {principal}")
        for row in FOREIGN_ROWS
        for principal in (STAFF, SUPERUSER)
    ],
)
def test_dashboard_objects_of_another_agent_are_404(world: World, row: Row, principal: str):
    who = caller(principal, world)
    url, form = dashboard_request(row, world.agent.name, world.theirs, world.cleanup_run)
    before = everything()
    response = send_dashboard(who, row.method, url, form)
    assert response.status_code == 404, f"{url}: {response.status_code}"
    assert everything() == before


# --- the Redis Agent Memory Server API ---------------------------------------------------------
# Its client sends no headers: the key is the path segment after /ams/ (anonymous and people
# send a segment that is no key). Paths under /ams/<key>/v1; memory ids are memoryapp's
# (`memoryapp-memory-<pk>`). Another agent's key acts on its own agent: a PUT of coder's
# session id makes its own, a delete of coder's ids deletes nothing.

AMS_MATRIX = """
method  path                                variant   anon wrong revoked other own login
GET     /health                             -         401  401   401     200   200 401
GET     /working-memory/                    -         401  401   401     200   200 401
GET     /working-memory/{session_id}        -         401  401   401     404   200 401
PUT     /working-memory/{session_id}        -         401  401   401     200   200 401
DELETE  /working-memory/{session_id}        -         401  401   401     200   200 401
POST    /long-term-memory/                  -         401  401   401     200   200 401
POST    /long-term-memory/search            -         401  401   401     200   200 401
POST    /long-term-memory/forget            -         401  401   401     200   200 401
GET     /long-term-memory/{memory_id}       -         401  401   401     404   200 401
PATCH   /long-term-memory/{memory_id}       -         401  401   401     404   200 401
DELETE  /long-term-memory                   -         401  401   401     200   200 401
POST    /memory/prompt                      -         401  401   401     200   200 401
"""
AMS_ROWS = _parse(AMS_MATRIX, API_COLUMNS)
AMS_QUERY = {"DELETE /long-term-memory": "?memory_ids={memory_id}"}
AMS_BODY: dict[str, object] = {
    "PUT /working-memory/{session_id}": {
        "messages": [{"id": "m1", "role": "user", "content": "and now?"}],
        "data": {"step": 2},
    },
    "POST /long-term-memory/": {"memories": [{"id": "r1", "text": "The tests use pytest."}]},
    "POST /long-term-memory/search": {"text": "config"},
    "POST /long-term-memory/forget": {"policy": {"max_age_days": 3650}},
    "PATCH /long-term-memory/{memory_id}": {"topics": ["config"]},
    "POST /memory/prompt": {
        "query": "where is the config?",
        "session": {"session_id": SESSION},
        "long_term_search": {"text": "config"},
    },
}


@pytest.mark.parametrize(("row", "principal"), _cells(AMS_ROWS))
def test_ams(world: World, row: Row, principal: str):
    who = caller(principal, world)
    headers = dict(who.headers)
    key = headers.pop("Authorization", "Bearer ").removeprefix("Bearer ") or "none"
    ids = {
        "session_id": world.mine.session.key,
        "memory_id": f"memoryapp-memory-{world.mine.memory.pk}",
    }
    url = f"/ams/{key}/v1" + (row.path + AMS_QUERY.get(row.label, "")).format(**ids)
    body = AMS_BODY.get(row.label)
    sent = Caller(who.client, headers)
    run_cell(
        row,
        principal,
        world,
        lambda: send_api(sent, row.method, url, None if body is None else json.dumps(body)),
    )


def test_every_ams_operation_has_a_row():
    operations = {
        (method, path)
        for path, view in ams_router.path_operations.items()
        for operation in view.operations
        for method in operation.methods
    }
    assert {(row.method, row.path) for row in AMS_ROWS} == operations
