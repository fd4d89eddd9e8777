"""Moving in from Redis Agent Memory Server and out to it (memoryapp/ams/moving.py).

The server is the real one (0.14.0, tests/fixtures/ams_peer/SOURCE.txt): its answers to
the importer's own requests were recorded (record_import.py: `import_replay.json`) and
are replayed here by a small HTTP server, so the importer talks HTTP as it does to a
running server. After the import, the server's own client, `agent-memory-client`, reads
the same sessions and memories from memoryapp's `/ams/` as it read from the server."""

from __future__ import annotations

import json
import threading
import urllib.parse
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from memoryapp.ams import moving
from memoryapp.ams.models import MemoryRecord
from memoryapp.core.models import ContextItem, Memory, Message, Origin, Session
from memoryapp.core.moving import Source, SourceError, move_in
from tests.test_ams import Ams

FIXTURES = Path(__file__).parent / "fixtures" / "ams_peer"
CALLS = json.loads((FIXTURES / "import_replay.json").read_text())
live = pytest.mark.django_db(transaction=True)
pytestmark = pytest.mark.filterwarnings("ignore:get_working_memory is deprecated")


def _key(method: str, path: str, query: dict, body) -> str:
    query = {k: str(v) for k, v in sorted(query.items()) if v is not None}
    return json.dumps([method, path, query, body], sort_keys=True)


ANSWERS = {_key(c["method"], c["path"], c["query"], c["body"]): c["answer"] for c in CALLS}


class Replay(BaseHTTPRequestHandler):
    def _answer(self, body) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        answer = ANSWERS.get(_key(self.command, urllib.parse.unquote(url.path), query, body))
        data = json.dumps(answer if answer is not None else {"detail": "not found"}).encode()
        self.send_response(200 if answer is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(None)

    def do_POST(self) -> None:  # noqa: N802
        self._answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def peer():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _source_sessions() -> dict[str, dict]:
    return {
        c["answer"]["session_id"]: c["answer"]
        for c in CALLS
        if c["path"].startswith("/v1/working-memory/") and c["path"] != "/v1/working-memory/"
    }


def _source_records() -> dict[str, dict]:
    search = next(c for c in CALLS if c["path"] == "/v1/long-term-memory/search")
    return {r["id"]: r for r in search["answer"]["memories"]}


def _moment(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _same_record(ours: dict, theirs: dict) -> None:
    for name in ("id", "text", "namespace", "user_id", "session_id", "memory_type"):
        assert ours[name] == theirs[name], name
    assert sorted(ours["topics"] or []) == sorted(theirs["topics"] or [])
    assert sorted(ours["entities"] or []) == sorted(theirs["entities"] or [])
    assert (ours["extracted_from"] or []) == (theirs["extracted_from"] or [])
    assert _moment(ours["event_date"]) == _moment(theirs["event_date"])
    assert _moment(ours["created_at"]) == _moment(theirs["created_at"])


def _same_working_memory(ours: dict, theirs: dict) -> None:
    for name in ("session_id", "namespace", "user_id", "data", "context", "ttl_seconds"):
        assert ours[name] == theirs[name], name
    assert [(m["id"], m["role"], m["content"]) for m in ours["messages"]] == [
        (m["id"], m["role"], m["content"]) for m in theirs["messages"]
    ]
    assert [_moment(m["created_at"]) for m in ours["messages"]] == [
        _moment(m["created_at"]) for m in theirs["messages"]
    ]
    assert sorted(m["id"] for m in ours["memories"]) == sorted(m["id"] for m in theirs["memories"])


def _import(agent, peer, dry_run=False):
    return move_in(agent, moving.read(Source(url=peer)), dry_run=dry_run, actor="user:staff")


def test_a_dry_run_lists_every_session_and_record_and_writes_nothing(agent, peer):
    report = _import(agent, peer, dry_run=True)
    assert sorted(line.source_id for line in report.lines if line.kind == "session") == sorted(
        _source_sessions()
    )
    assert sorted(line.source_id for line in report.lines if line.kind == "memory") == sorted(
        _source_records()
    )
    assert report.summary == "4 sessions and 8 memories would be created"
    assert not Session.objects.exists() and not Memory.objects.exists()


@live
def test_the_servers_client_reads_back_what_the_server_held(agent, api_key, peer, live_server):
    _import(agent, peer)
    client = Ams(f"{live_server.url}/ams/{api_key}")
    for session_id, theirs in _source_sessions().items():
        ours = client.get_working_memory(
            session_id, namespace=theirs["namespace"], user_id=theirs["user_id"]
        ).model_dump(mode="json")
        _same_working_memory(ours, theirs)
    found = client.search_long_term_memory(text="", limit=100).memories
    ours = {m.id: m.model_dump(mode="json") for m in found}
    assert set(ours) == set(_source_records())
    for record_id, theirs in _source_records().items():
        _same_record(ours[record_id], theirs)
    origin = Origin.objects.get(agent=agent, system="ams", source_id="ltm-003")
    assert origin.memory.content == _source_records()["ltm-003"]["text"]


def test_the_export_is_what_the_server_answered(agent, peer):
    """The round trip compared with the source: the export's working memories and
    records against the server's own answers, field by field."""
    _import(agent, peer)
    document = moving.export(agent)
    exported = {w["session_id"]: w for w in document["working_memory"]}
    assert set(exported) == set(_source_sessions())
    for session_id, theirs in _source_sessions().items():
        _same_working_memory(exported[session_id], theirs)
    records = {r["id"]: r for r in document["long_term_memory"]}
    assert set(records) == set(_source_records())
    for record_id, theirs in _source_records().items():
        _same_record(records[record_id], theirs)
    # And it reads back in: another agent gets the same.
    from memoryapp.core.models import Agent

    other = Agent.objects.create(name="moved")
    plan = moving.read(Source(files=[(json.dumps(document).encode(), "export.json")]))
    move_in(other, plan, dry_run=False, actor="user:staff")
    again = moving.export(other)
    assert {w["session_id"] for w in again["working_memory"]} == set(_source_sessions())
    assert {r["id"] for r in again["long_term_memory"]} == set(_source_records())


def test_importing_again_changes_nothing(agent, peer):
    _import(agent, peer)
    counts = (Message.objects.count(), Memory.objects.count(), ContextItem.objects.count())
    report = _import(agent, peer)
    assert (Message.objects.count(), Memory.objects.count(), ContextItem.objects.count()) == counts
    assert report.count("memory", "skip") == 8 and report.count("memory", "create") == 0
    assert report.count("session", "skip") == 4


def test_a_record_the_agent_wrote_through_ams_is_skipped(agent, peer):
    memory, _ = Memory.remember(agent, "Written here", memory_type="fact", confidence=0.8,
                                actor="agent:x")  # fmt: skip
    MemoryRecord.objects.create(agent=agent, memory=memory, record_id="ltm-001")
    report = _import(agent, peer)
    line = next(line for line in report.lines if line.source_id == "ltm-001")
    assert line.action == "skip" and f"memory #{memory.pk}" in line.why


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda d: d["working_memory"][0]["messages"][1].update(role="robot"), ".messages.1.role"),
        (lambda d: d["long_term_memory"][2].update(text=""), "long_term_memory[2].text"),
        (lambda d: d.update(format="other"), "$"),
        (lambda d: d["working_memory"][1].pop("session_id"), "working_memory[1].session_id"),
    ],
)
def test_a_malformed_document_names_where_it_broke(agent, peer, change, where):
    document = moving.fetch(peer, [], [])
    change(document)
    with pytest.raises(SourceError) as caught:
        moving.read(Source(files=[(json.dumps(document).encode(), "export.json")]))
    assert where in str(caught.value)
    with pytest.raises(SourceError, match="line 1"):
        moving.read(Source(files=[(json.dumps(document).encode()[:300], "export.json")]))


