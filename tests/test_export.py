"""Export and import (memoryapp/core/export.py, memoryapp/api/export.py, `manage.py
export_session`, `manage.py import_transcript` on an export, agents/importers/export.py).

The round trip is the contract: a session with everything a session holds (turns with
reported and counted usage, models and times, tool calls extracted into findings and
inferred working context, a finding and an item a person corrected, a stale read,
subtasks with a dependency, memories strengthened, replaced, archived and restored, one
with its own expiry, a failed extraction job) is exported, imported into another agent
(over the API, in process), into a separate server (a gunicorn process on its own SQLite
database, reached over HTTP by `python -m agents.importers.export`), and through the
management commands; exporting the copy gives the same document but for the ids the
database assigns (mapped by order), the agent's name and the export's time. A whole agent
round-trips the same way. Imported turns are not extracted again; a turn exported before
its extraction ran is extracted after the import, to what the source extracts. Bad
documents are refused whole (a 4xx naming the field) and change nothing.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pydantic import BaseModel

from agents.importers import EXPORT, ExportFile, detect_format, load_transcript, scan_path
from memoryapp.ams.models import MemoryRecord, RecordTag
from memoryapp.api import export as export_api
from memoryapp.api import schemas
from memoryapp.core import dispatch, export, workers
from memoryapp.core.models import (
    Agent,
    ApiKey,
    ContextItem,
    ExtractionJob,
    Finding,
    Memory,
    MemoryEvent,
    Message,
    Origin,
    PendingToolOutput,
    Session,
    Subtask,
    ToolCall,
    Turn,
)
from tests.conftest import TOOL_OUTPUTS, ApiClient, logged_in_member, turn

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("keep_connection_open", "in_process_tasks"),
]

BASE = "/api/v1"
ROOT = Path(__file__).resolve().parent.parent
TABLES = (
    Session,
    Turn,
    Message,
    ToolCall,
    PendingToolOutput,
    ExtractionJob,
    Finding,
    ContextItem,
    Subtask,
    Subtask.dependencies.through,
    Memory,
    MemoryEvent,
    MemoryRecord,
    RecordTag,
)


# --- helpers ---------------------------------------------------------------------------------


def ok(response, status: int = 200):
    assert response.status_code == status, response.content[:2000]
    return response


def body(response) -> dict:
    """A response's JSON, streamed or not."""
    if response.streaming:
        return json.loads(b"".join(response.streaming_content))
    return response.json()


def exported(api: ApiClient, key: str | None = None) -> dict:
    path = f"{BASE}/sessions/{key}/export" if key else f"{BASE}/agent/export"
    response = ok(api.get(path))
    assert response.streaming and response["Content-Type"] == "application/json"
    document = body(response)
    export_api.ExportDocument.model_validate(document)  # every export can be imported
    return document


def agent_api(name: str) -> ApiClient:
    from django.test import Client

    agent, _ = Agent.objects.get_or_create(name=name)
    return ApiClient(Client(), ApiKey.issue(agent)[1])


def rows() -> dict[str, int]:
    return {model._meta.db_table: model.objects.count() for model in TABLES}


def normalized(document: dict) -> dict:
    """The document without what differs between copies: the database's ids (each
    replaced by its position among the document's objects of its kind, references
    alike), the agent's name and the export's time."""
    doc = copy.deepcopy(document)
    del doc["exported_at"]
    del doc["agent"]["name"]
    memories = [m for s in doc["sessions"] for m in s["memories"]] + doc["memories"]
    memory = {m["id"]: i for i, m in enumerate(memories, 1)}

    def snapshot(value: dict | None) -> None:
        if value and value.get("superseded_by") is not None:
            value["superseded_by"] = memory[value["superseded_by"]]

    for m in memories:
        m["id"] = memory[m["id"]]
        m["superseded_by"] = memory.get(m["superseded_by"])
        if "ams" in m and m["ams"]["id"].startswith("memoryapp-memory-"):
            m["ams"]["id"] = "memoryapp-memory-…"  # memoryapp's id: the memory's own pk
        for event in m["history"]:
            snapshot(event["before"])
            snapshot(event["after"])
    for session in doc["sessions"]:
        calls = [c for t in session["turns"] for c in t["calls"]]
        call = {c["id"]: i for i, c in enumerate(calls, 1)}
        finding = {f["id"]: i for i, f in enumerate(session["findings"], 1)}
        task = {t["id"]: i for i, t in enumerate(session["subtasks"], 1)}
        assert len(call) == len(calls) and len(task) == len(session["subtasks"])
        for c in calls:
            c["id"], c["finding"] = call[c["id"]], finding.get(c["finding"])
        for f in session["findings"]:
            f["id"], f["tool_call"] = finding[f["id"]], call.get(f["tool_call"])
        for t in session["subtasks"]:
            t["id"], t["dependencies"] = task[t["id"]], [task[d] for d in t["dependencies"]]
    return doc


def ids(document: dict) -> set[tuple[str, int]]:
    return {("memory", m["id"]) for s in document["sessions"] for m in s["memories"]} | {
        ("finding", f["id"]) for s in document["sessions"] for f in s["findings"]
    }


def tool_call(name: str, call_id: str) -> dict:
    call = TOOL_OUTPUTS[name]
    details = call.get("details")
    if details is not None and len(json.dumps(details)) > 8000:
        details = None
    return {
        "tool": call["tool"],
        "query": call["query"],
        "output": call["output"],
        "success": call.get("success"),
        "call_id": call_id,
        **({"details": details} if details else {}),
    }


def assistant_calling(call_id: str, name: str, arguments: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ],
    }


