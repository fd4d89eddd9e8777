"""Editing remembered facts from the dashboard: roles, inline edit, history, revert."""

import pytest

from memoryapp.core.models import Agent, ContextItem, Finding, Memory, MemoryEvent, Session
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}


@pytest.fixture
def agent(db):
    return Agent.objects.create(name="coder")


@pytest.fixture
def memory(agent):
    return Memory.remember(
        agent, "The API is v1", memory_type="fact", confidence=0.7, actor="agent:coder"
    )[0]


@pytest.fixture
def editor(agent):
    return logged_in_member("editor", agent, "edna")


@pytest.fixture
def viewer(agent):
    return logged_in_member("viewer", agent, "vera")


@pytest.fixture
def outsider(db):
    return logged_in_member("editor", Agent.objects.create(name="other"), "otto")


def url(memory, what="edit"):
    return f"/agents/coder/items/memory/{memory.pk}/{what}/"


def test_memories_page_filters(agent, viewer, memory):
    Memory.objects.create(agent=agent, content="Use tabs", memory_type="convention", confidence=0.4)
    Memory.objects.create(agent=agent, content="old", status="archived")
    page = viewer.get("/agents/coder/memories/")
    assert [m.content for m in page.context["memories"]] == ["The API is v1", "Use tabs"]
    assert [
        m.content
        for m in viewer.get("/agents/coder/memories/", {"type": "convention"}).context["memories"]
    ] == ["Use tabs"]
    assert [
        m.content
        for m in viewer.get("/agents/coder/memories/", {"status": "archived"}).context["memories"]
    ] == ["old"]
    assert [
        m.content
        for m in viewer.get("/agents/coder/memories/", {"min_confidence": "0.5"}).context[
            "memories"
        ]
    ] == ["The API is v1"]
    assert [
        m.content for m in viewer.get("/agents/coder/memories/", {"q": "tabs"}).context["memories"]
    ] == ["Use tabs"]
    assert "edit</a>" not in page.content.decode()  # viewers get no edit controls


def test_memories_page_filters_by_the_session_that_learned_them(agent, viewer, memory):
    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn

    append_turn(agent, "s1", TurnInput([MessageInput("user", "hi")]))
    Memory.objects.create(
        agent=agent, session=Session.objects.get(key="s1"), content="Learned in s1", confidence=0.5
    )
    found = viewer.get("/agents/coder/memories/", {"session": "s1"}).context["memories"]
    assert [m.content for m in found] == ["Learned in s1"]
    assert viewer.get("/agents/coder/memories/", {"session": "nope"}).context["memories"] == []
    assert viewer.get("/agents/coder/memories/", {"min_confidence": "x"}).status_code == 404


def test_viewer_cannot_edit_and_outsider_cannot_see(memory, viewer, outsider):
    assert viewer.get(url(memory), headers=HX).status_code == 403
    assert (
        viewer.post(
            url(memory), {"content": "x", "memory_type": "fact", "confidence": "1"}
        ).status_code
        == 403
    )
    assert viewer.post(f"/agents/coder/memories/{memory.pk}/archive/").status_code == 403
    assert viewer.get(url(memory, "history"), headers=HX).status_code == 200
    for response in (
        outsider.get(url(memory), headers=HX),
        outsider.get(url(memory, "history")),
        outsider.post(f"/agents/coder/memories/{memory.pk}/archive/"),
        outsider.get("/agents/coder/memories/"),
    ):
        assert response.status_code == 404
    memory.refresh_from_db()
    assert (memory.content, memory.status) == ("The API is v1", "active")


def test_inline_edit_replaces_the_fact_and_records_who(memory, editor):
    form = editor.get(url(memory), headers=HX)
    assert (
        form.status_code == 200
        and "<form" in form.content.decode()
        and "<html" not in form.content.decode()
    )
    response = editor.post(
        url(memory),
        {"content": "The API is v2", "memory_type": "fact", "confidence": "0.9"},
        headers=HX,
    )
    assert response.status_code == 200
    assert response.headers["HX-Trigger"] == '{"memory-changed": {}}'
    new = Memory.objects.get(status="active")
    assert (new.content, new.source, new.confidence) == ("The API is v2", "manual", 0.9)
    memory.refresh_from_db()
    assert memory.status == "superseded" and memory.superseded_by == new
    assert MemoryEvent.objects.filter(target_id=new.pk, actor="user:edna", action="add").exists()


