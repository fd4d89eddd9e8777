"""mem0's memory in and out (memoryapp.core.formats.mem0 through memoryapp.core.moving), on
fixtures mem0ai 2.2.1 wrote itself (tests/fixtures/mem0/SOURCE.txt): two users' get_all
answers and its SQLite history database with adds, updates and deletes."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from memoryapp.core.formats import mem0
from memoryapp.core.models import Memory, MemoryEvent, Origin
from memoryapp.core.moving import SourceError, move_in

FIXTURES = Path(__file__).parent / "fixtures" / "mem0"
FILES = ["get_all_alice.json", "get_all_bob.json"]


def _files(names=FILES) -> list[tuple[bytes, str]]:
    return [((FIXTURES / n).read_bytes(), n) for n in names]


def _plan():
    return mem0.read(_files(), str(FIXTURES / "history.db"))


def _source_items() -> dict[str, dict]:
    items = {}
    for name in FILES:
        for item in json.loads((FIXTURES / name).read_text())["results"]:
            items[item["id"]] = item
    return items


def _history() -> dict[str, list[dict]]:
    return json.loads((FIXTURES / "history.json").read_text())["history"]


def test_a_dry_run_says_what_would_be_created_and_writes_nothing(agent):
    report = move_in(agent, _plan(), dry_run=True, actor="user:staff")
    assert not Memory.objects.filter(agent=agent).exists()
    live = _source_items()
    deleted = [i for i, h in _history().items() if h[-1]["event"] == "DELETE"]
    created = [line.source_id for line in report.lines if line.action == "create"]
    assert sorted(created) == sorted([*live, *deleted])
    assert report.summary == f"{len(live) + len(deleted)} memories would be created"


def test_every_memory_comes_in_with_its_history_and_origin(agent):
    move_in(agent, _plan(), dry_run=False, actor="user:staff")
    live = _source_items()
    active = Memory.objects.filter(agent=agent, status=Memory.Status.ACTIVE)
    assert sorted(m.content for m in active) == sorted(i["memory"] for i in live.values())
    for source_id, events in _history().items():
        origin = Origin.objects.get(agent=agent, system="mem0", source_id=source_id)
        memory = origin.memory
        texts = [e["new_memory"] for e in events if e["new_memory"]]
        assert memory.content == texts[-1]
        if events[-1]["event"] == "DELETE":
            assert memory.status == Memory.Status.ARCHIVED  # kept, not lost
        else:
            assert memory.status == Memory.Status.ACTIVE
            assert origin.detail["user_id"] == live[source_id]["user_id"]
        # Every text mem0 had is in memoryapp's history of the chain, in order.
        chain = list(Memory.objects.filter(agent=agent, content__in=texts).values_list("pk"))
        seen = MemoryEvent.objects.filter(
            target_kind="memory", target_id__in=[pk for (pk,) in chain], action="add"
        ).order_by("created_at", "pk")
        assert [e.after["content"] for e in seen] == list(dict.fromkeys(texts))
    updated = next(i for i, h in _history().items() if any(e["event"] == "UPDATE" for e in h))
    first = _history()[updated][0]
    event = MemoryEvent.objects.filter(
        target_kind="memory", after__content=first["new_memory"], action="add"
    ).get()
    assert event.created_at.isoformat() == first["updated_at"]  # mem0's own time
    assert event.actor == f"mem0:{first['actor_id'] or first['role']}"


def test_importing_again_creates_nothing(agent):
    move_in(agent, _plan(), dry_run=False, actor="user:staff")
    count = Memory.objects.filter(agent=agent).count()
    again = move_in(agent, _plan(), dry_run=False, actor="user:staff")
    assert Memory.objects.filter(agent=agent).count() == count
    assert {line.action for line in again.lines} == {"skip"}
    assert all(line.why.startswith("already imported: memory #") for line in again.lines)


def test_a_memory_saying_what_one_here_says_is_imported_beside_it(agent):
    first = next(iter(_source_items().values()))
    Memory.remember(agent, first["memory"], memory_type="fact", confidence=0.9, actor="agent:x")
    report = move_in(agent, _plan(), dry_run=False, actor="user:staff")
    line = next(line for line in report.lines if line.source_id == first["id"])
    assert line.action == "create" and "not merged" in line.why
    assert Memory.objects.filter(agent=agent, content=first["memory"]).count() == 2


def test_the_export_gives_back_what_mem0_answered(agent):
    """The round trip compared with the source itself: the export of the imported memory
    is mem0's get_all items, field for field (ids, hashes, metadata, times, user ids)."""
    move_in(agent, _plan(), dry_run=False, actor="user:staff")
    exported = {item["id"]: item for item in mem0.export(agent)["results"]}
    assert exported == _source_items()


def test_an_edit_here_goes_out_under_mem0_s_id_with_a_new_hash(agent):
    move_in(agent, _plan(), dry_run=False, actor="user:staff")
    item = next(iter(_source_items().values()))
    memory = Memory.objects.get(agent=agent, content=item["memory"], status="active")
    memory.revise(actor="user:staff", content="Eats fish on Fridays")
    out = {i["id"]: i for i in mem0.export(agent)["results"]}[item["id"]]
    assert out["memory"] == "Eats fish on Fridays"
    assert out["hash"] != item["hash"] and out["updated_at"] != item["updated_at"]
    assert out["created_at"] == item["created_at"]