def build_session(api: ApiClient, capture, key: str = "s") -> Session:
    """A session holding one of everything (see the module's docstring)."""
    base = f"{BASE}/sessions/{key}"
    cwd = "/tmp/tmpw6sk2trg"
    ok(
        api.put(
            base,
            {
                "goal": "Fix the math utils",
                "metadata": {"cwd": cwd, "branch": "main", "depth": [1, {"a": None}]},
                "ttl_seconds": 7200,
            },
        ),
        201,
    )
    read = tool_call("cc_read_python", "toolu_1")
    edit = tool_call("cc_edit_python", "toolu_2")
    tests = tool_call("cc_pytest", "toolu_3")
    with capture(execute=True):
        ok(
            api.post(
                f"{base}/turns",
                {
                    "messages": [
                        {"role": "system", "content": "You fix bugs. Ünïcode ✓"},
                        {"role": "user", "content": "Make add_numbers handle floats."},
                        assistant_calling("toolu_1", "Read", read["query"]),
                        {"role": "tool", "content": read["output"], "tool_call_id": "toolu_1"},
                    ],
                    "usage": {"input_tokens": 812, "output_tokens": 64},
                    "tool_calls": [read],
                    "model": "claude-sonnet-4",
                    "timestamp": "2025-01-02T03:04:05.123456Z",
                },
            ),
            201,
        )
        ok(
            api.post(
                f"{base}/turns",
                {
                    "messages": [
                        assistant_calling("toolu_2", "Edit", edit["query"]),
                        {
                            "role": "tool",
                            "content": edit["output"],
                            "tool_call_id": "toolu_2",
                            "name": "Edit",
                        },
                    ],
                    "tool_calls": [edit],
                    "model": "claude-sonnet-4",
                    "timestamp": "2025-01-02T03:05:00+02:00",
                },
            ),
            201,
        )
        ok(
            api.post(
                f"{base}/turns",
                {
                    "messages": [
                        assistant_calling("toolu_3", "Bash", tests["query"]),
                        {"role": "tool", "content": tests["output"], "tool_call_id": "toolu_3"},
                        {"role": "assistant", "content": "All tests pass; I use pytest."},
                    ],
                    "tool_calls": [tests],
                },
            ),
            201,
        )
        # OpenAI-style only: the finding comes from the tool message.
        ok(
            api.post(
                f"{base}/turns",
                {
                    "messages": [
                        {"role": "user", "content": "Where else is add_numbers used?"},
                        assistant_calling("call_4", "grep", '{"pattern": "add_numbers"}'),
                        {
                            "role": "tool",
                            "content": "src/a.py:3: add_numbers(1, 2)",
                            "tool_call_id": "call_4",
                        },
                    ]
                },
            ),
            201,
        )
    session = Session.objects.get(agent__api_keys__key_hash=_hash(api.key), key=key)
    known = Finding.objects.get(session=session, tool="Read")
    with capture(execute=True):
        # A call the agent skipped: the Read's finding already answered it (known_from).
        ok(
            api.post(
                f"{base}/turns",
                {
                    "messages": [{"role": "assistant", "content": "Listing files."}],
                    "tool_calls": [
                        {"tool": "ls", "query": "-a", "output": "a.py\nb.py"},
                        {"tool": "Read", "query": read["query"], "known_from": known.pk},
                    ],
                },
            ),
            201,
        )
    # A client that names its messages (memoryapp/ams): an id, an edit, a removal.
    Message.objects.filter(session=session, seq=2).update(
        client_id="msg-2",
        revisions=[
            {
                "action": "edit",
                "at": "2025-01-02T03:04:06+00:00",
                "actor": "agent:coder",
                "role": "user",
                "content": "Make it handle floats.",
            }
        ],
    )
    Message.objects.filter(session=session, seq=3).update(
        client_id="msg-3", removed_at=timezone.now()
    )
    # The fifth turn's extraction failed (its error is part of the session's record).
    ExtractionJob.objects.filter(session=session, turn__iteration=5).update(
        status="failed", last_error="RuntimeError: boom", attempts=3
    )
    assert ExtractionJob.objects.filter(session=session, status="done").count() == 4

    ok(
        api.post(
            f"{base}/findings",
            {
                "tool": "bash",
                "query": "mix test",
                "fact": "2 failures",
                "step": 3,
                "success": False,
            },
        ),
        201,
    )
    ok(api.put(f"{base}/context-items/branch", {"value": "main"}))
    ok(
        api.put(
            f"{base}/context-items/branch",
            {"value": {"name": "fix", "base": ["main"]}, "confidence": 0.9},
        )
    )
    ok(api.put(f"{base}/context-items/scratch", {"value": 1}))
    ok(api.delete(f"{base}/context-items/scratch"), 204)
    inferred = ContextItem.objects.get(session=session, key="current_task")
    assert inferred.source == "inferred" and inferred.evidence
    inferred.edit_from_dashboard(
        "user:alice", value="Handle floats in add_numbers", confidence=0.95
    )
    extracted = Finding.objects.get(session=session, tool="grep")
    extracted.edit("user:alice", fact="add_numbers is used in src/a.py only")

    first = ok(api.post(f"{base}/subtasks", {"title": "Reproduce"}), 201).json()
    ok(api.post(f"{base}/subtasks", {"title": "Fix", "dependencies": [first["id"]]}), 201)
    ok(api.patch(f"{base}/subtasks/{first['id']}", {"status": "done"}))

    fact = ok(
        api.post(
            f"{BASE}/memories",
            {"content": "Tests run with pytest", "session": key, "confidence": 0.6},
        ),
        201,
    ).json()["memory"]
    ok(
        api.post(
            f"{BASE}/memories",
            {"content": "tests run with pytest.", "session": key, "confidence": 0.6},
        )
    )
    ok(
        api.patch(
            f"{BASE}/memories/{fact['id']}",
            {"content": "Tests run with pytest -q", "memory_type": "convention"},
        )
    )
    old = ok(
        api.post(
            f"{BASE}/memories",
            {"content": "Floats were never handled", "session": key, "memory_type": "lesson"},
        ),
        201,
    ).json()["memory"]
    ok(api.delete(f"{BASE}/memories/{old['id']}"), 204)
    ok(api.post(f"{BASE}/memories/{old['id']}/restore"))
    expiring = ok(
        api.post(f"{BASE}/memories", {"content": "The CI is down today", "session": key}), 201
    ).json()["memory"]
    Memory.objects.filter(pk=expiring["id"]).update(expires_at=timezone.now() + timedelta(days=1))
    ok(api.get(f"{base}/context", {"query_hint": "pytest floats"}))  # memories read: access counts
    session.refresh_from_db()
    return session


def _hash(key: str) -> str:
    from memoryapp.core.models import hash_api_key

    return hash_api_key(key)


@pytest.fixture
def rich(api, django_capture_on_commit_callbacks) -> Session:
    return build_session(api, django_capture_on_commit_callbacks)


# --- the round trip --------------------------------------------------------------------------


def test_a_session_exports_everything_it_holds(api, rich):
    document = exported(api, "s")
    assert (document["format"], document["version"], document["scope"]) == (EXPORT, 1, "session")
    assert document["agent"] == ok(api.get(f"{BASE}/agent")).json()
    assert document["memories"] == []
    (session,) = document["sessions"]
    # Each object in the shape the API answers for it.
    summary = ok(api.get(f"{BASE}/sessions/s")).json()
    assert {k: session[k] for k in summary} == _same_times(summary, session)
    listed = ok(api.get(f"{BASE}/sessions/s/turns")).json()["items"]
    assert [{k: t[k] for k in listed[0]} for t in session["turns"]] == _same_times(
        listed, session["turns"]
    )
    history = ok(api.get(f"{BASE}/sessions/s/history", {"max_messages": 1000})).json()
    assert [m["seq"] for m in session["messages"]] == list(range(1, rich.message_count + 1))
    assert [m["content"] for m in session["messages"]] == [
        m["content"] for m in history["messages"]
    ]
    assert session["totals"] == summary["totals"]
    assert [t["usage_source"] for t in session["turns"]] == ["reported", *["counted"] * 4]
    assert session["turns"][1]["timestamp"] == "2025-01-02T01:05:00+00:00"
    assert [t["extraction"]["status"] for t in session["turns"]] == ["done"] * 4 + ["failed"]
    assert session["turns"][4]["extraction"]["last_error"] == "RuntimeError: boom"
    calls = [c for t in session["turns"] for c in t["calls"]]
    assert [c["tool"] for c in calls] == ["Read", "Edit", "Bash", "ls", "Read"]
    assert calls[4]["skipped"] and calls[4]["finding"] == calls[0]["finding"]
    assert session["messages"][1]["client_id"] == "msg-2" and session["messages"][1]["revisions"]
    assert session["messages"][2]["removed_at"] and "client_id" not in session["messages"][0]
    assert all(c["output"] is None for c in calls[:3])  # extracted: the whole output is gone
    assert calls[3]["output"] is None  # short: the excerpt is all of it
    findings = {f["tool"]: f for f in session["findings"]}
    assert findings["Read"]["stale"] is True  # edited after it was read
    assert (
        findings["Read"]["tool_call"]
        == calls[0]["id"]
        == next(c["id"] for c in calls if c["finding"] == findings["Read"]["id"])
    )
    assert (
        findings["grep"]["source"] == "manual"
        and findings["grep"]["history"][-1]["actor"] == "user:alice"
    )
    assert findings["grep"]["provenance"] == {"turn": 4, "message_seq": 12, "tool_call_id": None}
    items = {i["key"]: i for i in session["context_items"]}
    assert "scratch" not in items  # deleted: gone, with its history
    assert [e["action"] for e in items["branch"]["history"]] == ["add", "update"]
    assert items["current_task"]["source"] == "manual" and items["current_task"]["evidence"]
    assert session["evidence"]["turns"] == [1, 2, 3, 4, 5]
    first, second = session["subtasks"]
    assert (first["status"], second["dependencies"]) == ("done", [first["id"]])
    memories = {m["content"]: m for m in session["memories"]}
    replaced = memories["Tests run with pytest"]
    assert replaced["status"] == "superseded"
    assert replaced["superseded_by"] == memories["Tests run with pytest -q"]["id"]
    assert [e["action"] for e in replaced["history"]] == ["add", "update", "update"]
    assert replaced["history"][-1]["after"]["superseded_by"] == replaced["superseded_by"]
    assert [e["action"] for e in memories["Floats were never handled"]["history"]] == [
        "add",
        "delete",
        "restore",
    ]
    assert memories["The CI is down today"]["expires_at"] is not None
    assert memories["Tests run with pytest -q"]["access_count"] == 1
    for memory in session["memories"]:
        shown = ok(api.get(f"{BASE}/memories/{memory['id']}")).json()
        assert {k: memory[k] for k in shown} == _same_times(shown, memory)
        changes = ok(api.get(f"{BASE}/memories/{memory['id']}/history")).json()["items"]
        assert memory["history"] == _same_times(changes, memory["history"])


def _same_times(api_answer, exported_value):
    """The API's answer with each time written as the export writes it, to compare the
    two shapes field by field: the API writes milliseconds (Django's JSON encoder), the
    export keeps microseconds (the staleness of a read compares them)."""
    if isinstance(api_answer, list):
        return [_same_times(a, e) for a, e in zip(api_answer, exported_value, strict=True)]
    if isinstance(api_answer, dict):
        return {
            k: (
                exported_value[k]
                if _is_time(k, v) and _ms(v) == _ms(exported_value[k])
                else _same_times(v, exported_value[k])
            )
            for k, v in api_answer.items()
        }
    return api_answer


def _is_time(name: str, value) -> bool:
    return isinstance(value, str) and name.endswith(("_at", "timestamp"))