def test_invalid_edit_shows_the_form_with_errors_and_changes_nothing(memory, editor):
    response = editor.post(
        url(memory), {"content": "", "memory_type": "fact", "confidence": "7"}, headers=HX
    )
    assert response.status_code == 422 and "errorlist" in response.content.decode()
    memory.refresh_from_db()
    assert memory.content == "The API is v1" and Memory.objects.count() == 1


def test_edit_without_javascript_redirects(memory, editor):
    page = editor.get(url(memory))
    assert "<html" in page.content.decode()
    response = editor.post(
        url(memory), {"content": "The API is v1", "memory_type": "lesson", "confidence": "0.5"}
    )
    assert response.status_code == 302 and response["Location"] == "/agents/coder/memories/"
    memory.refresh_from_db()
    assert (memory.memory_type, memory.confidence) == ("lesson", 0.5)


def test_archive_restore_and_one_click_revert(memory, editor):
    editor.post(f"/agents/coder/memories/{memory.pk}/archive/", headers=HX)
    memory.refresh_from_db()
    assert memory.status == "archived"
    editor.post(f"/agents/coder/memories/{memory.pk}/restore/", headers=HX)
    editor.post(
        url(memory),
        {"content": "The API is v2", "memory_type": "fact", "confidence": "0.8"},
        headers=HX,
    )
    history = editor.get(url(memory, "history"), headers=HX)
    assert "user:edna" in history.content.decode() and "revert" in history.content.decode()
    replaced = MemoryEvent.objects.filter(target_id=memory.pk, action="update").latest("id")
    response = editor.post(
        f"/agents/coder/items/memory/{memory.pk}/revert/{replaced.pk}/", headers=HX
    )
    assert response.status_code == 200
    memory.refresh_from_db()
    assert memory.status == "active" and memory.superseded_by is None
    assert Memory.objects.get(content="The API is v2").status == "archived"
    actions = list(
        MemoryEvent.objects.filter(target_kind="memory", target_id=memory.pk)
        .order_by("id")
        .values_list("action", "actor")
    )
    assert actions == [
        ("add", "agent:coder"),
        ("delete", "user:edna"),
        ("restore", "user:edna"),
        ("update", "user:edna"),  # superseded by the edit
        ("update", "user:edna"),  # the revert
    ]


def test_findings_and_context_items_are_edited_the_same_way(agent, editor, viewer):
    session = Session.objects.create(agent=agent, key="s1", expires_at="2999-01-01T00:00Z")
    finding = Finding.objects.create(
        session=session, tool="grep", query="TODO", fact="2 matches", source="extracted"
    )
    item = ContextItem.objects.create(
        session=session, key="framework", value="Django", source="inferred", confidence=0.6
    )
    structured = ContextItem.objects.create(
        session=session, key="files", value=["a.py"], confidence=0.8
    )
    editor.post(
        f"/agents/coder/items/finding/{finding.pk}/edit/",
        {"query": "TODO", "fact": "3 matches", "success": "on"},
        headers=HX,
    )
    finding.refresh_from_db()
    assert (finding.fact, finding.source) == ("3 matches", "manual")
    editor.post(
        f"/agents/coder/items/context_item/{item.pk}/edit/",
        {"value": "Django 6.1", "confidence": "1"},
        headers=HX,
    )
    item.refresh_from_db()
    assert (item.value, item.source, item.confidence) == ("Django 6.1", "manual", 1.0)
    bad = editor.post(
        f"/agents/coder/items/context_item/{structured.pk}/edit/",
        {"value": "[oops", "confidence": "1"},
        headers=HX,
    )
    assert bad.status_code == 422
    editor.post(
        f"/agents/coder/items/context_item/{structured.pk}/edit/",
        {"value": '["a.py", "b.py"]', "confidence": "1"},
        headers=HX,
    )
    structured.refresh_from_db()
    assert structured.value == ["a.py", "b.py"]
    event = MemoryEvent.objects.get(target_kind="finding", target_id=finding.pk)
    editor.post(f"/agents/coder/items/finding/{finding.pk}/revert/{event.pk}/", headers=HX)
    finding.refresh_from_db()
    assert finding.fact == "2 matches"
    assert (
        viewer.post(f"/agents/coder/items/finding/{finding.pk}/edit/", {"fact": "x"}).status_code
        == 403
    )
    page = editor.get("/agents/coder/sessions/s1/").content.decode()
    assert f'id="item-finding-{finding.pk}"' in page and f'id="item-context_item-{item.pk}"' in page