def test_a_memory_written_here_goes_out_with_a_stable_id(agent):
    Memory.remember(agent, "Deploys on Tuesdays", memory_type="decision", confidence=0.7,
                    actor="agent:x")  # fmt: skip
    first, second = mem0.export(agent)["results"], mem0.export(agent)["results"]
    assert first == second and first[0]["metadata"] == {
        "memory_type": "decision",
        "confidence": 0.7,
    }


@pytest.mark.parametrize(
    "text, where",
    [
        ('{"results": [{"id": "a", "memory": "x"}, {"id": "b"', "get_all.json: line 1"),
        ('{"results": [{"id": "a", "memory": ""}]}', "get_all.json: results[0].memory"),
        ('{"results": [{"id": "a", "memory": "x", "created_at": "soon"}]}', "created_at"),
        ('{"results": {"id": "a"}}', "results"),
        ('{"results": [{"id": "a", "memory": "x", "metadata": [1]}]}', "results[0].metadata"),
    ],
)
def test_a_malformed_file_names_where_it_broke_and_writes_nothing(agent, text, where):
    with pytest.raises(SourceError) as caught:
        mem0.read([(text.encode(), "get_all.json")])
    assert where in str(caught.value)
    assert not Memory.objects.filter(agent=agent).exists()


def test_a_history_file_that_is_not_mem0_s_is_refused(tmp_path):
    bad = tmp_path / "history.db"
    sqlite3.connect(bad).execute("CREATE TABLE history (id TEXT)").connection.commit()
    with pytest.raises(SourceError, match="not mem0's history table"):
        mem0.read(_files(), str(bad))
    broken = tmp_path / "copy.db"
    shutil.copy(FIXTURES / "history.db", broken)
    db = sqlite3.connect(broken)
    db.execute("UPDATE history SET event = 'MERGE' WHERE rowid = 2")
    db.commit()
    with pytest.raises(SourceError, match=r"history row \d+ .*event"):
        mem0.read(_files(), str(broken))


def test_an_exported_agent_keeps_where_its_memory_came_from(agent):
    """memoryapp's own export carries each memory's origin: importing the agent into
    another, then the mem0 files again, brings nothing twice."""
    from memoryapp.core import export
    from memoryapp.core.models import Agent

    move_in(agent, _plan(), dry_run=False, actor="user:staff")
    document = json.loads("".join(export.stream_agent(agent)))
    other = Agent.objects.create(name="elsewhere")
    export.import_document(other, document)
    fields = ("system", "source_id", "detail", "imported_at", "memory__content")
    theirs = list(Origin.objects.filter(agent=agent).order_by("source_id").values(*fields))
    ours = list(Origin.objects.filter(agent=other).order_by("source_id").values(*fields))
    assert ours == theirs and len(ours) == 9
    again = move_in(other, _plan(), dry_run=False, actor="user:staff")
    assert {line.action for line in again.lines} == {"skip"}
    with pytest.raises(export.ImportConflict) as caught:
        export.import_document(other, document)
    assert "mem0:191bbc0a-9f7a-47e1-9b32-445568a86732" in caught.value.records


def test_a_history_that_starts_with_an_update_keeps_the_text_before_it(agent, tmp_path):
    copy = tmp_path / "history.db"
    shutil.copy(FIXTURES / "history.db", copy)
    db = sqlite3.connect(copy)
    memory_id, old = db.execute(
        "SELECT memory_id, old_memory FROM history WHERE event = 'UPDATE' AND old_memory "
        "!= new_memory ORDER BY updated_at LIMIT 1"
    ).fetchone()
    db.execute("DELETE FROM history WHERE memory_id = ? AND event = 'ADD'", (memory_id,))
    db.commit()
    move_in(agent, mem0.read(_files(), str(copy)), dry_run=False, actor="user:staff")
    added = MemoryEvent.objects.filter(target_kind="memory", action="add", after__content=old)
    assert added.count() == 1  # the text before the first update recorded, not lost


@pytest.mark.parametrize(
    "item, where",
    [
        ('{"id": "a", "memory": "x", "metadata": {"n": NaN}}', "not JSON"),
        ('{"id": "a", "memory": "x", "created_at": "0001-01-01T00:00:00+05:00"}', "before 1970"),
        ('{"id": "a", "memory": "x", "created_at": "2999-01-01T00:00:00+00:00"}', "future"),
        ('{"id": "a", "memory": "x", "expiration_date": "9999-12-31"}', "outside 1970"),
        ('{"id": ["a"], "memory": "x"}', "results[0].id"),
    ],
)
def test_values_out_of_bounds_are_refused_before_anything_is_written(agent, item, where):
    with pytest.raises(SourceError) as caught:
        mem0.read([(f'{{"results": [{item}]}}'.encode(), "get_all.json")])
    assert where in str(caught.value)


def test_nesting_past_what_a_parser_takes_is_refused(agent):
    with pytest.raises(SourceError, match="not JSON"):
        mem0.read([(b"[" * 100_000, "get_all.json")])


def test_a_history_that_is_a_view_is_refused(tmp_path):
    view = tmp_path / "history.db"
    db = sqlite3.connect(view)
    db.execute(
        "CREATE VIEW history AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
        "FROM c) SELECT x AS id, x AS memory_id, '' AS old_memory, 'a' AS new_memory, 'ADD' "
        "AS event, '' AS created_at, '' AS updated_at, 0 AS is_deleted, '' AS actor_id, "
        "'' AS role FROM c"
    )
    db.commit()
    with pytest.raises(SourceError, match="no table named history"):
        mem0.read(_files(), str(view))