def _ms(text: str):
    moment = datetime.fromisoformat(text)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def test_a_session_round_trips_into_another_agent(api, other_api, rich):
    before = exported(api, "s")
    answer = ok(other_api.post(f"{BASE}/import", before), 201).json()
    assert answer == {
        "scope": "session",
        "sessions": ["s"],
        "expired": [],
        "memories": 4,
        "extraction_queued": 0,
    }
    after = exported(other_api, "s")
    assert ids(after).isdisjoint(ids(before))  # new rows
    assert normalized(after) == normalized(before)
    # What the agent gets back is the same too (ids aside).
    for path, params in [
        ("", {}),
        ("/history", {"max_messages": 3}),
        ("/context", {"token_budget": 3000}),
    ]:
        mine = ok(api.get(f"{BASE}/sessions/s{path}", params)).json()
        theirs = ok(other_api.get(f"{BASE}/sessions/s{path}", params)).json()
        assert _without_ids(theirs) == _without_ids(mine), path
    assert (
        ok(
            other_api.get(
                f"{BASE}/sessions/s/findings/check",
                {"tool": "Read", "query": TOOL_OUTPUTS["cc_read_python"]["query"]},
            )
        ).json()["stale"]
        is True
    )
    # People see the copy on the dashboard, and can revert its history.
    viewer = logged_in_member("editor", Agent.objects.get(name="other"), "edna")
    for page in ("/agents/other/sessions/s/", "/agents/other/memories/"):
        assert viewer.get(page).status_code == 200, page
    item = ContextItem.objects.get(session__agent__name="other", key="branch")
    update = MemoryEvent.objects.get(target_kind="context_item", target_id=item.pk, action="update")
    assert item.revert(update, "user:edna").value == "main"
    # The search index has the imported rows.
    kinds = set()
    for q in ("floats", "pytest", "add_numbers"):
        mine = ok(api.get(f"{BASE}/search", {"q": q})).json()["items"]
        theirs = ok(other_api.get(f"{BASE}/search", {"q": q})).json()["items"]
        assert mine and _without_ids(theirs) == _without_ids(mine), q
        kinds |= {hit["kind"] for hit in theirs}
    assert kinds == {"message", "finding", "memory"}


# --- what the Redis Agent Memory Server API keeps beside a memory (memoryapp/ams) ------------


def ams(api: ApiClient, method: str, path: str, body: dict | None = None):
    """A request to /ams, as the agent-memory-client sends it (the key in the path)."""
    call = getattr(api.client, method.lower())
    if body is None:
        return call(f"/ams/{api.key}/v1{path}")
    return call(f"/ams/{api.key}/v1{path}", json.dumps(body), content_type="application/json")


RECORDS = [
    {
        "id": "r1",
        "text": "The deploy script lives in ops/deploy.sh",
        "topics": ["deploy", "scripts"],
        "entities": ["ops/deploy.sh"],
        "namespace": "work",
        "user_id": "ada",
        "memory_type": "semantic",
    },
    {
        "id": "r2",
        "text": "Ada fixed the flaky test on Monday",
        "memory_type": "episodic",
        "session_id": "s",
        "event_date": "2026-11-02T09:30:00Z",
        "topics": ["tests"],
    },
]
SAME = ("id", "text", "topics", "entities", "namespace", "user_id", "memory_type", "session_id")


def test_memories_written_through_ams_round_trip_with_their_records(
    api, other_api, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ok(api.post(f"{BASE}/sessions/s/turns", turn(("user", "hi"))), 201)
    ok(ams(api, "POST", "/long-term-memory/", {"memories": RECORDS}))
    # One a working memory lists, and one of memoryapp's the client gave topics to.
    ok(
        ams(
            api,
            "PUT",
            "/working-memory/w",
            {"memories": [{"id": "r3", "text": "Ada prefers rebase", "user_id": "ada"}]},
        )
    )
    plain = ok(api.post(f"{BASE}/memories", {"content": "Use ruff"}), 201).json()["memory"]["id"]
    ok(ams(api, "PATCH", f"/long-term-memory/memoryapp-memory-{plain}", {"topics": ["lint"]}))
    ok(api.post(f"{BASE}/memories", {"content": "No record here"}), 201)

    before = exported(api)
    records = {
        m["content"]: m.get("ams")
        for m in [m for s in before["sessions"] for m in s["memories"]] + before["memories"]
    }
    assert records["No record here"] is None  # absent, not null
    assert records[RECORDS[0]["text"]] == {
        "id": "r1",
        "memory_type": "semantic",
        "namespace": "work",
        "user_id": "ada",
        "session_id": "",
        "event_date": None,
        "created_at": records[RECORDS[0]["text"]]["created_at"],
        "extracted_from": None,
        "working_memory": None,
        "topics": ["deploy", "scripts"],
        "entities": ["ops/deploy.sh"],
    }
    assert records["Ada prefers rebase"]["working_memory"] == "w"

    ok(other_api.post(f"{BASE}/import", before), 201)
    after = exported(other_api)
    assert ids(after).isdisjoint(ids(before))
    assert normalized(after) == normalized(before)
    # The client gets each memory back by its id, the same record.
    for record_id in ("r1", "r2", "r3"):
        mine = ok(ams(api, "GET", f"/long-term-memory/{record_id}")).json()
        theirs = ok(ams(other_api, "GET", f"/long-term-memory/{record_id}")).json()
        assert {k: theirs[k] for k in SAME} == {k: mine[k] for k in SAME}, record_id
        assert theirs == mine, record_id
    copied = MemoryRecord.objects.get(agent__name="other", record_id__startswith="memoryapp-")
    assert copied.record_id == f"memoryapp-memory-{copied.memory_id}"
    theirs = ok(ams(other_api, "GET", f"/long-term-memory/{copied.record_id}")).json()
    assert (theirs["text"], theirs["topics"]) == ("Use ruff", ["lint"])
    listed = ok(ams(other_api, "GET", "/working-memory/w")).json()["memories"]
    assert [m["id"] for m in listed] == ["r3"]
    found = ok(
        ams(
            other_api,
            "POST",
            "/long-term-memory/search",
            {"text": "", "topics": {"any": ["deploy"]}},
        )
    ).json()["memories"]
    assert [m["id"] for m in found] == ["r1"]


def test_a_session_renamed_on_import_renames_its_records_session(api, other_api):
    ok(api.post(f"{BASE}/sessions/s/turns", turn(("user", "hi"))), 201)
    ok(ams(api, "POST", "/long-term-memory/", {"memories": RECORDS}))
    document = exported(api, "s")
    assert [m["ams"]["id"] for m in document["sessions"][0]["memories"]] == ["r2"]
    ok(other_api.post(f"{BASE}/import?session=t", document), 201)
    theirs = ok(ams(other_api, "GET", "/long-term-memory/r2")).json()
    assert (theirs["session_id"], theirs["event_date"]) == ("t", "2026-11-02T09:30:00Z")


def test_a_record_id_the_agent_has_is_a_409_unless_replaced(api, other_api):
    ok(ams(api, "POST", "/long-term-memory/", {"memories": RECORDS[:1]}))
    document = exported(api)
    ok(other_api.post(f"{BASE}/import", document), 201)
    state = rows()
    response = ok(other_api.post(f"{BASE}/import", document), 409)
    assert "r1" in response.json()["detail"] and "replace=true" in response.json()["detail"]
    assert rows() == state
    # The agent's own record, written by its client, is one too.
    third = agent_api("third")
    ok(ams(third, "POST", "/long-term-memory/", {"memories": [{**RECORDS[0], "text": "Mine"}]}))
    ok(third.post(f"{BASE}/import", document), 409)
    # Replacing: the document's record takes the id; the agent's memory stays, without it.
    ok(third.post(f"{BASE}/import?replace=true", document), 201)
    assert ok(ams(third, "GET", "/long-term-memory/r1")).json()["text"] == RECORDS[0]["text"]
    assert MemoryRecord.objects.filter(agent__name="third").count() == 1
    assert Memory.objects.filter(agent__name="third", content="Mine", status="active").exists()


def _without_ids(value):
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k != "id"}
    return value


def test_imported_turns_are_not_extracted_again(api, other_api, rich):
    before = exported(api, "s")
    ok(other_api.post(f"{BASE}/import", before), 201)
    jobs = ExtractionJob.objects.filter(session__agent__name="other")
    assert sorted(jobs.values_list("status", flat=True)) == ["done"] * 4 + ["failed"]
    state = (Finding.objects.count(), ContextItem.objects.count(), MemoryEvent.objects.count())
    for job in jobs.filter(status="done"):
        assert workers.run_extraction(job.pk) == "skipped"
    dispatch.sweep_extractions(now=timezone.now() + timedelta(hours=1))  # nothing is pending
    assert (
        Finding.objects.count(),
        ContextItem.objects.count(),
        MemoryEvent.objects.count(),
    ) == state
    assert normalized(exported(other_api, "s")) == normalized(before)
    # New turns extract as usual, from where the import left off.
    with_call = {
        "messages": [{"role": "user", "content": "Run ls again"}],
        "tool_calls": [{"tool": "ls", "query": "-l", "output": "total 0"}],
    }
    ok(other_api.post(f"{BASE}/sessions/s/turns", with_call), 201)
    assert ok(other_api.get(f"{BASE}/sessions/s")).json()["totals"]["turns"] == 6