def test_searching_memories_of_one_session_finds_them_past_the_first_page(agent, viewer):
    """The session filter narrows the search in the query itself: a filter applied after
    the page limit lost the session's matches and said there were no more (issue 10)."""
    from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
    from memoryapp.dashboard.memory_views import PAGE

    for key in ("s1", "s2"):
        append_turn(agent, key, TurnInput([MessageInput("user", "hi")]))
    s1, s2 = Session.objects.get(key="s1"), Session.objects.get(key="s2")
    for i in range(PAGE + 5):  # outrank s1's memory: many more mentions of the word
        Memory.objects.create(agent=agent, session=s2, content=f"parser parser note {i}")
    Memory.objects.create(agent=agent, session=s1, content="the parser keeps tokens")
    page = viewer.get("/agents/coder/memories/", {"q": "parser", "session": "s1"}).context
    assert [m.content for m in page["memories"]] == ["the parser keeps tokens"]
    assert page["next_offset"] is None
    many = viewer.get("/agents/coder/memories/", {"q": "parser", "session": "s2"}).context
    assert len(many["memories"]) == PAGE and many["next_offset"] == PAGE


def test_every_offered_revert_does_something_and_others_are_refused(memory, editor):
    """Reverting the "add" of a fact that was replaced since would change nothing: it is
    not offered, and posting it anyway is a 409 that changes nothing (issue 10)."""
    editor.post(
        url(memory),
        {"content": "The API is v2", "memory_type": "fact", "confidence": "0.8"},
        headers=HX,
    )
    replacement = Memory.objects.get(content="The API is v2")
    history = editor.get(url(replacement, "history"), headers=HX).content.decode()
    add_of_old = MemoryEvent.objects.get(target_id=memory.pk, action="add")
    replaced = MemoryEvent.objects.filter(target_id=memory.pk, action="update").latest("id")
    assert f"/revert/{add_of_old.pk}/" not in history  # not offered
    assert f"/revert/{replaced.pk}/" in history  # offered, and says what it does
    assert "bring back “The API is v1” and archive the fact that replaced it" in history
    events_before = MemoryEvent.objects.count()
    refused = editor.post(
        f"/agents/coder/items/memory/{memory.pk}/revert/{add_of_old.pk}/",
        {"shown_as": replacement.pk},
        headers=HX,
    )
    assert refused.status_code == 409
    assert MemoryEvent.objects.count() == events_before
    assert Memory.objects.get(pk=replacement.pk).status == "active"
    # The add of the fact on screen forgets it, with its own history row.
    add_of_new = MemoryEvent.objects.get(target_id=replacement.pk, action="add")
    done = editor.post(
        f"/agents/coder/items/memory/{replacement.pk}/revert/{add_of_new.pk}/", headers=HX
    )
    assert done.status_code == 200
    assert Memory.objects.get(pk=replacement.pk).status == "archived"
    assert MemoryEvent.objects.filter(target_id=replacement.pk).latest("id").action == "delete"
    # Now its add changes nothing more: no longer offered.
    again = editor.get(url(replacement, "history"), headers=HX).content.decode()
    assert f"/revert/{add_of_new.pk}/" not in again