def test_a_server_that_does_not_answer_is_a_clear_error(agent):
    with pytest.raises(SourceError, match="cannot reach the server"):
        moving.read(Source(url="http://127.0.0.1:9"))


def test_ids_memoryapp_gave_come_into_another_agent_as_new_ones(agent, api, peer):
    """An export of an agent whose memory came through /api/v1 names memoryapp's own rows
    (`memoryapp-memory-3`): imported into another agent they must not name that agent's."""
    from memoryapp.core.models import Agent

    api.post("/api/v1/sessions/plain/turns", {"messages": [{"role": "user", "content": "hi"}]})
    mine, _ = Memory.remember(agent, "The door code is 1234", memory_type="fact",
                              confidence=0.8, actor="agent:x")  # fmt: skip
    document = moving.export(agent)
    other = Agent.objects.create(name="other")
    plan = moving.read(Source(files=[(json.dumps(document).encode(), "export.json")]))
    report = move_in(other, plan, dry_run=False, actor="user:staff")
    assert report.count("session", "create") == 1 and report.count("memory", "create") == 1
    record = MemoryRecord.objects.get(agent=other)
    assert record.record_id == f"imported-memory-{mine.pk}"
    assert record.memory.content == "The door code is 1234"
    session = Session.objects.get(agent=other, key="plain")
    assert Message.objects.get(session=session).client_id == "imported-message-1"
    assert Memory.objects.get(pk=mine.pk).content == "The door code is 1234"  # untouched


def test_a_session_here_is_left_as_it_is(agent, peer):
    _import(agent, peer)
    s1 = Session.objects.get(agent=agent, key="s1")
    listed = set(MemoryRecord.objects.filter(working_memory=s1).values_list("record_id"))
    assert listed
    _import(agent, peer)
    assert set(MemoryRecord.objects.filter(working_memory=s1).values_list("record_id")) == listed
    assert not Message.objects.filter(session=s1, removed_at__isnull=False).exists()


def test_what_the_api_refuses_is_a_line_and_the_rest_comes_in(agent, peer):
    document = moving.fetch(peer, [], [])
    big = document["working_memory"][0]
    big["messages"] = [{"id": f"m{i}", "role": "user", "content": "x"} for i in range(1001)]
    plan = moving.read(Source(files=[(json.dumps(document).encode(), "export.json")]))
    report = move_in(agent, plan, dry_run=False, actor="user:staff")
    refused = next(line for line in report.lines if line.source_id == big["session_id"])
    assert refused.action == "skip" and refused.why.startswith("refused: ")
    assert not Session.objects.filter(agent=agent, key=big["session_id"]).exists()
    assert Session.objects.filter(agent=agent).count() == len(document["working_memory"]) - 1


def test_an_address_with_a_query_or_fragment_is_refused(agent):
    for address in ("http://127.0.0.1:9/x#", "http://127.0.0.1:9/?a=b", "file:///etc/passwd"):
        with pytest.raises(SourceError, match="a server's address is"):
            moving.fetch(address, [], [])