def test_a_turn_exported_before_its_extraction_ran_is_extracted_after_the_import(
    api, other_api, django_capture_on_commit_callbacks
):
    read = TOOL_OUTPUTS["swe_open_ctf_python"]
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        # The job is queued and not run yet (a busy worker): the whole output waits.
        ok(
            api.post(
                f"{BASE}/sessions/s/turns",
                {
                    "messages": [{"role": "user", "content": "Find the flag."}],
                    "tool_calls": [
                        {"tool": read["tool"], "query": read["query"], "output": read["output"] * 3}
                    ],
                },
            ),
            201,
        )
    document = exported(api, "s")
    (turn_,) = document["sessions"][0]["turns"]
    assert turn_["extraction"]["status"] == "queued"
    assert turn_["calls"][0]["output"] == read["output"] * 3
    assert document["sessions"][0]["findings"] == []
    with django_capture_on_commit_callbacks(execute=True):
        answer = ok(other_api.post(f"{BASE}/import", document), 201).json()
    assert answer["extraction_queued"] == 1
    callbacks[0]()  # the source's job runs too
    mine, theirs = exported(api, "s"), exported(other_api, "s")
    assert theirs["sessions"][0]["turns"][0]["extraction"]["status"] == "done"
    assert _extracted(theirs) == _extracted(mine)
    assert _extracted(mine)[0]  # a finding, from the whole output
    assert PendingToolOutput.objects.count() == 0


def test_a_turn_without_a_job_imports_without_one_and_a_pending_job_is_queued(
    api, django_capture_on_commit_callbacks, monkeypatch
):
    """Another exporter's turn may carry no job (none is made); a job the source's sweep
    had yet to hand over (`pending`) is queued at the import's time and dispatched after
    it commits, with what else it had kept as exported."""
    dispatched = []
    monkeypatch.setattr(export, "dispatch_extraction", dispatched.append)
    without = copy.deepcopy(COMPLETE_DOCUMENT)
    without["sessions"][0]["turns"][0]["extraction"] = None
    with django_capture_on_commit_callbacks(execute=True):
        answer = ok(api.post(f"{BASE}/import", without), 201).json()
    assert answer["extraction_queued"] == 0 and dispatched == []
    assert not ExtractionJob.objects.filter(session__key="imported").exists()
    assert normalized(exported(api)) == normalized(without)

    pending = copy.deepcopy(COMPLETE_DOCUMENT)
    pending["sessions"][0]["turns"][0]["extraction"].update(
        status="pending", queued_at=None, finished_at=None
    )
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        agent = Agent.objects.get(api_keys__key_hash=_hash(api.key))
        result = export.import_document(agent, pending, replace=True, now=now)
    job = ExtractionJob.objects.get(session__key="imported")
    assert result.extraction_queued == 1 and dispatched == [job.pk]
    assert (job.status, job.queued_at, job.finished_at) == ("queued", now, None)
    assert (job.attempts, job.last_error, job.findings_added) == (2, "RuntimeError: boom", 1)
    assert job.created_at.isoformat() == _T0


def _extracted(document: dict):
    """What extraction made of a session, without the times it wrote."""
    (session,) = normalized(document)["sessions"]
    skip = {"created_at", "updated_at", "finished_at", "queued_at"}

    def timeless(value):
        if isinstance(value, list):
            return [timeless(v) for v in value]
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if k not in skip}
        return value

    return timeless(
        [session["findings"], session["context_items"], session["evidence"], session["turns"]]
    )


def test_a_whole_agent_round_trips_into_a_fresh_agent(api, django_capture_on_commit_callbacks):
    build_session(api, django_capture_on_commit_callbacks, "s")
    with django_capture_on_commit_callbacks(execute=True):  # extracted, as a settled agent is
        ok(api.post(f"{BASE}/sessions/t/turns", turn(("user", "hello"), ("assistant", "hi"))), 201)
    ok(
        api.post(
            f"{BASE}/memories",
            {"content": "The user prefers short answers", "memory_type": "preference"},
        ),
        201,
    )
    # A session that expired (not cleaned up yet): not exported, its memory is the agent's.
    ok(api.post(f"{BASE}/sessions/old/turns", turn(("user", "old"))), 201)
    ok(api.post(f"{BASE}/memories", {"content": "Learned long ago", "session": "old"}), 201)
    Session.objects.filter(key="old").update(expires_at=timezone.now() - timedelta(seconds=1))
    ok(
        api.patch(
            f"{BASE}/agent", {"max_messages": 40, "working_budget": 900, "ttl_seconds": 86400}
        )
    )

    before = exported(api)
    assert before["scope"] == "agent"
    assert [s["key"] for s in before["sessions"]] == ["s", "t"]
    assert {m["content"] for m in before["memories"]} == {
        "The user prefers short answers",
        "Learned long ago",
    }

    copy_api = agent_api("copy")
    answer = ok(copy_api.post(f"{BASE}/import", before), 201).json()
    assert (answer["scope"], answer["sessions"], answer["memories"]) == ("agent", ["s", "t"], 6)
    settings = ok(copy_api.get(f"{BASE}/agent")).json()
    assert {**settings, "name": "coder"} == ok(api.get(f"{BASE}/agent")).json()
    assert normalized(exported(copy_api)) == normalized(before)


def test_the_commands_export_and_import_a_session_and_an_agent(api, rich, tmp_path):
    path = tmp_path / "s.json"
    err = StringIO()
    call_command(
        "export_session", "--agent", "coder", "--session", "s", "-o", str(path), stderr=err
    )
    assert "exported session 's' of coder" in err.getvalue()
    assert detect_format(path) == EXPORT
    before = json.loads(path.read_text())

    out = StringIO()
    call_command("import_transcript", str(path), "--agent", "copy", stdout=out)
    assert f"{path}: session export imported: 1 session, 4 memories" in out.getvalue()
    assert not ApiKey.objects.filter(agent__name="copy").exists()  # the run's key is gone
    printed = StringIO()
    call_command("export_session", "--agent", "copy", "--session", "s", stdout=printed)
    assert normalized(json.loads(printed.getvalue())) == normalized(before)

    # Again: the session exists (nothing changes), unless replaced.
    state = rows()
    with pytest.raises(CommandError):
        call_command("import_transcript", str(path), "--agent", "copy", stdout=StringIO())
    assert rows() == state
    call_command("import_transcript", str(path), "--agent", "copy", "--replace", stdout=StringIO())
    printed = StringIO()
    call_command("export_session", "--agent", "copy", "--session", "s", stdout=printed)
    assert normalized(json.loads(printed.getvalue())) == normalized(before)
    # The replaced session's memories stay with the agent (as when a session is deleted).
    assert Memory.objects.filter(agent__name="copy", session__isnull=True).count() == 4
    call_command(
        "import_transcript", str(path), "--agent", "copy", "--session", "s2", stdout=StringIO()
    )
    assert Session.objects.filter(agent__name="copy", key="s2").exists()

    # A whole agent, into a folder beside a transcript: both are imported.
    folder = tmp_path / "folder"
    folder.mkdir()
    call_command(
        "export_session", "--agent", "coder", "-o", str(folder / "coder.json"), stderr=StringIO()
    )
    (folder / "hello.jsonl").write_bytes(
        (ROOT / "demo/transcripts/claude-code/hello-world-script.jsonl").read_bytes()
    )
    out = StringIO()
    call_command("import_transcript", str(folder), "--agent", "whole", stdout=out)
    assert "agent export imported: 1 session" in out.getvalue()
    assert "hello: " in out.getvalue()
    assert set(Session.objects.filter(agent__name="whole").values_list("key", flat=True)) == {
        "s",
        "hello",
    }
    with pytest.raises(CommandError, match="no agent named"):
        call_command("export_session", "--agent", "nobody")
    with pytest.raises(CommandError, match="no live session"):
        call_command("export_session", "--agent", "coder", "--session", "absent")


