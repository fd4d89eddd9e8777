"""Letta Agent Files in (memoryapp.core.formats.letta through memoryapp.core.moving), on
the format's published examples (tests/fixtures/letta/SOURCE.txt): the current format,
one encoded as a JSON string, and the older one with `core_memory`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memoryapp.core.formats import letta
from memoryapp.core.models import Memory, Message, Origin, Session
from memoryapp.core.moving import SourceError, move_in

FIXTURES = Path(__file__).parent / "fixtures" / "letta"


def _read(name: str):
    return letta.read((FIXTURES / name).read_bytes(), name)


def _source(name: str) -> dict:
    document = json.loads((FIXTURES / name).read_text())
    return json.loads(document) if isinstance(document, str) else document


def test_an_agent_comes_in_as_a_session_with_its_blocks_as_memories(agent, in_process_tasks):
    source = _source("loop.af")
    report = move_in(agent, _read("loop.af"), dry_run=False, actor="user:staff")
    assert report.summary == "1 session and 9 memories created"
    session = Session.objects.get(agent=agent)
    messages = list(Message.objects.filter(session=session).order_by("seq"))
    said = source["agents"][0]["messages"]
    assert [m.role for m in messages] == [m["role"] for m in said]
    assert messages[1].tool_calls == said[1]["tool_calls"]  # the call to send_message
    assert messages[2].tool_call_id == said[2]["tool_call_id"]
    assert messages[2].content == said[2]["content"][0]["text"]
    assert messages[0].created_at.isoformat() == said[0]["created_at"]
    assert messages[0].client_id == said[0]["id"]
    blocks = {b["id"]: b for b in source["blocks"]}
    for block_id in source["agents"][0]["block_ids"]:
        block = blocks[block_id]
        origin = Origin.objects.get(
            agent=agent, system="letta", source_id__endswith=f"/{block['label']}"
        )
        assert origin.memory.content == block["value"]
        assert origin.detail["limit"] == block["limit"]
        assert origin.memory.status == Memory.Status.ACTIVE
    tools = session.metadata["letta"]["tools"]
    assert sorted(t["name"] for t in tools) == sorted(
        t["name"] for t in source["tools"] if t["id"] in source["agents"][0]["tool_ids"]
    )
    assert session.metadata["letta"]["model"] == source["agents"][0]["llm_config"]["model"]


def test_a_file_encoded_twice_and_the_older_format_are_read(agent):
    service = _read("customer_service.af")
    assert [m.detail["block"] for m in service.memories] == ["human", "persona"]
    assert {t["name"] for t in service.sessions[0].metadata["letta"]["tools"]} >= {"cancel_order"}
    old = _read("memgpt_agent_with_convo_v0.6.af")
    source = _source("memgpt_agent_with_convo_v0.6.af")
    assert [m.detail["block"] for m in old.memories] == [b["label"] for b in source["core_memory"]]
    assert len(old.sessions[0].messages) == len(source["messages"])
    # Letta's wrapper of a user message is unwrapped to what the person said.
    wrapped = next(
        m for m in source["messages"]
        if m["role"] == "user" and '"user_message"' in str(m["content"])
    )  # fmt: skip
    said = json.loads(wrapped["content"][0]["text"])["message"]
    assert said in [m.content for m in old.sessions[0].messages]


def test_importing_again_creates_nothing(agent):
    move_in(agent, _read("loop.af"), dry_run=False, actor="user:staff")
    again = move_in(agent, _read("loop.af"), dry_run=False, actor="user:staff")
    assert again.summary == "1 session and 9 memories skipped"
    assert Memory.objects.filter(agent=agent).count() == 9
    assert Message.objects.filter(session__agent=agent).count() == 3


def test_two_agents_of_one_name_are_two_sessions(agent):
    move_in(agent, _read("memgpt_agent_with_convo.af"), dry_run=False, actor="user:staff")
    move_in(agent, _read("memgpt_agent_with_convo_v0.6.af"), dry_run=False, actor="user:staff")
    assert Session.objects.filter(agent=agent).count() == 2


def test_a_dry_run_writes_nothing(agent):
    report = move_in(agent, _read("loop.af"), dry_run=True, actor="user:staff")
    assert report.summary == "1 session and 9 memories would be created"
    assert not Session.objects.filter(agent=agent).exists()
    assert not Memory.objects.filter(agent=agent).exists()


def _broken(change) -> bytes:
    document = _source("loop.af")
    change(document)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    "data, where",
    [
        ((FIXTURES / "loop.af").read_bytes()[:5000], "agent file: line "),
        (b"[1, 2]", "$"),
        (b'{"name": "x"}', "$"),
        (
            _broken(lambda d: d["agents"][0]["block_ids"].append("block-99")),
            "agents[0].block_ids[9]",
        ),
        (
            _broken(lambda d: d["agents"][0]["messages"][1].update(role="robot")),
            "agents[0].messages[1].role",
        ),
        (_broken(lambda d: d["blocks"][0].update(value="x" * 5000)), "blocks[0].value"),
    ],
)
def test_a_malformed_file_names_where_it_broke(agent, data, where):
    with pytest.raises(SourceError) as caught:
        letta.read(data, "loop.af")
    assert str(caught.value).startswith(where)
    assert not Session.objects.filter(agent=agent).exists()


def test_the_sessions_page_says_where_it_came_from(agent):
    from django.urls import reverse

    from tests.conftest import logged_in_member

    move_in(agent, _read("loop.af"), dry_run=False, actor="user:staff")
    session = Session.objects.get(agent=agent)
    assert session.metadata["imported"]["source"] == "loop.af"
    page = logged_in_member("viewer", agent, "vera").get(
        reverse("dashboard:session", args=[agent.name, session.key])
    )
    assert "Imported from Letta (loop.af) at " in page.content.decode()


def test_the_same_id_twice_in_a_file_is_imported_once(agent):
    def twice(d):
        d["blocks"].append({**d["blocks"][0], "id": "block-copy"})
        d["agents"][0]["block_ids"].append("block-copy")
        d["agents"].append(dict(d["agents"][0]))

    report = move_in(agent, letta.read(_broken(twice), "loop.af"), dry_run=False, actor="user:x")
    repeated = [line for line in report.lines if line.why.startswith("repeated in the source")]
    assert {line.kind for line in repeated} == {"session", "memory"}
    assert Session.objects.filter(agent=agent).count() == 1
    assert Memory.objects.filter(agent=agent).count() == 9


def test_values_of_the_wrong_type_are_refused(agent):
    for change, where in [
        (lambda d: d["agents"][0]["messages"][0].update(role=["user"]), "messages[0].role"),
        (lambda d: d["agents"][0]["block_ids"].append(["x"]), "block_ids[9]"),
        (lambda d: d["blocks"][0].update(label="x" * 101), "blocks[0].label"),
        (lambda d: d["agents"][0]["messages"][0].update(created_at="0001-01-01T00:00:00"), "1970"),
    ]:
        with pytest.raises(SourceError, match=re.escape(where)):
            letta.read(_broken(change), "loop.af")


def test_an_empty_block_is_a_line_of_the_report(agent):
    plan = letta.read(_broken(lambda d: d["blocks"][0].update(value="")), "loop.af")
    report = move_in(agent, plan, dry_run=True, actor="user:x")
    assert any(line.why.startswith("an empty block") for line in report.lines)
    assert report.count("memory", "create") == 8
