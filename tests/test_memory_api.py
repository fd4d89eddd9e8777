"""Working context, findings, long-term memories, memory tools and search over the API."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from memoryapp.core.limits import MAX_FACT_CHARS
from memoryapp.core.models import ContextItem, Finding, Memory, MemoryEvent, Session
from memoryapp.lib import memory_tools
from tests.conftest import turn

pytestmark = pytest.mark.django_db

BASE = "/api/v1"


def events(kind):
    return list(
        MemoryEvent.objects.filter(target_kind=kind).order_by("id").values_list("action", "actor")
    )


# --- working context -------------------------------------------------------------------


def test_context_items_put_get_delete_with_history(api):
    api.put(BASE + "/sessions/s1", {})
    url = BASE + "/sessions/s1/context-items/framework"
    first = api.put(url, {"value": "Phoenix 1.7", "confidence": 0.9})
    assert first.status_code == 200
    assert first.json()["source"] == "explicit"
    api.put(url, {"value": {"name": "Phoenix", "version": "1.7"}, "confidence": 0.95})
    items = api.get(BASE + "/sessions/s1/context-items").json()["items"]
    assert items == [
        {
            "key": "framework",
            "value": {"name": "Phoenix", "version": "1.7"},
            "source": "explicit",
            "confidence": 0.95,
            "updated_at": items[0]["updated_at"],
        }
    ]
    assert api.delete(url).status_code == 204
    assert api.delete(url).status_code == 404
    assert events("context_item") == [
        ("add", "agent:coder"),
        ("update", "agent:coder"),
        ("delete", "agent:coder"),
    ]
    update = MemoryEvent.objects.get(action="update")
    assert update.before["value"] == "Phoenix 1.7"
    assert update.after["value"] == {"name": "Phoenix", "version": "1.7"}


def test_inferred_never_overwrites_explicit_or_manual(api):
    api.put(BASE + "/sessions/s1", {})
    url = BASE + "/sessions/s1/context-items/active_file"
    api.put(url, {"value": "lib/a.ex", "confidence": 0.5})
    response = api.put(url, {"value": "lib/b.ex", "source": "inferred", "confidence": 0.6})
    assert response.status_code == 409
    # Not even with a higher confidence: a stated value stands until someone states another.
    response = api.put(url, {"value": "lib/c.ex", "source": "inferred", "confidence": 0.95})
    assert response.status_code == 409
    assert ContextItem.objects.get().value == "lib/a.ex"
    item = ContextItem.objects.get()
    item.source = "inferred"
    item.save()
    # Inferred replaces inferred, whatever the confidence.
    assert (
        api.put(url, {"value": "lib/c.ex", "source": "inferred", "confidence": 0.95}).status_code
        == 200
    )
    assert (
        api.put(url, {"value": "lib/d.ex", "source": "inferred", "confidence": 0.1}).status_code
        == 200
    )
    item = ContextItem.objects.get()
    item.source, item.confidence = "manual", 0.7
    item.save()
    assert (
        api.put(url, {"value": "lib/e.ex", "source": "inferred", "confidence": 0.6}).status_code
        == 409
    )
    assert (
        api.put(url, {"value": "lib/f.ex", "source": "explicit", "confidence": 0.5}).status_code
        == 200
    )


@pytest.mark.parametrize(
    "body",
    [
        {"value": "x", "source": "manual"},  # people's edits come from the dashboard
        {"value": "x", "confidence": 1.5},
        {"value": "x", "confidence": "high"},
        {"confidence": 0.5},
    ],
)
def test_bad_context_item_is_422_and_changes_nothing(api, body):
    api.put(BASE + "/sessions/s1", {})
    assert api.put(BASE + "/sessions/s1/context-items/k", body).status_code == 422
    assert ContextItem.objects.count() == 0 and MemoryEvent.objects.count() == 0


def test_context_items_of_another_agent_are_404(api, other_api):
    other_api.put(BASE + "/sessions/theirs", {})
    assert api.put(BASE + "/sessions/theirs/context-items/k", {"value": 1}).status_code == 404
    assert api.get(BASE + "/sessions/theirs/context-items").status_code == 404
    assert ContextItem.objects.count() == 0


# --- findings --------------------------------------------------------------------------


def test_the_same_call_again_updates_its_finding_and_another_call_gets_its_own(api):
    api.put(BASE + "/sessions/s1", {})
    url = BASE + "/sessions/s1/findings"
    first = api.post(
        url, {"tool": "fs:search", "query": "VectorStore", "fact": "3 files", "step": 1}
    )
    assert first.status_code == 201
    again = api.post(
        url, {"tool": "fs:search", "query": "VectorStore", "fact": "4 files", "step": 3}
    )
    assert again.status_code == 200
    assert again.json()["created"] is False
    finding = Finding.objects.get()
    assert (finding.fact, finding.step) == ("4 files", 3)
    assert events("finding") == [("add", "agent:coder"), ("update", "agent:coder")]
    # A look-alike search is another call: it never overwrites the first one's fact.
    wider = api.post(url, {"tool": "fs:search", "query": "VectorStore interface", "fact": "1 file"})
    assert wider.status_code == 201
    other = api.post(url, {"tool": "fs:read", "query": "VectorStore", "fact": "file text"})
    assert other.status_code == 201  # another kind is another finding
    listed = api.get(url).json()["items"]
    assert [f["fact"] for f in listed] == ["file text", "1 file", "4 files"]
    assert [f["kind"] for f in listed] == ["read", "search", "search"]


def test_only_natural_language_questions_match_near_duplicates(api):
    api.put(BASE + "/sessions/s1", {})
    url = BASE + "/sessions/s1/findings"
    api.post(url, {"tool": "rag_query", "query": "how does auth work", "fact": "JWT"})
    again = api.post(url, {"tool": "rag_query", "query": "how does the auth work", "fact": "JWT!"})
    assert again.status_code == 200
    check = BASE + "/sessions/s1/findings/check"
    assert api.get(check, {"tool": "rag_query", "query": "How does auth work?"}).json()["known"]
    assert not api.get(check, {"tool": "rag_query", "query": "payment flow"}).json()["known"]


@pytest.mark.parametrize(
    "tool,query,known",
    [
        ("read_file", "./src/a.ts", True),
        ("read_file", "src/a.ts", True),
        ("read_file", "'src/a.ts'", True),
        ("read_file", "src//a.ts", True),
        ("Read", '{"file_path": "src/a.ts"}', True),  # the same read, as JSON arguments
        ("read_file", "SRC/A.TS", False),  # paths are case-sensitive
        ("read_file", "src/b.ts", False),
        ("read_file", '{"file_path": "src/a.ts", "offset": 10, "limit": 5}', False),  # a window
        ("grep", "src/a.ts", False),  # a search for the text is not a read of the file
    ],
)
def test_check_answers_whether_already_known(api, tool, query, known):
    api.put(BASE + "/sessions/s1", {})
    api.post(
        BASE + "/sessions/s1/findings",
        {"tool": "read_file", "query": "src/a.ts", "fact": "exports A"},
    )
    body = api.get(BASE + "/sessions/s1/findings/check", {"tool": tool, "query": query}).json()
    assert body["known"] is known
    assert body["stale"] is False
    assert (body["finding"]["fact"] == "exports A") if known else body["finding"] is None


def test_check_on_a_session_that_does_not_exist_yet_is_not_known(api):
    response = api.get(BASE + "/sessions/new-one/findings/check", {"tool": "Read", "query": "a"})
    assert response.status_code == 200
    assert response.json() == {"known": False, "stale": False, "finding": None, "related": []}
    assert not Session.objects.exists()


def test_check_names_related_findings_with_why_and_keeps_known_exact(api):
    """The design's example: `fs:search "VectorStore interface"` after `fs:search
    "VectorStore"` is not known, and names the first search."""
    api.put(BASE + "/sessions/s1", {})
    url, check = BASE + "/sessions/s1/findings", BASE + "/sessions/s1/findings/check"
    api.post(url, {"tool": "fs:search", "query": "VectorStore", "fact": "Found 3 files"})
    api.post(url, {"tool": "Read", "query": '{"file_path": "/p/src/store.ts", "offset": 1, '
                   '"limit": 50}', "fact": "lines 1–50 of 300"})  # fmt: skip
    api.post(url, {"tool": "fs:search", "query": "payment webhook", "fact": "Found 1 file"})
    body = api.get(check, {"tool": "fs:search", "query": '"VectorStore interface"'}).json()
    assert body["known"] is False and body["finding"] is None
    assert [(r["finding"]["fact"], r["why"]) for r in body["related"]] == [
        ("Found 3 files", "an earlier search for VectorStore, which this one's pattern contains")
    ]
    read = api.get(check, {"tool": "Read", "query": '{"file_path": "/p/src/store.ts", '
                           '"offset": 200, "limit": 50}'}).json()  # fmt: skip
    assert read["known"] is False
    assert [r["why"] for r in read["related"]] == [
        "the same file, read as /p/src/store.ts (offset 1, limit 50)"
    ]
    # The same call exactly: known, and not related to itself.
    same = api.get(check, {"tool": "fs:search", "query": "VectorStore"}).json()
    assert same["known"] is True and same["related"] == []
    unrelated = api.get(check, {"tool": "fs:search", "query": "LoginForm"}).json()
    assert unrelated == {"known": False, "stale": False, "finding": None, "related": []}


def test_a_read_of_a_file_edited_since_is_stale_not_known(api):
    api.put(BASE + "/sessions/s1", {})
    url = BASE + "/sessions/s1/findings"
    check = BASE + "/sessions/s1/findings/check"
    read = {"tool": "Read", "query": '{"file_path": "/p/lib/a.ex"}', "fact": "defines A", "step": 2}
    api.post(url, read)
    assert api.get(check, {"tool": "Read", "query": "/p/lib/a.ex"}).json()["known"] is True
    edit = {"file_path": "/p/lib/a.ex", "old_string": "x", "new_string": "y"}
    api.post(url, {"tool": "Edit", "query": json.dumps(edit), "fact": "edited", "step": 3})
    body = api.get(check, {"tool": "Read", "query": "/p/lib/a.ex"}).json()
    assert (body["known"], body["stale"]) == (False, True)
    assert body["finding"]["fact"] == "defines A" and body["finding"]["stale"] is True
    # Another file's edit makes nothing stale; reading it again makes it fresh.
    other = {"file_path": "/p/lib/b.ex", "old_string": "x", "new_string": "y"}
    api.post(url, {"tool": "Edit", "query": json.dumps(other), "fact": "edited", "step": 4})
    api.post(url, {**read, "step": 5})
    assert api.get(check, {"tool": "Read", "query": "/p/lib/a.ex"}).json()["known"] is True


def test_bad_findings_are_422(api):
    api.put(BASE + "/sessions/s1", {})
    url = BASE + "/sessions/s1/findings"
    assert api.post(url, {"tool": "", "fact": "x"}).status_code == 422
    assert api.post(url, {"tool": "t", "fact": ""}).status_code == 422
    assert api.post(url, {"tool": "t", "fact": "x", "step": -1}).status_code == 422
    assert api.post(url, {"tool": "t", "fact": "x", "success": "yes"}).status_code == 422
    assert api.get(BASE + "/sessions/s1/findings/check").status_code == 422
    assert Finding.objects.count() == 0


# --- memories --------------------------------------------------------------------------


def test_the_same_fact_in_other_punctuation_strengthens_and_a_negation_does_not(api):
    url = BASE + "/memories"
    first = api.post(url, {"content": "The staging DB is read-only on Sundays", "confidence": 0.6})
    again = api.post(url, {"content": "Staging DB: read only on Sunday.", "confidence": 0.6})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["memory"]["id"] == first.json()["memory"]["id"]
    assert MemoryEvent.objects.filter(action="update").count() == 1  # with history
    negated = api.post(url, {"content": "The staging DB is not read-only on Sundays"})
    assert negated.status_code == 201 and Memory.objects.count() == 2


def test_remember_then_again_strengthens(api):
    first = api.post(
        BASE + "/memories",
        {"content": "Use pytest.", "memory_type": "convention", "confidence": 0.6},
    )
    assert first.status_code == 201
    again = api.post(
        BASE + "/memories",
        {"content": "use  PYTEST", "memory_type": "convention", "confidence": 0.6},
    )
    assert again.status_code == 200
    assert again.json()["memory"]["confidence"] == pytest.approx(0.84)
    assert Memory.objects.count() == 1
    # Another type is another memory.
    assert (
        api.post(
            BASE + "/memories", {"content": "Use pytest", "memory_type": "decision"}
        ).status_code
        == 201
    )


def test_remember_with_a_session_links_it(api, other_api):
    api.put(BASE + "/sessions/s1", {})
    response = api.post(BASE + "/memories", {"content": "x", "session": "s1"})
    assert Memory.objects.get().session.key == "s1"
    other_api.put(BASE + "/sessions/theirs", {})
    assert api.post(BASE + "/memories", {"content": "y", "session": "theirs"}).status_code == 404
    assert response.status_code == 201


def test_recall_ranks_and_filters(api, agent):
    for content, kind, confidence in [
        ("Deploys go through the staging cluster first", "convention", 0.9),
        ("The staging cluster is called blue", "fact", 0.6),
        ("Lunch is at noon", "fact", 0.99),
    ]:
        Memory.objects.create(agent=agent, content=content, memory_type=kind, confidence=confidence)
    ranked = api.get(BASE + "/memories", {"query": "staging cluster"}).json()["items"]
    assert {m["content"] for m in ranked} == {
        "Deploys go through the staging cluster first",
        "The staging cluster is called blue",
    }
    by_type = api.get(BASE + "/memories", {"query": "staging", "memory_type": "fact"}).json()[
        "items"
    ]
    assert [m["content"] for m in by_type] == ["The staging cluster is called blue"]
    confident = api.get(BASE + "/memories", {"min_confidence": 0.8}).json()["items"]
    assert [m["confidence"] for m in confident] == [0.99, 0.9]
    page = api.get(BASE + "/memories", {"limit": 2}).json()
    rest = api.get(BASE + "/memories", {"limit": 2, "cursor": page["next_cursor"]}).json()
    assert len(page["items"]) == 2 and len(rest["items"]) == 1 and rest["next_cursor"] is None
    assert api.get(BASE + "/memories", {"limit": 0}).status_code == 422
    assert api.get(BASE + "/memories", {"status": "gone"}).status_code == 422


def test_stop_words_alone_recall_nothing_and_never_match(api, agent):
    Memory.objects.create(agent=agent, content="The staging cluster is where we deploy first")
    Memory.objects.create(agent=agent, content="I prefer tabs, and we lint on commit")
    for query in ("the", "I we", "what is the", "how do I"):
        assert api.get(BASE + "/memories", {"query": query}).json()["items"] == [], query
    # With a content word, only the memory that holds it: "the" matches nothing alone.
    found = api.get(BASE + "/memories", {"query": "the staging"}).json()["items"]
    assert [m["content"] for m in found] == ["The staging cluster is where we deploy first"]


def test_replacing_a_fact_supersedes_it_with_a_link(api):
    old_id = api.post(BASE + "/memories", {"content": "API is v1", "confidence": 0.7}).json()[
        "memory"
    ]["id"]
    response = api.patch(BASE + f"/memories/{old_id}", {"content": "API is v2"})
    assert response.status_code == 200
    new = response.json()
    assert new["content"] == "API is v2" and new["supersedes"] == old_id
    old = Memory.objects.get(pk=old_id)
    assert old.status == "superseded" and old.superseded_by_id == new["id"]
    assert api.get(BASE + f"/memories/{old_id}").json()["superseded_by"] == new["id"]
    assert [m["id"] for m in api.get(BASE + "/memories").json()["items"]] == [new["id"]]
    assert api.patch(BASE + f"/memories/{old_id}", {"confidence": 0.1}).status_code == 409


def test_changing_confidence_or_type_is_in_place(api):
    memory_id = api.post(BASE + "/memories", {"content": "x", "confidence": 0.7}).json()["memory"][
        "id"
    ]
    body = api.patch(
        BASE + f"/memories/{memory_id}", {"confidence": 0.2, "memory_type": "lesson"}
    ).json()
    assert body["id"] == memory_id and body["supersedes"] is None
    assert (body["confidence"], body["memory_type"]) == (0.2, "lesson")
    assert api.patch(BASE + f"/memories/{memory_id}", {"confidence": None}).status_code == 422
    assert api.patch(BASE + f"/memories/{memory_id}", {"confidence": 2}).status_code == 422


def test_forget_is_soft_and_restorable_with_full_history(api):
    memory_id = api.post(BASE + "/memories", {"content": "temp fact", "confidence": 0.9}).json()[
        "memory"
    ]["id"]
    assert api.delete(BASE + f"/memories/{memory_id}").status_code == 204
    assert Memory.objects.get().status == "archived"
    assert api.get(BASE + "/memories").json()["items"] == []
    archived = api.get(BASE + "/memories", {"status": "archived"}).json()["items"]
    assert [m["id"] for m in archived] == [memory_id]
    api.put(BASE + "/sessions/s1", {})
    assert api.get(BASE + "/sessions/s1/context").json()["long_term_memories"] == []
    restored = api.post(BASE + f"/memories/{memory_id}/restore")
    assert restored.json()["status"] == "active"
    history = api.get(BASE + f"/memories/{memory_id}/history").json()["items"]
    assert [(e["action"], e["actor"]) for e in history] == [
        ("add", "agent:coder"),
        ("delete", "agent:coder"),
        ("restore", "agent:coder"),
    ]
    assert (
        history[1]["before"]["status"] == "active" and history[1]["after"]["status"] == "archived"
    )


def test_another_agents_memory_is_404(api, other_api):
    theirs = other_api.post(BASE + "/memories", {"content": "secret"}).json()["memory"]["id"]
    assert api.get(BASE + f"/memories/{theirs}").status_code == 404
    assert api.patch(BASE + f"/memories/{theirs}", {"content": "mine now"}).status_code == 404
    assert api.delete(BASE + f"/memories/{theirs}").status_code == 404
    assert api.post(BASE + f"/memories/{theirs}/restore").status_code == 404
    assert api.get(BASE + f"/memories/{theirs}/history").status_code == 404
    assert api.get(BASE + "/memories", {"query": "secret"}).json()["items"] == []
    assert Memory.objects.get().content == "secret"


def test_memories_outlive_their_session(api):
    api.put(BASE + "/sessions/s1", {})
    api.post(BASE + "/memories", {"content": "kept", "session": "s1"})
    api.delete(BASE + "/sessions/s1")
    assert [m["content"] for m in api.get(BASE + "/memories").json()["items"]] == ["kept"]


# --- tools -----------------------------------------------------------------------------


@pytest.mark.parametrize("format", ["openai", "anthropic"])
def test_tool_definitions_are_the_lib_definitions(api, format):
    served = api.get(BASE + "/tools", {"format": format}).json()
    assert served == memory_tools.definitions(format)
    names = [t["function"]["name"] if format == "openai" else t["name"] for t in served]
    assert names == ["remember", "recall", "forget"]
    assert api.get(BASE + "/tools", {"format": "xml"}).status_code == 422


def test_tool_schemas_take_what_the_api_takes():
    remember = memory_tools.TOOLS[0]["parameters"]["properties"]["content"]
    assert remember["maxLength"] == MAX_FACT_CHARS


def test_tool_calls_remember_recall_forget(api):
    api.put(BASE + "/sessions/s1", {})

    def call(name, args):
        return api.post(BASE + "/tools/call", {"name": name, "arguments": args, "session": "s1"})

    remembered = call("remember", {"content": "The DB is Postgres 16", "confidence": 0.9}).json()
    assert remembered["ok"] and remembered["result"].startswith(
        "Remembered:\n- [fact] (high confidence) The DB is Postgres 16"
    )
    memory_id = remembered["memory"]["id"]
    assert f"[memory {memory_id}]" in remembered["result"]
    recalled = call("recall", {"query": "which postgres version"}).json()
    assert recalled["result"].startswith("1 memory:") and "Postgres 16" in recalled["result"]
    assert Memory.objects.get().access_count == 1
    assert "No memories match" in call("recall", {"query": "kubernetes"}).json()["result"]
    forgot = call("forget", {"memory_id": memory_id}).json()
    assert forgot["ok"] and "archived" in forgot["result"]
    assert call("forget", {"memory_id": memory_id}).json()["ok"] is False
    assert call("forget", {"memory_id": 999999}).json() == {
        "ok": False,
        "result": "No memory with id 999999.",
    }


@pytest.mark.parametrize(
    "body",
    [
        {"name": "delete_everything", "arguments": {}},
        {"name": "remember", "arguments": {}},
        {"name": "remember", "arguments": {"content": "x", "confidence": 7}},
        {"name": "remember", "arguments": {"content": "x", "extra": 1}},
        {"name": "recall", "arguments": {"query": "x", "limit": "5"}},
        {"name": "forget", "arguments": {"memory_id": "1"}},
    ],
)
def test_bad_tool_calls_are_422(api, body):
    assert api.post(BASE + "/tools/call", body).status_code == 422
    assert Memory.objects.count() == 0


# --- search ----------------------------------------------------------------------------


def test_search_across_messages_findings_and_memories(api, other_api, agent):
    api.post(
        BASE + "/sessions/s1/turns",
        turn(
            ("user", "The parser crashes on unicode input"), ("assistant", "Looking at the lexer")
        ),
    )
    api.post(
        BASE + "/sessions/s1/findings",
        {"tool": "grep", "query": "unicode", "fact": "unicode handled in lexer.py"},
    )
    api.post(BASE + "/memories", {"content": "Unicode normalization happens in the lexer"})
    other_api.post(BASE + "/sessions/theirs/turns", turn(("user", "unicode secrets")))
    body = api.get(BASE + "/search", {"q": "unicode lexer"}).json()
    kinds = sorted(item["kind"] for item in body["items"])
    assert kinds == ["finding", "memory", "message", "message"]
    message = next(i for i in body["items"] if i["kind"] == "message" and i["seq"] == 1)
    assert message["session"] == "s1" and message["role"] == "user"
    assert {"text": "unicode", "match": True} in message["highlights"]
    assert "parser crashes on unicode input" in message["snippet"]
    only = api.get(BASE + "/search", {"q": "unicode", "kind": "memory"}).json()["items"]
    assert [i["kind"] for i in only] == ["memory"]
    page = api.get(BASE + "/search", {"q": "unicode lexer", "limit": 2}).json()
    rest = api.get(
        BASE + "/search", {"q": "unicode lexer", "limit": 2, "cursor": page["next_cursor"]}
    ).json()
    assert len(page["items"]) + len(rest["items"]) == 4
    Session.objects.filter(key="s1").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert [i["kind"] for i in api.get(BASE + "/search", {"q": "unicode"}).json()["items"]] == [
        "memory"
    ]


@pytest.mark.parametrize("mode", ["any", "all", "phrase"])
def test_search_without_snippets_finds_the_same_hits_in_the_same_order(api, agent, mode):
    """search(snippets=False), as context assembly reads a query hint's memories: the
    same hits, ranks and order, each with an empty snippet, for every kind and mode."""
    from memoryapp.core import search

    api.post(BASE + "/sessions/s1/turns", turn(
        ("user", "The parser crashes on unicode input"), ("assistant", "The lexer: unicode"),
        ("user", "unicode lexer unicode lexer, the lexer again")))  # fmt: skip
    for n, fact in enumerate(["unicode lexer handled in lexer.py", "lexer unicode tests pass"]):
        api.post(BASE + "/sessions/s1/findings", {"tool": "grep", "query": f"q{n}", "fact": fact})
    for content in ("The unicode lexer normalizes its input", "The lexer is unicode-safe"):
        api.post(BASE + "/memories", {"content": content})
    with_snippets = search.search(agent, "unicode lexer", mode=mode)
    without = search.search(agent, "unicode lexer", mode=mode, snippets=False)
    assert {h.kind for h in with_snippets} == {"message", "finding", "memory"}
    assert all(hit.snippet for hit in with_snippets)
    assert [(h.kind, h.id, h.rank, h.seq) for h in without] == [
        (h.kind, h.id, h.rank, h.seq) for h in with_snippets
    ]
    assert all(hit.snippet == "" for hit in without)


@pytest.mark.parametrize(
    "q", ['"unbalanced', "a OR b AND", "NEAR(x y)", "x*", "-y", "col:val", "'; DROP TABLE x;--"]
)
def test_search_syntax_in_queries_is_just_text(api, q):
    api.post(BASE + "/sessions/s1/turns", turn(("user", "x y val b")))
    assert api.get(BASE + "/search", {"q": q}).status_code == 200


def test_search_needs_a_query(api):
    assert api.get(BASE + "/search").status_code == 422
    assert api.get(BASE + "/search", {"q": "!!!"}).json()["items"] == []


# --- subtasks --------------------------------------------------------------------------


def test_subtasks_drive_the_current_subtask(api, other_api):
    api.put(BASE + "/sessions/s1", {"goal": "Release 2.0"})
    url = BASE + "/sessions/s1/subtasks"
    first = api.post(url, {"title": "Write changelog"}).json()
    second = api.post(url, {"title": "Tag release", "dependencies": [first["id"]]}).json()
    assert second["dependencies"] == [first["id"]] and second["position"] == 1
    prompt = api.get(BASE + "/sessions/s1/context").json()["prompt"]
    assert "- **Current subtask**: Write changelog (pending)" in prompt
    api.patch(f"{url}/{first['id']}", {"status": "done"})
    api.patch(f"{url}/{second['id']}", {"status": "in_progress"})
    prompt = api.get(BASE + "/sessions/s1/context").json()["prompt"]
    assert "- **Current subtask**: Tag release (in_progress)" in prompt
    listed = api.get(url).json()
    assert listed["goal"] == "Release 2.0"
    assert [t["status"] for t in listed["items"]] == ["done", "in_progress"]
    assert api.post(url, {"title": "x", "dependencies": [999999]}).status_code == 422
    assert api.post(url, {"title": "x", "status": "someday"}).status_code == 422
    other_api.put(BASE + "/sessions/s1", {})
    assert (
        other_api.patch(
            f"{BASE}/sessions/s1/subtasks/{first['id']}", {"status": "done"}
        ).status_code
        == 404
    )
    assert api.delete(f"{url}/{first['id']}").status_code == 204
    assert api.delete(f"{url}/{first['id']}").status_code == 404


def test_check_by_post_takes_the_call_s_own_arguments_however_long(
    api, django_capture_on_commit_callbacks, in_process_tasks
):
    api.put(BASE + "/sessions/s1", {})
    write = {"file_path": "/p/big.py", "content": "x = 1\n" * 5000}
    url = BASE + "/sessions/s1/findings/check"
    assert api.post(url, {"tool": "Write", "query": write}).json()["known"] is False
    # The same call, recorded by extraction from a turn, is then known by either form.
    created = "File created successfully at: /p/big.py"
    call = {"tool": "Write", "query": write, "output": created}
    with django_capture_on_commit_callbacks(execute=True):
        api.post(BASE + "/sessions/s1/turns", turn(("user", "go"), tool_calls=[call]))
    assert api.post(url, {"tool": "Write", "query": write}).json()["known"] is True
    assert api.post(url, {"tool": "Write", "query": json.dumps(write)}).json()["known"] is True
    too_long = {"tool": "Write", "query": {"content": "x" * 300_000}}
    assert api.post(url, too_long).status_code == 422
    assert api.post(url, {"query": "a"}).status_code == 422


def test_a_memory_says_when_it_expires(api):
    """A memory's own expiry was invisible: the API had no expires_at."""
    made = api.post(f"{BASE}/memories", {"content": "The CI is down today"}).json()["memory"]
    assert made["expires_at"] is None  # never
    when = timezone.now() + timedelta(days=2)
    Memory.objects.filter(pk=made["id"]).update(expires_at=when)
    shown = api.get(f"{BASE}/memories/{made['id']}").json()
    assert shown["expires_at"].startswith(when.strftime("%Y-%m-%dT%H:%M"))
    listed = api.get(f"{BASE}/memories").json()["items"]
    assert [m["expires_at"] for m in listed] == [shown["expires_at"]]
    recalled = api.get(f"{BASE}/memories", {"query": "CI down"}).json()["items"]
    assert recalled[0]["expires_at"] == shown["expires_at"]