def test_an_export_imports_into_a_separate_server_over_http(api, rich, tmp_path):
    """Another server: a gunicorn process on its own SQLite database (whatever database
    this test runs on), reached over HTTP by `python -m agents.importers.export`, as an
    agent machine would; its export of the copy is the same document."""
    before = exported(api, "s")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(before))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'remote.sqlite3'}",
        MEMORYAPP_VAR_DIR=str(tmp_path),
        DEBUG="true",
        PYTHONPATH=str(ROOT),
    )
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run(
        [*manage, "migrate", "--no-input"], env=env, check=True, capture_output=True, timeout=300
    )
    created = subprocess.run(
        [*manage, "create_agent", "remote"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    key = created.stdout.strip().splitlines()[-1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "memoryapp.wsgi",
            "--config",
            str(ROOT / "gunicorn.conf.py"),
            "--workers",
            "1",
            "--bind",
            f"127.0.0.1:{port}",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the second server did not start"
            time.sleep(0.2)

        def send():
            command = ["-m", "agents.importers.export", str(path), "--url", url, "--key", key]
            return subprocess.run(
                [sys.executable, *command],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )

        sent = send()
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "session export imported: 1 session, 4 memories" in sent.stdout
        headers = {"Authorization": f"Bearer {key}"}
        after = httpx.get(f"{url}/api/v1/sessions/s/export", headers=headers, timeout=60).json()
        assert normalized(after) == normalized(before)
        again = send()
        assert again.returncode == 1 and "409" in again.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)


# --- a document with every field of the schema ---------------------------------------------------
# Written by hand, as another exporter (or an older memoryapp) might write one: every field
# the schema has, optional ones included, so that a test can try each field's bad values
# (tests/test_bad_input.py may take it from here).

_T0 = "2025-03-01T10:00:00.250000+00:00"
_T1 = "2025-03-01T10:05:00+00:00"
_SNAPSHOT = {
    "memory_type": "convention",
    "content": "Tests run with pytest",
    "confidence": 0.8,
    "status": "active",
    "superseded_by": None,
}
_REF = {"turn": 1, "seq": 1, "what": "the first prompt"}
COMPLETE_DOCUMENT = {
    "format": "memoryapp-export",
    "version": 1,
    "scope": "agent",
    "exported_at": _T1,
    "agent": {
        "name": "source",
        "ttl_seconds": 7200,
        "max_messages": 50,
        "token_budget": 16000,
        "encoding": "cl100k_base",
        "system_budget": 1000,
        "conversation_budget": 8000,
        "working_budget": 2000,
        "long_term_budget": 3000,
        "default_conversation_budget": 8000,
    },
    "sessions": [
        {
            "key": "imported",
            "goal": "Fix the parser",
            "status": "paused",
            "metadata": {"cwd": "/repo", "branch": "main"},
            "ttl_seconds": 86400,
            "created_at": _T0,
            "last_activity_at": _T1,
            "expires_at": "2099-01-01T00:00:00+00:00",
            "totals": {
                "messages": 2,
                "tokens": 41,
                "input_tokens": 800,
                "output_tokens": 60,
                "turns": 1,
            },
            "evidence": {
                "weights": {"primary_language": {"python": {"w": 1.5, "n": 2, "refs": [_REF]}}},
                "latest": {
                    "current_task": {"value": "Fix the parser", "rank": 3, "n": 1, "refs": [_REF]}
                },
                "seen": ["primary_language|python|src/a.py"],
                "writes": {"src/a.py": 2},
                "rewritten_all": 1,
                "issues": {"bd-1": "Fix the parser"},
                "turns": [1],
                "decided": {"current_task": ["Fix the parser", 0.7]},
            },
            "turns": [
                {
                    "iteration": 1,
                    "message_count": 2,
                    "input_tokens": 800,
                    "output_tokens": 60,
                    "tool_calls": 1,
                    "timestamp": _T0,
                    "model": "gpt-4o",
                    "usage_source": "reported",
                    "first_seq": 1,
                    "last_seq": 2,
                    "calls": [
                        {
                            "id": 7,
                            "tool": "Read",
                            "query": '{"file_path": "src/a.py"}',
                            "success": True,
                            "output_size": 12,
                            "output_excerpt": "print('hi')\n",
                            "output": "print('hi')\n",
                            "file_path": "src/a.py",
                            "call_id": "call_1",
                            "details": {"numLines": 1},
                            "kind": "read",
                            "fact": "1 line",
                            "fact_success": True,
                            "finding": 11,
                            "skipped": False,
                            "created_at": _T0,
                        }
                    ],
                    "extraction": {
                        "status": "failed",
                        "attempts": 2,
                        "last_error": "RuntimeError: boom",
                        "findings_added": 1,
                        "context_items_set": 0,
                        "created_at": _T0,
                        "queued_at": _T0,
                        "finished_at": _T1,
                    },
                }
            ],
            "messages": [
                {
                    "seq": 1,
                    "role": "assistant",
                    "content": "Reading.",
                    "token_count": 30,
                    "created_at": _T0,
                    "name": "coder",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "Read", "arguments": '{"file_path": "src/a.py"}'},
                        }
                    ],
                    "client_id": "m-1",
                    "revisions": [
                        {
                            "action": "edit",
                            "at": _T0,
                            "actor": "agent:source",
                            "role": "assistant",
                            "content": "Reading a.py.",
                        }
                    ],
                },
                {
                    "seq": 2,
                    "role": "tool",
                    "content": "print('hi')",
                    "token_count": 11,
                    "created_at": _T0,
                    "tool_call_id": "call_1",
                    "removed_at": _T1,
                },
            ],
            "findings": [
                {
                    "id": 11,
                    "tool": "Read",
                    "kind": "read",
                    "query": "src/a.py",
                    "fact": "1 line",
                    "step": 1,
                    "success": True,
                    "file_path": "src/a.py",
                    "source": "manual",
                    "group": "Files Already Read",
                    "stale": True,
                    "details": {"language": "python"},
                    "provenance": {"turn": 1, "message_seq": 2, "tool_call_id": "call_1"},
                    "updated_at": _T1,
                    "identity": "ab" * 32,
                    "created_at": _T0,
                    "tool_call": 7,
                    "history": [
                        {
                            "action": "update",
                            "before": {
                                "tool": "Read",
                                "query": "src/a.py",
                                "fact": "2 lines",
                                "step": 1,
                                "success": True,
                                "file_path": "src/a.py",
                                "source": "extracted",
                            },
                            "after": {
                                "tool": "Read",
                                "query": "src/a.py",
                                "fact": "1 line",
                                "step": 1,
                                "success": True,
                                "file_path": "src/a.py",
                                "source": "manual",
                            },
                            "actor": "user:alice",
                            "created_at": _T1,
                        }
                    ],
                }
            ],
            "context_items": [
                {
                    "key": "current_task",
                    "value": {"title": "Fix the parser", "issue": 1},
                    "source": "inferred",
                    "confidence": 0.7,
                    "updated_at": _T1,
                    "created_at": _T0,
                    "evidence": [_REF],
                    "history": [
                        {
                            "action": "add",
                            "before": None,
                            "after": {
                                "key": "current_task",
                                "value": "Fix it",
                                "source": "inferred",
                                "confidence": 0.6,
                            },
                            "actor": "system:extractor",
                            "created_at": _T0,
                        },
                        {
                            "action": "update",
                            "before": {
                                "key": "current_task",
                                "value": "Fix it",
                                "source": "inferred",
                                "confidence": 0.6,
                            },
                            "after": {
                                "key": "current_task",
                                "value": {"title": "Fix the parser", "issue": 1},
                                "source": "inferred",
                                "confidence": 0.7,
                            },
                            "actor": "system:extractor",
                            "created_at": _T1,
                        },
                    ],
                }
            ],
            "subtasks": [
                {
                    "id": 3,
                    "title": "Reproduce",
                    "status": "done",
                    "position": 0,
                    "dependencies": [],
                    "created_at": _T0,
                    "updated_at": _T1,
                },
                {
                    "id": 4,
                    "title": "Fix",
                    "status": "in_progress",
                    "position": 1,
                    "dependencies": [3],
                    "created_at": _T0,
                    "updated_at": _T1,
                },
            ],
            "memories": [
                {
                    "id": 21,
                    "memory_type": "convention",
                    "content": "Tests run with pytest",
                    "confidence": 0.8,
                    "status": "superseded",
                    "source": "agent",
                    "created_at": _T0,
                    "updated_at": _T1,
                    "superseded_by": 22,
                    "expires_at": None,
                    "last_accessed_at": _T1,
                    "access_count": 2,
                    "history": [
                        {
                            "action": "add",
                            "before": None,
                            "after": _SNAPSHOT,
                            "actor": "agent:source",
                            "created_at": _T0,
                        },
                        {
                            "action": "update",
                            "before": _SNAPSHOT,
                            "after": {**_SNAPSHOT, "status": "superseded", "superseded_by": 22},
                            "actor": "agent:source",
                            "created_at": _T1,
                        },
                    ],
                },
                {
                    "id": 22,
                    "memory_type": "convention",
                    "content": "Tests run with pytest -q",
                    "confidence": 0.8,
                    "status": "active",
                    "source": "agent",
                    "created_at": _T1,
                    "updated_at": _T1,
                    "superseded_by": None,
                    "expires_at": "2099-01-01T00:00:00+00:00",
                    "last_accessed_at": None,
                    "access_count": 0,
                    "history": [],
                    "ams": {
                        "id": "01JCLIENTRECORD22",
                        "memory_type": "episodic",
                        "namespace": "work",
                        "user_id": "ada",
                        "session_id": "imported",
                        "event_date": _T0,
                        "created_at": _T0,
                        "extracted_from": ["01JMESSAGE1"],
                        "working_memory": "imported",
                        "topics": ["testing", "pytest"],
                        "entities": ["pytest"],
                    },
                    "origin": {
                        "system": "ams",
                        "source_id": "01JCLIENTRECORD22",
                        "detail": {"namespace": "work", "user_id": "ada"},
                        "imported_at": _T1,
                    },
                },
            ],
        }
    ],
    "memories": [
        {
            "id": 23,
            "memory_type": "preference",
            "content": "Short answers",
            "confidence": 0.9,
            "status": "archived",
            "source": "manual",
            "created_at": _T0,
            "updated_at": _T1,
            "superseded_by": None,
            "expires_at": None,
            "last_accessed_at": None,
            "access_count": 0,
            "history": [
                {
                    "action": "expire",
                    "before": {
                        **_SNAPSHOT,
                        "content": "Short answers",
                        "memory_type": "preference",
                    },
                    "after": {
                        **_SNAPSHOT,
                        "content": "Short answers",
                        "memory_type": "preference",
                        "status": "archived",
                    },
                    "actor": "system:cleanup",
                    "created_at": _T1,
                }
            ],
            # A record the client made by naming a memory by memoryapp's id.
            "ams": {
                "id": "memoryapp-memory-23",
                "memory_type": "semantic",
                "namespace": "",
                "user_id": "",
                "session_id": "",
                "event_date": None,
                "created_at": _T0,
                "extracted_from": None,
                "working_memory": None,
                "topics": [],
                "entities": ["answers"],
            },
            # Imported from another memory system (memoryapp/core/moving.py).
            "origin": {
                "system": "mem0",
                "source_id": "191bbc0a-9f7a-47e1-9b32-445568a86732",
                "detail": {"user_id": "ann", "hash": "3251638c9c3c3449d3ff91e5780b1217"},
                "imported_at": _T1,
            },
        }
    ],
}


def _fields(model, prefix: tuple = ()) -> set[tuple]:
    """Every field path of a schema, through nested schemas and lists (`[]`)."""
    import typing

    from pydantic import BaseModel

    found = set()
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        found.add(path)
        stack = [(info.annotation, path)]
        while stack:
            annotation, where = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                found |= _fields(annotation, where)
                continue
            origin = typing.get_origin(annotation)
            arguments = typing.get_args(annotation)
            if origin is list:
                stack += [(a, (*where, "[]")) for a in arguments]
            elif origin is dict:
                stack += [(arguments[1], (*where, "{}"))]
            elif origin is typing.Annotated:
                stack.append((arguments[0], where))
            else:
                stack += [(a, where) for a in arguments]
    return found


def _paths(value, prefix: tuple = ()) -> set[tuple]:
    found = set()
    if isinstance(value, dict):
        for name, item in value.items():
            found.add((*prefix, name))
            found |= _paths(item, (*prefix, name))
    elif isinstance(value, list):
        for item in value:
            found |= _paths(item, (*prefix, "[]"))
    return found


def _open(path: tuple) -> tuple:
    """A path with each open object's keys (metadata, details, the tally's maps) as `{}`."""
    opened, i = [], 0
    while i < len(path):
        opened.append(path[i])
        if path[i] in ("weights", "latest", "writes", "issues", "decided") and i + 1 < len(path):
            opened.append("{}")
            i += 1
            if path[i - 1] == "weights" and i + 1 < len(path):
                i += 1  # the value's own key: {value: {w, n, refs}}
                opened.append("{}")
        i += 1
    return tuple(opened)


def test_a_document_with_every_field_round_trips(api):
    declared = {p for p in _fields(export_api.ExportDocument) if "{}" not in p[-1:]}
    written = {_open(p) for p in _paths(COMPLETE_DOCUMENT)}
    assert sorted(declared - written) == [], "fields no test body holds"
    answer = ok(api.post(f"{BASE}/import", COMPLETE_DOCUMENT), 201).json()
    assert answer == {
        "scope": "agent",
        "sessions": ["imported"],
        "expired": [],
        "memories": 3,
        "extraction_queued": 0,
    }
    again = exported(api)
    assert normalized(again) == normalized(COMPLETE_DOCUMENT)


# --- what an import refuses ----------------------------------------------------------------


def test_a_session_that_exists_is_a_409_unless_replaced(api, other_api, rich):
    document = exported(api, "s")
    ok(other_api.post(f"{BASE}/import", document), 201)
    state = rows()
    response = ok(other_api.post(f"{BASE}/import", document), 409)
    assert "replace=true" in response.json()["detail"]
    assert rows() == state
    ok(other_api.post(f"{BASE}/import?replace=true", document), 201)
    assert normalized(exported(other_api, "s")) == normalized(document)
    ok(other_api.post(f"{BASE}/import?session=copy", document), 201)
    assert ok(other_api.get(f"{BASE}/sessions/copy")).json()["goal"] == "Fix the math utils"
    # The source's own session key is not another agent's business: still 404 there.
    ok(other_api.delete(f"{BASE}/sessions/copy"), 204)
    assert api.get(f"{BASE}/sessions/copy/export").status_code == 404
    assert other_api.get(f"{BASE}/sessions/absent/export").status_code == 404


def test_an_expired_session_is_not_created_and_its_memories_are_kept(api, other_api, rich):
    document = exported(api, "s")
    document["sessions"][0]["expires_at"] = "2020-01-01T00:00:00Z"
    answer = ok(other_api.post(f"{BASE}/import", document), 201).json()
    assert (answer["sessions"], answer["expired"], answer["memories"]) == ([], ["s"], 4)
    assert not Session.objects.filter(agent__name="other").exists()
    assert Memory.objects.filter(agent__name="other", session__isnull=True).count() == 4


def _locs(response) -> list[list]:
    return [problem["loc"] for problem in response.json()["detail"]]


AMS = {
    "id": "r9",
    "memory_type": "semantic",
    "namespace": "",
    "user_id": "",
    "session_id": "",
    "event_date": None,
    "created_at": _T0,
    "extracted_from": None,
    "working_memory": None,
    "topics": [],
    "entities": [],
}


def _with_records(document: dict, *records: dict) -> None:
    for memory, record in zip(document["sessions"][0]["memories"], records, strict=False):
        memory["ams"] = record


BAD = [
    ("version", lambda d: d.update(version=2), ["body", "payload", "version"]),
    ("format", lambda d: d.update(format="other"), ["body", "payload", "format"]),
    (
        "unknown field",
        lambda d: d["sessions"][0].update(colour="red"),
        ["body", "payload", "sessions", 0, "colour"],
    ),
    (
        "seq gap",
        lambda d: d["sessions"][0]["messages"][1].update(seq=3),
        ["body", "payload", "sessions", 0, "messages", 1, "seq"],
    ),
    (
        "turn range",
        lambda d: d["sessions"][0]["turns"][1].update(first_seq=1),
        ["body", "payload", "sessions", 0, "turns", 1, "first_seq"],
    ),
    (
        "totals",
        lambda d: d["sessions"][0]["totals"].update(tokens=1),
        ["body", "payload", "sessions", 0, "totals", "tokens"],
    ),
    (
        "finding's call",
        lambda d: d["sessions"][0]["findings"][0].update(tool_call=999_999),
        ["body", "payload", "sessions", 0, "findings", 0, "tool_call"],
    ),
    (
        "call's finding",
        lambda d: d["sessions"][0]["turns"][0]["calls"][0].update(finding=999_999),
        ["body", "payload", "sessions", 0, "turns", 0, "calls", 0, "finding"],
    ),
    (
        "identity",
        lambda d: d["sessions"][0]["findings"][1].update(
            identity=d["sessions"][0]["findings"][0]["identity"]
        ),
        ["body", "payload", "sessions", 0, "findings", 1, "identity"],
    ),
    (
        "replacement",
        lambda d: d["sessions"][0]["memories"][0].update(superseded_by=999_999),
        ["body", "payload", "sessions", 0, "memories", 0, "superseded_by"],
    ),
    (
        "snapshot's replacement",
        lambda d: d["sessions"][0]["memories"][0]["history"][-1]["after"].update(
            superseded_by=999_999
        ),
        ["body", "payload", "sessions", 0, "memories", 0, "history", 2, "after", "superseded_by"],
    ),
    (
        "dependency",
        lambda d: d["sessions"][0]["subtasks"][1].update(dependencies=[999_999]),
        ["body", "payload", "sessions", 0, "subtasks", 1, "dependencies"],
    ),
    (
        "dependency twice",
        lambda d: d["sessions"][0]["subtasks"][1].update(
            dependencies=[d["sessions"][0]["subtasks"][0]["id"]] * 2
        ),
        ["body", "payload", "sessions", 0, "subtasks", 1, "dependencies"],
    ),
    (
        "duplicate item",
        lambda d: d["sessions"][0]["context_items"][1].update(
            key=d["sessions"][0]["context_items"][0]["key"]
        ),
        ["body", "payload", "sessions", 0, "context_items", 1, "key"],
    ),
    (
        "evidence",
        lambda d: d["sessions"][0]["evidence"].update(writes={"a.py": "later"}),
        ["body", "payload", "sessions", 0, "evidence", "writes", "a.py"],
    ),
    (
        "client id",
        lambda d: d["sessions"][0]["messages"][3].update(client_id="msg-2"),
        ["body", "payload", "sessions", 0, "messages", 3, "client_id"],
    ),
    (
        "confidence",
        lambda d: d["sessions"][0]["context_items"][0].update(confidence=1.5),
        ["body", "payload", "sessions", 0, "context_items", 0, "confidence"],
    ),
    (
        "null value",
        lambda d: d["sessions"][0]["context_items"][0].update(value=None),
        ["body", "payload", "sessions", 0, "context_items", 0, "value"],
    ),
    (
        "item name",
        lambda d: d["sessions"][0]["context_items"][0].update(key="a\u200bb"),
        ["body", "payload", "sessions", 0, "context_items", 0, "key"],
    ),
    (
        "session key",
        lambda d: d["sessions"][0].update(key=".."),
        ["body", "payload", "sessions", 0, "key"],
    ),
    (
        "time",
        lambda d: d["sessions"][0]["messages"][0].update(created_at=5),
        ["body", "payload", "sessions", 0, "messages", 0, "created_at"],
    ),
    (
        "old time",
        lambda d: d["sessions"][0]["turns"][0].update(timestamp="1969-12-31T23:59:59Z"),
        ["body", "payload", "sessions", 0, "turns", 0, "timestamp"],
    ),
    (
        "column",
        lambda d: d["sessions"][0]["turns"][0].update(model="m" * 201),
        ["body", "payload", "sessions", 0, "turns", 0, "model"],
    ),
    (
        "integer",
        lambda d: d["sessions"][0]["messages"][0].update(token_count=2**31),
        ["body", "payload", "sessions", 0, "messages", 0, "token_count"],
    ),
    (
        "string integer",
        lambda d: d["sessions"][0]["turns"][0].update(input_tokens="5"),
        ["body", "payload", "sessions", 0, "turns", 0, "input_tokens"],
    ),
    (
        "kind",
        lambda d: d["sessions"][0]["findings"][0].update(kind="magic"),
        ["body", "payload", "sessions", 0, "findings", 0, "kind"],
    ),
    (
        "nul",
        lambda d: d["sessions"][0]["messages"][0].update(content="a\u0000b"),
        ["body", "payload", "sessions", 0, "messages", 0, "content"],
    ),
    (
        "encoding",
        lambda d: d.update(scope="agent") or d["agent"].update(encoding="no_such_encoding"),
        ["body", "payload", "agent", "encoding"],
    ),
    ("replacement loop", lambda d: _loop_replacements(d), ["body", "payload", "memories"]),
    (
        "record's unknown field",
        lambda d: _with_records(d, {**AMS, "colour": "red"}),
        ["body", "payload", "sessions", 0, "memories", 0, "ams", "colour"],
    ),
    (
        "record null",
        lambda d: _with_records(d, None),
        ["body", "payload", "sessions", 0, "memories", 0, "ams"],
    ),
    (
        "record's field missing",
        lambda d: _with_records(d, {k: v for k, v in AMS.items() if k != "namespace"}),
        ["body", "payload", "sessions", 0, "memories", 0, "ams", "namespace"],
    ),
    (
        "record's namespace too long",
        lambda d: _with_records(d, {**AMS, "namespace": "n" * 201}),
        ["body", "payload", "sessions", 0, "memories", 0, "ams", "namespace"],
    ),
    (
        "record's type",
        lambda d: _with_records(d, {**AMS, "memory_type": "procedural"}),
        ["body", "payload", "sessions", 0, "memories", 0, "ams", "memory_type"],
    ),
    (
        "record's topic twice",
        lambda d: _with_records(d, {**AMS, "topics": ["a", "a"]}),
        ["body", "payload", "sessions", 0, "memories", 0, "ams", "topics"],
    ),
    (
        "record id twice",
        lambda d: _with_records(d, AMS, AMS),
        ["body", "payload", "sessions", 0, "memories", 1, "ams", "id"],
    ),
]


def _loop_replacements(document: dict) -> None:
    """The replacement of a revised memory says it was replaced by the old one."""
    memories = [m for s in document["sessions"] for m in s["memories"]] + document["memories"]
    replaced = next(m for m in memories if m["superseded_by"] is not None)
    newer = next(m for m in memories if m["id"] == replaced["superseded_by"])
    newer["superseded_by"] = replaced["id"]


@pytest.mark.parametrize("name, change, loc", BAD, ids=[b[0] for b in BAD])
def test_a_bad_document_is_a_422_naming_the_field_and_changes_nothing(
    api, other_api, rich, name, change, loc
):
    document = exported(api, "s")
    change(document)
    state = rows()
    settings = ok(other_api.get(f"{BASE}/agent")).json()
    response = ok(other_api.post(f"{BASE}/import", json.dumps(document)), 422)
    assert loc in _locs(response), response.json()
    assert rows() == state
    assert ok(other_api.get(f"{BASE}/agent")).json() == settings


def _session(d: dict) -> dict:
    return d["sessions"][0]


def _second_call(d: dict) -> None:
    calls = _session(d)["turns"][0]["calls"]
    calls.append({**calls[0], "finding": None})


def _second_finding(d: dict) -> None:
    findings = _session(d)["findings"]
    findings.append({**findings[0], "identity": "cd" * 32})


def _seq_gap_hides_the_rest(d: dict) -> None:
    _session(d)["messages"][1]["seq"] = 5
    _session(d)["totals"]["tokens"] = 1


def _miscounted_turn(d: dict) -> None:
    _session(d)["turns"][0]["message_count"] = 3
    _session(d)["totals"].update(turns=2, input_tokens=1)


_AT = ("sessions", 0)
# Each check of a session (export._check_session) on the complete document: the problems
# check_document answers, every one, in order (a numbering or range problem stops the
# session's checks there).
SESSION_CHECKS = [
    (
        "seq gap",
        _seq_gap_hides_the_rest,
        [((*_AT, "messages", 1, "seq"), "messages are numbered 1, 2, … : expected 2")],
    ),
    (
        "client id twice",
        lambda d: _session(d)["messages"][1].update(client_id="m-1"),
        [((*_AT, "messages", 1, "client_id"), "client ids are unique")],
    ),
    (
        "iteration",
        lambda d: _session(d)["turns"][0].update(iteration=2) or _session(d)["totals"].clear(),
        [((*_AT, "turns", 0, "iteration"), "turns are numbered 1, 2, … : expected 1")],
    ),
    (
        "turn range",
        lambda d: _session(d)["turns"][0].update(last_seq=3),
        [
            (
                (*_AT, "turns", 0, "first_seq"),
                "a turn's messages follow the previous turn's and exist: first_seq > 0, "
                "first_seq <= last_seq <= 2",
            )
        ],
    ),
    (
        "message count",
        _miscounted_turn,
        [
            ((*_AT, "turns", 0, "message_count"), "message_count is last_seq - first_seq + 1"),
            ((*_AT, "totals", "input_tokens"), "the rows give 800"),
            ((*_AT, "totals", "turns"), "the rows give 1"),
        ],
    ),
    (
        "call id twice",
        _second_call,
        [((*_AT, "turns", 0, "calls", 1, "id"), "tool-call ids are unique")],
    ),
    (
        "finding id twice",
        _second_finding,
        [((*_AT, "findings", 1, "id"), "finding ids are unique")],
    ),
    (
        "identity twice",
        lambda d: _second_finding(d) or _session(d)["findings"][1].update(identity="ab" * 32),
        [
            ((*_AT, "findings", 1, "id"), "finding ids are unique"),
            ((*_AT, "findings", 1, "identity"), "one finding per call: identities are unique"),
        ],
    ),
    (
        "provenance",
        lambda d: _session(d)["findings"][0]["provenance"].update(
            turn=2, message_seq=0, tool_call_id="call_2"
        ),
        [
            ((*_AT, "findings", 0, "provenance", "turn"), "no such turn in this session"),
            (
                (*_AT, "findings", 0, "provenance", "message_seq"),
                "no such message in this session",
            ),
            (
                (*_AT, "findings", 0, "provenance", "tool_call_id"),
                "the tool call's call_id is 'call_1'",
            ),
        ],
    ),
    (
        "finding's call",
        lambda d: _session(d)["findings"][0].update(tool_call=8),
        [
            ((*_AT, "findings", 0, "tool_call"), "no such tool call in this session"),
            (
                (*_AT, "findings", 0, "provenance", "tool_call_id"),
                "the tool call's call_id is None",
            ),
        ],
    ),
    (
        "finding's history",
        lambda d: _session(d)["findings"][0]["history"][0]["after"].update(superseded_by=99),
        [
            (
                (*_AT, "findings", 0, "history", 0, "after", "superseded_by"),
                "no such memory in the document",
            )
        ],
    ),
    (
        "call's finding",
        lambda d: _session(d)["turns"][0]["calls"][0].update(finding=12),
        [((*_AT, "turns", 0, "calls", 0, "finding"), "no such finding in this session")],
    ),
    (
        "item key twice",
        lambda d: _session(d)["context_items"].append(_session(d)["context_items"][0]),
        [((*_AT, "context_items", 1, "key"), "context item keys are unique")],
    ),
    (
        "item's history",
        lambda d: _session(d)["context_items"][0]["history"][1]["before"].update(superseded_by=99),
        [
            (
                (*_AT, "context_items", 0, "history", 1, "before", "superseded_by"),
                "no such memory in the document",
            )
        ],
    ),
    (
        "subtask id twice",
        lambda d: _session(d)["subtasks"][1].update(id=3, dependencies=[3, 3]),
        [
            ((*_AT, "subtasks"), "subtask ids are unique"),
            ((*_AT, "subtasks", 1, "dependencies"), "a dependency is named once"),
        ],
    ),
    (
        "unknown dependency, twice",
        lambda d: _session(d)["subtasks"][1].update(dependencies=[5, 5]),
        [((*_AT, "subtasks", 1, "dependencies"), "no such subtask in this session")],
    ),
]


@pytest.mark.parametrize(
    "name, change, problems", SESSION_CHECKS, ids=[c[0] for c in SESSION_CHECKS]
)
def test_each_check_of_a_session_says_where_and_why(name, change, problems):
    document = copy.deepcopy(COMPLETE_DOCUMENT)
    assert export.check_document(document, ["imported"]) == []
    change(document)
    assert export.check_document(document, ["imported"]) == problems


def test_other_refusals(api, other_api, rich, settings):
    document = exported(api, "s")
    state = rows()
    two = {**document, "sessions": document["sessions"] * 2}
    response = ok(other_api.post(f"{BASE}/import?session=x", two), 422)
    assert _locs(response) == [["query", "session"]]
    problems = ok(other_api.post(f"{BASE}/import", two), 422).json()["detail"]
    assert {
        "loc": ["body", "payload", "sessions", 1, "key"],
        "msg": "session 's' is in the document twice",
        "type": "value_error",
    } in problems
    assert ok(other_api.post(f"{BASE}/import?session=a%00b", document), 422)
    assert ok(other_api.post(f"{BASE}/import?colour=red", document), 422)
    assert ok(other_api.post(f"{BASE}/import", "[1, 2"), 400)
    settings.MEMORYAPP_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    assert (
        "larger than the limit"
        in ok(other_api.post(f"{BASE}/import", document), 413).json()["detail"]
    )
    assert rows() == state
    assert ok(api.get(f"{BASE}/agent/export?colour=red"), 422)


# --- bounds: queries, shapes, the loader ------------------------------------------------------


def test_exporting_a_session_costs_the_same_queries_however_large_it_is(
    api, django_capture_on_commit_callbacks
):
    def cost(key: str, turns: int) -> int:
        for i in range(turns):
            with django_capture_on_commit_callbacks(execute=True):
                ok(
                    api.post(
                        f"{BASE}/sessions/{key}/turns",
                        {
                            "messages": [{"role": "user", "content": f"step {i}"}],
                            "tool_calls": [{"tool": "ls", "query": f"-{i}", "output": "a"}],
                        },
                    ),
                    201,
                )
            ok(api.post(f"{BASE}/memories", {"content": f"fact {key} {i}", "session": key}), 201)
            # And one the client wrote, with its record and tags.
            record = {"id": f"{key}-{i}", "text": f"record {key} {i}", "session_id": key}
            ok(ams(api, "POST", "/long-term-memory/", {"memories": [{**record, "topics": ["t"]}]}))
        with CaptureQueriesContext(connection) as queries:
            document = exported(api, key)
        assert sum("ams" in m for m in document["sessions"][0]["memories"]) == turns
        return len(queries)

    assert cost("small", 3) == cost("large", 6)


def test_an_agent_export_reads_each_session_in_the_same_queries(api):
    def cost() -> int:
        with CaptureQueriesContext(connection) as queries:
            exported(api)
        return len(queries)

    counts = []
    for i in range(3):
        ok(api.post(f"{BASE}/sessions/s{i}/turns", turn(("user", "hi"))), 201)
        counts.append(cost())
    assert counts[2] - counts[1] == counts[1] - counts[0]


EXTRA = {
    export_api.ExportSession: (
        schemas.SessionOut,
        {"evidence", "turns", "messages", "findings", "context_items", "subtasks", "memories"},
    ),
    export_api.ExportTotals: (schemas.TotalsOut, set()),
    export_api.ExportTurn: (schemas.TurnMetaOut, {"calls", "extraction"}),
    export_api.ExportMessage: (schemas.HistoryMessageOut, set()),
    export_api.ExportFinding: (
        schemas.FindingOut,
        {"identity", "created_at", "tool_call", "history"},
    ),
    export_api.ExportProvenance: (schemas.ProvenanceOut, set()),
    export_api.ExportContextItem: (schemas.ContextItemOut, {"created_at", "evidence", "history"}),
    export_api.ExportSubtask: (schemas.SubtaskOut, {"created_at", "updated_at"}),
    export_api.ExportMemory: (
        schemas.MemoryDetail,
        {"last_accessed_at", "access_count", "history", "ams", "origin"},
    ),
    export_api.ExportMemoryEvent: (schemas.MemoryEventOut, set()),
    export_api.ExportAgent: (schemas.AgentOut, set()),
}
# The objects of the document whose every declared field a rich session's export writes
# at least once; these fields are ones it may leave out and the rich session does not hold.
NEVER_IN_THE_RICH_EXPORT = {
    # Kept once a command writes files or a tracker lists its issues (test_extraction.py).
    export_api.ExportEvidence: {"writes", "rewritten_all", "issues"},
}


def _fields_written(model: BaseModel, seen: dict[type, set[str]]) -> None:
    seen.setdefault(type(model), set()).update(model.model_fields_set)
    pending = [getattr(model, name) for name in model.model_fields_set]
    while pending:
        value = pending.pop()
        if isinstance(value, BaseModel):
            _fields_written(value, seen)
        elif isinstance(value, list | tuple):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.values())


def test_an_export_writes_every_field_its_schema_declares(api, rich):
    """The schema (memoryapp/api/export.py) is the document's one definition: what the
    core writes is checked against it (nothing it does not declare: `exported` validates
    each document), and here that nothing it declares goes unwritten."""
    record = {"id": "rec-1", "text": "The API is versioned", "session_id": "s", "topics": ["api"]}
    ok(api.put(f"{BASE}/sessions/s/context-items/branch", {"value": "dev"}))
    ok(ams(api, "POST", "/long-term-memory/", {"memories": [record]}))
    imported = Memory.objects.filter(session__key="s").exclude(content=record["text"]).first()
    Origin.objects.create(
        agent=imported.agent, memory=imported, system="mem0", source_id="m-1", detail={"a": 1}
    )
    seen: dict[type, set[str]] = {}
    _fields_written(export_api.ExportDocument.model_validate(exported(api, "s")), seen)
    unwritten = {schema: set(schema.model_fields) - fields for schema, fields in seen.items()}
    assert {s: f for s, f in unwritten.items() if f} == NEVER_IN_THE_RICH_EXPORT
    assert export_api.ExportAmsRecord in seen and export_api.ExportEvidence in seen
    assert export_api.ExportOrigin in seen


def test_the_ams_record_and_the_origin_are_sections_of_a_memorys_export():
    assert [s.name for s in export.MEMORY_SECTIONS] == ["origin", "ams"]


def test_the_loader_recognises_an_export_and_leaves_it_whole(api, rich, tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(exported(api, "s"), indent=2))
    assert detect_format(path) == EXPORT
    with pytest.raises(ExportFile, match="imported whole"):
        load_transcript(path)
    found = scan_path(tmp_path)
    assert (found.exports, found.sessions, found.failed, found.skipped) == ([path], [], [], [])
    assert scan_path(path).exports == [path]
