"""The dashboard's memory views (memoryapp/dashboard/memory_views.py): the memories page,
adding, editing, history with diffs and one-click revert for memories, findings and
working-context items, where each came from, and bulk archive / delete. Roles: an owner
(editor), a read-only viewer and an outsider. The diff module (memoryapp/lib/diff.py) is
tested at the end."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.core.conversation import MessageInput, ToolCallInput, TurnInput, append_turn
from memoryapp.core.models import (
    Agent,
    ContextItem,
    Finding,
    Memory,
    MemoryEvent,
    Message,
    Session,
    ToolCall,
    Turn,
)
from memoryapp.lib import diff
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}


# --- a small DOM, to assert by selector ---------------------------------------------------

_SIMPLE = re.compile(r"([.#])([\w-]+)|\[([\w-]+)(?:=([^\]]*))?\]")
VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent: Node | None = None):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def raw_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.raw_text for c in self.children)

    @property
    def text(self) -> str:
        return " ".join(self.raw_text.split())

    def matches(self, simple: str) -> bool:
        """`tag`, `.class`, `#id`, `[attr]`, `[attr=value]` and combinations of them."""
        tag = re.match(r"[a-z0-9]*", simple).group(0)
        if tag and self.tag != tag:
            return False
        classes = self.attrs.get("class", "").split()
        for part in _SIMPLE.finditer(simple[len(tag) :]):
            mark, name, attr, value = part.groups()
            if mark == "." and name not in classes:
                return False
            if mark == "#" and self.attrs.get("id") != name:
                return False
            if attr and (attr not in self.attrs or value not in (None, self.attrs[attr])):
                return False
        return True

    def descendants(self):
        for child in self.children:
            if isinstance(child, Node):
                yield child
                yield from child.descendants()

    def select(self, selector: str) -> list[Node]:
        """Descendants matching a selector of simple selectors joined by spaces."""
        found = [self]
        for simple in selector.split():
            found = [d for node in found for d in node.descendants() if d.matches(simple)]
            found = list(dict.fromkeys(found))
        return found

    def one(self, selector: str) -> Node:
        found = self.select(selector)
        assert len(found) == 1, (selector, [n.text[:80] for n in found])
        return found[0]


class _Tree(HTMLParser):
    def __init__(self):
        super().__init__()
        self.root = self.current = Node("#document", {})

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag):
        node = self.current
        while node.parent is not None and node.tag != tag:
            node = node.parent
        if node.parent is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def dom(response_or_html) -> Node:
    html = getattr(response_or_html, "content", response_or_html)
    parser = _Tree()
    parser.feed(html.decode() if isinstance(html, bytes) else html)
    return parser.root


# --- fixtures -----------------------------------------------------------------------------


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


@pytest.fixture
def session(agent):
    """A session of one turn: a user message, the assistant's grep call and its answer."""
    append_turn(
        agent,
        "s1",
        TurnInput(
            [
                MessageInput("user", "find the TODOs"),
                MessageInput("assistant", "searching"),
                MessageInput("tool", "src/a.py:1: TODO", tool_call_id="c1"),
            ],
            tool_calls=[ToolCallInput("grep", "TODO", "src/a.py:1: TODO", True, call_id="c1")],
        ),
    )
    return Session.objects.get(agent=agent, key="s1")


def extracted_finding(session, fact="1 match in src/a.py"):
    """A finding as extraction records it: linked to its turn, message and tool call."""
    turn = Turn.objects.get(session=session)
    return Finding.record(
        session,
        tool="grep",
        query="TODO",
        fact=fact,
        actor="system:extractor",
        source="extracted",
        step=turn.iteration,
        turn=turn,
        message=Message.objects.get(session=session, role="tool"),
        tool_call=ToolCall.objects.get(session=session),
    )[0]


def url(item, what="edit"):
    return f"/agents/coder/items/{item.KIND}/{item.pk}/{what}/"


def edit(client, memory, content, memory_type="fact", confidence="0.8", headers=HX):
    data = {"content": content, "memory_type": memory_type, "confidence": confidence}
    return client.post(url(memory), data, headers=headers)


# --- the memories page --------------------------------------------------------------------


def test_the_memories_page_shows_each_memorys_expiry(agent, viewer, memory):
    """A memory past its expiry showed as plain "active" until cleanup archived it."""
    soon = Memory.objects.create(agent=agent, content="Deploys are frozen this week")
    Memory.objects.filter(pk=soon.pk).update(expires_at=timezone.now() + timedelta(days=3))
    Memory.objects.filter(pk=memory.pk).update(expires_at=timezone.now() - timedelta(hours=2))
    html = viewer.get("/agents/coder/memories/").content.decode().replace("\xa0", " ")
    rows = {node.attrs["id"]: node.text for node in dom(html).select("div.item")}
    assert "expires in 3 days" in rows[f"item-memory-{soon.pk}"]
    past = rows[f"item-memory-{memory.pk}"]
    assert "past its expiry 2 hours ago: the next cleanup archives it" in past
    # An archived memory is past what cleanup does: no expiry to show.
    Memory.objects.filter(pk=soon.pk).update(status="archived")
    html = viewer.get("/agents/coder/memories/", {"status": "all"}).content.decode()
    row = {n.attrs["id"]: n.text for n in dom(html).select("div.item")}[f"item-memory-{soon.pk}"]
    assert "expires in" not in row


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
    html = dom(page)
    # Viewers get no edit, add or bulk controls; the history stays open to them.
    assert [a.text for a in html.select("#memory-list .actions a")] == ["history", "history"]
    assert html.select("#bulk-form") == [] and html.select(".add-slot") == []
    assert html.select("input.bulk-pick") == []


def test_memories_page_filters_by_the_session_that_learned_them(agent, viewer, memory):
    append_turn(agent, "s1", TurnInput([MessageInput("user", "hi")]))
    Memory.objects.create(
        agent=agent, session=Session.objects.get(key="s1"), content="Learned in s1", confidence=0.5
    )
    found = viewer.get("/agents/coder/memories/", {"session": "s1"}).context["memories"]
    assert [m.content for m in found] == ["Learned in s1"]
    assert viewer.get("/agents/coder/memories/", {"session": "nope"}).context["memories"] == []
    assert viewer.get("/agents/coder/memories/", {"min_confidence": "x"}).status_code == 404


def test_searching_memories_of_one_session_finds_them_past_the_first_page(agent, viewer):
    """The session filter narrows the search in the query itself: a filter applied after
    the page limit lost the session's matches and said there were no more (issue 10)."""
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


def test_memories_page_query_count_is_the_same_for_n_and_2n_memories(agent, editor, session):
    """Each memory shows its session, who added it and who edited it last: all of it
    read with the page, not once per memory."""

    def add(n):
        for i in range(n):
            memory = Memory.remember(
                agent,
                f"fact number {i} {Memory.objects.count()}",
                memory_type="fact",
                confidence=0.5,
                session=session,
                actor="agent:coder",
            )[0]
            memory.revise(actor="user:edna", confidence=0.6)

    def count():
        with CaptureQueriesContext(connection) as captured:
            response = editor.get("/agents/coder/memories/")
        assert response.status_code == 200
        return len(captured), len(dom(response).select("#memory-list .item"))

    add(3)
    small, shown = count()
    add(3)
    large, shown_large = count()
    assert (shown, shown_large) == (3, 6)
    assert small == large


# --- who may do what ----------------------------------------------------------------------


def test_viewer_cannot_change_anything_and_outsider_sees_nothing(memory, viewer, outsider, session):
    writes = [
        (url(memory), {"content": "x", "memory_type": "fact", "confidence": "1"}),
        (f"/agents/coder/memories/{memory.pk}/archive/", {}),
        ("/agents/coder/memories/add/", {"content": "x", "memory_type": "fact", "confidence": 1}),
        ("/agents/coder/sessions/s1/add/finding/", {"tool": "grep", "fact": "x"}),
        ("/agents/coder/sessions/s1/add/context_item/", {"key": "k", "value": "v"}),
        ("/agents/coder/memories/bulk/", {"ids": [memory.pk], "action": "delete", "confirm": 1}),
    ]
    for path, data in writes:
        assert viewer.post(path, data, headers=HX).status_code == 403, path
        assert outsider.post(path, data, headers=HX).status_code == 404, path
    for path in (
        url(memory),
        "/agents/coder/memories/add/",
        "/agents/coder/sessions/s1/add/finding/",
    ):
        assert viewer.get(path, headers=HX).status_code == 403, path
        assert outsider.get(path, headers=HX).status_code == 404, path
    assert viewer.get(url(memory, "history"), headers=HX).status_code == 200
    assert outsider.get(url(memory, "history")).status_code == 404
    assert outsider.get("/agents/coder/memories/").status_code == 404
    memory.refresh_from_db()
    assert (memory.content, memory.status) == ("The API is v1", "active")
    assert Memory.objects.count() == 1 and Finding.objects.count() == 0
    assert ContextItem.objects.count() == 0


def test_unknown_kinds_and_other_agents_rows_are_404(agent, editor, session):
    other = Agent.objects.create(name="other")
    theirs = Memory.remember(other, "secret", memory_type="fact", confidence=1, actor="agent:o")[0]
    assert editor.get(f"/agents/coder/items/memory/{theirs.pk}/edit/").status_code == 404
    assert editor.get(f"/agents/coder/items/turn/{theirs.pk}/history/").status_code == 404
    assert editor.get("/agents/coder/sessions/s1/add/turn/").status_code == 404
    assert editor.get("/agents/coder/sessions/nope/add/finding/").status_code == 404


# --- editing ------------------------------------------------------------------------------


def test_inline_edit_replaces_the_fact_and_records_who(memory, editor):
    form = editor.get(url(memory), headers=HX)
    assert form.status_code == 200 and "<html" not in form.content.decode()
    assert dom(form).one("form.editing textarea[name=content]").text == "The API is v1"
    response = edit(editor, memory, "The API is v2", confidence="0.9")
    assert response.status_code == 200
    assert response.headers["HX-Trigger"] == '{"memory-changed": {}}'
    new = Memory.objects.get(status="active")
    assert (new.content, new.source, new.confidence) == ("The API is v2", "manual", 0.9)
    memory.refresh_from_db()
    assert memory.status == "superseded" and memory.superseded_by == new
    assert MemoryEvent.objects.filter(target_id=new.pk, actor="user:edna", action="add").exists()
    row = dom(response).one(f"#item-memory-{new.pk}")
    assert row.one(".provenance .actor").text == "user:edna"  # who added this version


def test_invalid_edit_shows_the_form_with_errors_and_changes_nothing(memory, editor):
    data = {"content": "", "memory_type": "fact", "confidence": "7"}
    inline = editor.post(url(memory), data, headers=HX)
    # htmx 2 swaps only 2xx answers: the form with its errors must be one to be seen.
    assert inline.status_code == 200 and "<html" not in inline.content.decode()
    assert len(dom(inline).select("form.editing .errorlist")) == 2
    page = editor.post(url(memory), data)
    assert page.status_code == 422 and dom(page).select("main form.editing .errorlist")
    memory.refresh_from_db()
    assert memory.content == "The API is v1" and Memory.objects.count() == 1


def test_edit_without_javascript_redirects(memory, editor):
    page = dom(editor.get(url(memory)))
    assert page.one("title").text.startswith("Edit")
    cancel = page.one("form.editing a")
    assert cancel.attrs["href"] == url(memory) + "?display=1"
    assert (
        editor.get(cancel.attrs["href"])["Location"]
        == f"/agents/coder/memories/#item-memory-{memory.pk}"
    )
    response = edit(
        editor, memory, "The API is v1", memory_type="lesson", confidence="0.5", headers={}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/agents/coder/memories/#item-memory-{memory.pk}"
    memory.refresh_from_db()
    assert (memory.memory_type, memory.confidence) == ("lesson", 0.5)


def test_a_replaced_memory_is_not_edited(memory, editor):
    edit(editor, memory, "The API is v2")
    memory.refresh_from_db()
    assert memory.status == "superseded"
    assert editor.get(url(memory), headers=HX).status_code == 409
    assert edit(editor, memory, "The API is v3").status_code == 409
    assert not Memory.objects.filter(content="The API is v3").exists()
    row = dom(editor.get(url(memory) + "?display=1", headers=HX))
    assert [a.text for a in row.select(".actions a")] == ["history"]  # no edit offered


def test_findings_and_context_items_are_edited_the_same_way(agent, editor, viewer, session):
    finding = Finding.objects.create(
        session=session, tool="grep", query="TODO", fact="2 matches", source="extracted"
    )
    item = ContextItem.objects.create(
        session=session, key="framework", value="Django", source="inferred", confidence=0.6
    )
    structured = ContextItem.objects.create(
        session=session, key="files", value=["a.py"], confidence=0.8
    )
    response = editor.post(
        url(finding), {"query": "TODO", "fact": "3 matches", "success": "on"}, headers=HX
    )
    finding.refresh_from_db()
    assert (finding.fact, finding.source) == ("3 matches", "manual")
    assert dom(response).one(f"#item-finding-{finding.pk} .provenance .actor").text == "user:edna"
    editor.post(url(item), {"value": "Django 6.1", "confidence": "1"}, headers=HX)
    item.refresh_from_db()
    assert (item.value, item.source, item.confidence) == ("Django 6.1", "manual", 1.0)
    bad = editor.post(url(structured), {"value": "[oops", "confidence": "1"}, headers=HX)
    assert "enter valid JSON" in dom(bad).one("form.editing .errorlist").text
    editor.post(url(structured), {"value": '["a.py", "b.py"]', "confidence": "1"}, headers=HX)
    structured.refresh_from_db()
    assert structured.value == ["a.py", "b.py"]
    redirected = editor.post(url(finding), {"query": "TODO", "fact": "4 matches"})
    assert redirected["Location"] == f"/agents/coder/sessions/s1/#item-finding-{finding.pk}"
    page = dom(editor.get("/agents/coder/sessions/s1/"))
    assert page.select(f"#item-finding-{finding.pk}") and page.select(
        f"#item-context_item-{item.pk}"
    )


def test_the_registry_covers_every_kind_with_history():
    from memoryapp.dashboard.memory_views import EDITABLE

    assert set(EDITABLE) == set(MemoryEvent.Target.values)
    for kind, editable in EDITABLE.items():
        assert editable.model.KIND == kind
        for method in ("add_from_dashboard", "edit_from_dashboard", "revert", "revert_plan"):
            assert callable(getattr(editable.model, method)), (kind, method)


# --- where each came from -----------------------------------------------------------------


def test_a_finding_shows_its_turn_message_and_tool_call(agent, editor, session):
    finding = extracted_finding(session)
    seq = finding.message.seq
    row = dom(editor.get(url(finding) + "?display=1", headers=HX)).one(
        f"#item-finding-{finding.pk}"
    )
    provenance = row.one(".provenance")
    assert provenance.text.startswith("from turn 1")
    link = provenance.one("a")
    assert link.attrs["href"] == f"/agents/coder/sessions/s1/?at={seq}#msg-{seq}"
    assert link.text == f"message #{seq}"
    assert provenance.one("code.call").text == "grep TODO"
    assert provenance.select(".actor") == []  # nobody edited it
    editor.post(url(finding), {"query": "TODO", "fact": "2 matches"}, headers=HX)
    row = dom(editor.get(url(finding) + "?display=1", headers=HX))
    assert row.one(".provenance .actor").text == "user:edna"
    assert "edited by user:edna" in row.one(".provenance").text


def test_a_context_item_shows_its_evidence_and_who_set_it(agent, editor, session):
    item = ContextItem.put(
        session,
        "current_task",
        "fix the TODOs",
        source="inferred",
        confidence=0.6,
        actor="system:extractor",
        evidence=[{"turn": 1, "seq": 1, "what": "the user asked"}],
    )[0]
    row = dom(editor.get(url(item) + "?display=1", headers=HX))
    evidence = row.one("ul.evidence li")
    assert evidence.one("a").attrs["href"] == "/agents/coder/sessions/s1/?at=1#msg-1"
    assert evidence.text == "turn 1, message #1: the user asked"
    assert row.select(".provenance .actor")[0].text == "system:extractor"
    editor.post(url(item), {"value": "fix all TODOs", "confidence": "1"}, headers=HX)
    people = dom(editor.get(url(item) + "?display=1", headers=HX)).select(".provenance .actor")
    assert [p.text for p in people] == ["system:extractor", "user:edna"]


def test_a_memory_shows_its_session_who_added_it_and_who_edited_it(agent, editor, session):
    memory = Memory.remember(
        agent,
        "Tests use pytest",
        memory_type="convention",
        confidence=0.8,
        actor="agent:coder",
        session=session,
    )[0]
    edit(editor, memory, "Tests use pytest", memory_type="convention", confidence="0.9")
    item = dom(editor.get("/agents/coder/memories/")).one(f"#item-memory-{memory.pk}")
    provenance = item.one(".provenance")
    assert provenance.one("a").attrs["href"] == "/agents/coder/sessions/s1/"
    assert [a.text for a in provenance.select(".actor")] == ["agent:coder", "user:edna"]
    assert "edited by user:edna" in provenance.text


def test_session_page_shows_provenance_with_constant_queries(agent, viewer, session):
    """memories.html#item on the session page: following a finding's turn, message and tool call
    costs no query per finding."""

    def add_findings(n):
        base = Finding.objects.count()
        for i in range(n):
            extracted_finding(session)  # the same call: updated, so make new ones:
            Finding.record(
                session,
                tool="grep",
                query=f"pattern{base + i}",
                fact="1 match",
                actor="system:extractor",
                turn=Turn.objects.get(session=session),
                message=Message.objects.get(session=session, role="tool"),
                tool_call=ToolCall.objects.get(session=session),
            )

    def count():
        with CaptureQueriesContext(connection) as captured:
            response = viewer.get("/agents/coder/sessions/s1/")
        assert response.status_code == 200
        return len(captured), len(dom(response).select(".item.finding .provenance code.call"))

    add_findings(2)
    small, shown = count()
    add_findings(2)
    large, shown_large = count()
    assert (shown, shown_large) == (3, 5)
    assert small == large


# --- adding -------------------------------------------------------------------------------


def test_add_a_memory_inline_and_as_a_page(agent, editor):
    form = editor.get("/agents/coder/memories/add/", headers=HX)
    assert "<html" not in form.content.decode()
    assert dom(form).one("form.editing").attrs["hx-post"] == "/agents/coder/memories/add/"
    response = editor.post(
        "/agents/coder/memories/add/",
        {"content": "Deploys go through CI", "memory_type": "convention", "confidence": "0.9"},
        headers=HX,
    )
    assert response.status_code == 200
    assert response.headers["HX-Trigger"] == '{"memory-changed": {}}'
    added = Memory.objects.get(content="Deploys go through CI")
    assert (added.source, added.memory_type, added.session) == ("manual", "convention", None)
    event = MemoryEvent.objects.get(target_kind="memory", target_id=added.pk)
    assert (event.action, event.actor) == ("add", "user:edna")
    assert dom(response).one(f"#item-memory-{added.pk} .provenance .actor").text == "user:edna"
    # Without JavaScript: a page, then a redirect to the memory on its page.
    page = dom(editor.get("/agents/coder/memories/add/"))
    assert page.one("h1").text == "Add a memory"
    done = editor.post(
        "/agents/coder/memories/add/",
        {"content": "Use tabs", "memory_type": "convention", "confidence": "0.5"},
    )
    tabs = Memory.objects.get(content="Use tabs")
    assert done["Location"] == f"/agents/coder/memories/#item-memory-{tabs.pk}"
    bad = editor.post("/agents/coder/memories/add/", {"content": "", "memory_type": "fact"})
    assert bad.status_code == 422 and dom(bad).select("main .errorlist")
    cancel = editor.get("/agents/coder/memories/add/?cancel=1", headers=HX)
    assert cancel.status_code == 200 and cancel.content == b""
    assert (
        editor.get("/agents/coder/memories/add/?cancel=1")["Location"] == "/agents/coder/memories/"
    )
    # The memories page offers it to editors.
    slot = dom(editor.get("/agents/coder/memories/")).one(".add-slot a.add")
    assert slot.attrs["href"] == slot.attrs["hx-get"] == "/agents/coder/memories/add/"


def test_add_a_finding_and_a_context_item_to_a_session(agent, editor, session):
    response = editor.post(
        "/agents/coder/sessions/s1/add/finding/",
        {"tool": "pytest", "query": "tests/", "fact": "3 tests fail", "success": ""},
        headers=HX,
    )
    assert response.status_code == 200
    finding = Finding.objects.get(tool="pytest")
    assert (finding.session, finding.source, finding.success) == (session, "manual", False)
    assert MemoryEvent.objects.get(target_kind="finding", target_id=finding.pk).actor == "user:edna"
    row = dom(response).one(f"#item-finding-{finding.pk}")
    assert row.one(".provenance").text == "added by user:edna"
    item_response = editor.post(
        "/agents/coder/sessions/s1/add/context_item/",
        {"key": " current_task ", "value": "make the tests pass", "confidence": "1"},
        headers=HX,
    )
    item = ContextItem.objects.get(session=session, key="current_task")
    assert (item.value, item.source) == ("make the tests pass", "manual")
    assert dom(item_response).select(f"#item-context_item-{item.pk}")
    # The same key again sets it, with history, rather than failing.
    editor.post(
        "/agents/coder/sessions/s1/add/context_item/",
        {"key": "current_task", "value": "ship it", "confidence": "1"},
    )
    item.refresh_from_db()
    assert item.value == "ship it"
    assert list(
        MemoryEvent.objects.filter(target_kind="context_item", target_id=item.pk)
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["add", "update"]
    # Without JavaScript: the form is a page, the answer a redirect to the session.
    page = dom(editor.get("/agents/coder/sessions/s1/add/finding/"))
    assert page.one("h1").text == "Add a finding to s1"
    assert [i.attrs["name"] for i in page.select("form.editing input")][1:] == [
        "tool",
        "query",
        "success",
    ]
    done = editor.post(
        "/agents/coder/sessions/s1/add/finding/", {"tool": "ls", "query": "src", "fact": "a.py"}
    )
    ls = Finding.objects.get(tool="ls")
    assert done["Location"] == f"/agents/coder/sessions/s1/#item-finding-{ls.pk}"
    assert editor.get("/agents/coder/sessions/s1/add/finding/?cancel=1")["Location"] == (
        "/agents/coder/sessions/s1/"
    )
    # A memory added on a session is one that session learned.
    editor.post(
        "/agents/coder/sessions/s1/add/memory/",
        {"content": "CI runs on push", "memory_type": "fact", "confidence": "0.9"},
    )
    assert Memory.objects.get(content="CI runs on push").session == session


def test_the_add_partial_renders_for_editors_only(agent, editor, viewer, session):
    from django.template.loader import render_to_string

    for role, expected in (("editor", 1), ("staff", 1), ("viewer", 0)):
        html = render_to_string(
            "dashboard/edit.html#add",
            {"agent": agent, "session": session, "kind": "finding", "role": role},
        )
        links = dom(html).select(".add-slot a.add")
        assert len(links) == expected, role
    link = dom(
        render_to_string(
            "dashboard/edit.html#add",
            {"agent": agent, "session": session, "kind": "context_item", "role": "editor"},
        )
    ).one("a.add")
    assert link.attrs["href"] == "/agents/coder/sessions/s1/add/context_item/"
    assert link.text == "Add a working-context item"


# --- history, diffs and revert ------------------------------------------------------------


def history_rows(client, item) -> list[Node]:
    return dom(client.get(url(item, "history"), headers=HX)).select("table.history tr.change")


def changed_fields(row: Node) -> dict[str, Node]:
    return {dt.text: dd for dt, dd in zip(row.select("dt"), row.select("dd"), strict=True)}


def test_history_shows_only_the_changed_fields_with_a_word_diff(memory, editor):
    edit(editor, memory, "The API is v1", memory_type="lesson", confidence="0.7")
    edit(editor, memory, "The public API is v2 since May", memory_type="lesson", confidence="0.7")
    new = Memory.objects.get(status="active")
    rows = history_rows(editor, new)
    # The replacement is added and the fact it replaces marked in the same instant.
    assert [r.one(".label").text for r in rows] == ["replaced", "added", "edited", "added"]
    replaced, added, edited, first = rows
    # The replacement says what the content became, word by word.
    content = changed_fields(replaced)["content"]
    assert [d.text for d in content.select("del")] == ["v1"]
    assert [i.text for i in content.select("ins")] == ["public", "v2 since May"]

    def version(leave_out: str) -> str:
        return "".join(
            c if isinstance(c, str) else c.raw_text
            for c in content.children
            if getattr(c, "tag", "") != leave_out
        )

    assert (version("ins"), version("del")) == ("The API is v1", "The public API is v2 since May")
    assert changed_fields(replaced)["status"].one("del").text == "active"
    assert changed_fields(replaced)["status"].one("ins").text == "superseded"
    assert "replaced by" not in changed_fields(replaced)
    assert "(of the fact it replaced)" in replaced.text
    # An edit in place: only the type changed, old and new.
    fields = changed_fields(edited)
    assert list(fields) == ["type"]
    assert (fields["type"].one("del").text, fields["type"].one("ins").text) == ("fact", "lesson")
    assert edited.one(".actor").text == "user:edna"
    # Reverting it brings back the fact as it was before that edit, and says so.
    assert edited.one(".plan").text == (
        "will bring back “The API is v1” (memory type: fact) and archive the fact that replaced it"
    )
    assert first.one(".actor").text == "agent:coder"
    # The replaced fact's own history names what replaced it the same way.
    own = history_rows(editor, memory)[0]
    assert own.one(".label").text == "replaced" and "(of the fact" not in own.text
    assert [i.text for i in changed_fields(own)["content"].select("ins")] == [
        "public",
        "v2 since May",
    ]
    assert changed_fields(first)["content"].one("ins").text == "The API is v1"


def test_history_escapes_every_piece_of_agent_text(agent, editor):
    memory = Memory.remember(
        agent,
        "<b>bold</b> <script>x()</script>",
        memory_type="fact",
        confidence=0.5,
        actor="agent:coder",
    )[0]
    edit(editor, memory, "<b>bold</b> <img src=x onerror=alert(1)>")
    new = Memory.objects.get(status="active")
    html = editor.get(url(new, "history")).content.decode()
    assert "<script>x()" not in html and "<img src=x" not in html and "<b>bold" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    replaced = dom(html).select("table.history tr.change")[0]
    content = changed_fields(replaced)["content"]
    assert content.one("del").text == "<script>x()</script>"


def test_history_query_count_is_the_same_for_n_and_2n_changes(memory, editor):
    def count():
        with CaptureQueriesContext(connection) as captured:
            response = editor.get(url(memory, "history"))
        return len(captured), len(dom(response).select("tr.change"))

    for confidence in ("0.1", "0.2"):
        edit(editor, memory, "The API is v1", confidence=confidence)
    small, shown = count()
    for confidence in ("0.3", "0.4"):
        edit(editor, memory, "The API is v1", confidence=confidence)
    large, shown_large = count()
    assert (shown, shown_large) == (3, 5)
    assert small == large


def revert(client, item, event, headers=HX, shown_as=None):
    data = {"shown_as": shown_as} if shown_as else {}
    return client.post(url(item, f"revert/{event.pk}"), data, headers=headers)


def latest(item) -> MemoryEvent:
    return MemoryEvent.objects.filter(target_kind=item.KIND, target_id=item.pk).latest("id")


def test_reverting_each_kind_of_memory_row_does_it_and_writes_its_own_row(memory, editor):
    # edit
    edit(editor, memory, "The API is v1", memory_type="lesson")
    edited = latest(memory)
    response = revert(editor, memory, edited)
    memory.refresh_from_db()
    assert memory.memory_type == "fact"
    undo = latest(memory)
    assert undo.pk != edited.pk and undo.actor == "user:edna"
    assert undo.before["memory_type"] == "lesson" and undo.after["memory_type"] == "fact"
    # The answer is the row with its history open, the revert's own row on top.
    top = dom(response).select("table.history tr.change")[0]
    assert top.attrs["id"] == f"change-{undo.pk}" and top.one(".label").text == "edited"
    # archive
    editor.post(f"/agents/coder/memories/{memory.pk}/archive/", headers=HX)
    archived = latest(memory)
    assert (
        archived.action == "delete"
        and history_rows(editor, memory)[0].one(".label").text == "archived"
    )
    revert(editor, memory, archived)
    memory.refresh_from_db()
    assert memory.status == "active" and latest(memory).pk != archived.pk
    assert latest(memory).after["status"] == "active"
    # restore (archive, restore, then revert the restore: archived again)
    editor.post(f"/agents/coder/memories/{memory.pk}/archive/", headers=HX)
    editor.post(f"/agents/coder/memories/{memory.pk}/restore/", headers=HX)
    restored = latest(memory)
    assert history_rows(editor, memory)[0].one(".label").text == "restored"
    revert(editor, memory, restored)
    memory.refresh_from_db()
    assert memory.status == "archived" and latest(memory).after["status"] == "archived"
    editor.post(f"/agents/coder/memories/{memory.pk}/restore/", headers=HX)
    # supersede: reverting the replacement brings the old fact back, archives the new one
    edit(editor, memory, "The API is v2")
    replacement = Memory.objects.get(content="The API is v2")
    replaced = latest(memory)
    response = revert(editor, memory, replaced, shown_as=replacement.pk)
    assert response.headers["HX-Retarget"] == f"#item-memory-{replacement.pk}"
    memory.refresh_from_db()
    replacement.refresh_from_db()
    assert (memory.status, memory.superseded_by) == ("active", None)
    assert replacement.status == "archived" and latest(replacement).actor == "user:edna"
    assert latest(memory).pk != replaced.pk
    assert dom(response).select("tr.change")[0].one(".label").text == "brought back"
    # add: forgetting it archives it, with its own row; then it is offered no more
    added = MemoryEvent.objects.get(target_id=memory.pk, action="add")
    revert(editor, memory, added)
    memory.refresh_from_db()
    assert memory.status == "archived" and latest(memory).action == "delete"
    rows = history_rows(editor, memory)
    offered = [r for r in rows if r.select("button")]
    assert f"/revert/{added.pk}/" not in " ".join(
        f.attrs["action"] for r in offered for f in r.select("form")
    )


def test_a_revert_note_quotes_a_long_fact_up_to_a_whole_word(memory, editor):
    long = "The API is versioned in the path and every release keeps the previous version alive"
    memory.revise(content=long, actor="user:edna")
    replacement = Memory.objects.get(content=long)
    edit(editor, replacement, "The API is versioned in the header")
    history = editor.get(url(replacement, "history"), headers=HX).content.decode()
    plans = [p.text for p in dom(history).select("tr.change .plan")]
    assert (
        "will bring back “The API is versioned in the path and every release keeps the previous "
        "version…” and "
        "archive the fact that replaced it"
    ) in plans, plans


def test_a_revert_that_archives_the_replacement_updates_its_row_too(memory, editor):
    """Reverting a replacement from the old fact's history brings the old fact back and
    archives the one that replaced it; its row on the same page still said "active" with
    edit and archive links until a reload. The answer swaps that row as well."""
    edit(editor, memory, "The API is v2")
    replacement = Memory.objects.get(content="The API is v2")
    replaced = MemoryEvent.objects.filter(target_id=memory.pk, action="update").latest("id")
    answer = revert(editor, memory, replaced, shown_as=memory.pk)
    assert answer.status_code == 200
    replacement.refresh_from_db()
    assert replacement.status == "archived"
    rows = {node.attrs["id"]: node for node in dom(answer).select("div.item")}
    other = rows[f"item-memory-{replacement.pk}"]
    assert other.attrs.get("hx-swap-oob") == "true" and "archived" in other.attrs["class"]
    assert "hx-swap-oob" not in rows[f"item-memory-{memory.pk}"].attrs  # swapped in place


def test_every_offered_revert_does_something_and_others_are_refused(memory, editor):
    """Reverting the "add" of a fact that was replaced since would change nothing: it is
    not offered, and posting it anyway is a 409 that changes nothing (issue 10)."""
    edit(editor, memory, "The API is v2")
    replacement = Memory.objects.get(content="The API is v2")
    history = editor.get(url(replacement, "history"), headers=HX).content.decode()
    add_of_old = MemoryEvent.objects.get(target_id=memory.pk, action="add")
    replaced = MemoryEvent.objects.filter(target_id=memory.pk, action="update").latest("id")
    assert f"/revert/{add_of_old.pk}/" not in history  # not offered
    assert f"/revert/{replaced.pk}/" in history  # offered, and says what it does
    plans = [p.text for p in dom(history).select("tr.change .plan")]
    assert "will bring back “The API is v1” and archive the fact that replaced it" in plans
    events_before = MemoryEvent.objects.count()
    refused = revert(editor, memory, add_of_old, shown_as=replacement.pk)
    assert refused.status_code == 409
    assert MemoryEvent.objects.count() == events_before
    assert Memory.objects.get(pk=replacement.pk).status == "active"
    add_of_new = MemoryEvent.objects.get(target_id=replacement.pk, action="add")
    assert revert(editor, replacement, add_of_new).status_code == 200
    assert Memory.objects.get(pk=replacement.pk).status == "archived"
    assert latest(replacement).action == "delete"
    again = editor.get(url(replacement, "history"), headers=HX).content.decode()
    assert f"/revert/{add_of_new.pk}/" not in again


def test_reverting_finding_and_context_item_rows_writes_their_own_rows(agent, editor, session):
    finding = extracted_finding(session, fact="2 matches")
    editor.post(url(finding), {"query": "TODO", "fact": "3 matches", "success": "on"}, headers=HX)
    fields = changed_fields(history_rows(editor, finding)[0])
    assert list(fields) == ["fact", "source"]
    assert (fields["fact"].one("del").text, fields["fact"].one("ins").text) == ("2", "3")
    revert(editor, finding, latest(finding))
    finding.refresh_from_db()
    assert finding.fact == "2 matches"
    assert [r.one(".label").text for r in history_rows(editor, finding)] == [
        "edited",
        "edited",
        "added",
    ]
    added = MemoryEvent.objects.get(target_kind="finding", target_id=finding.pk, action="add")
    gone = revert(editor, finding, added)
    assert gone.status_code == 200 and gone.content == b""
    assert not Finding.objects.filter(pk=finding.pk).exists()
    deleted = MemoryEvent.objects.filter(target_kind="finding", target_id=finding.pk).latest("id")
    assert (deleted.action, deleted.after, deleted.actor) == ("delete", None, "user:edna")

    item = ContextItem.put(
        session, "framework", "Django", source="explicit", confidence=1.0, actor="agent:coder"
    )[0]
    editor.post(url(item), {"value": "Django 6.1", "confidence": "0.5"}, headers=HX)
    without_js = revert(editor, item, latest(item), headers={})
    assert without_js["Location"] == url(item, "history")
    item.refresh_from_db()
    assert (item.value, item.confidence) == ("Django", 1.0)
    assert latest(item).after["value"] == "Django" and latest(item).actor == "user:edna"


# --- bulk archive and delete --------------------------------------------------------------


@pytest.fixture
def three(agent):
    return [
        Memory.remember(agent, text, memory_type="fact", confidence=0.5, actor="agent:coder")[0]
        for text in ("one fact", "two facts", "three facts")
    ]


def bulk(client, action, memories, confirm=False, headers=None, **extra):
    data = {"action": action, "ids": [m.pk for m in memories], **extra}
    if confirm:
        data["confirm"] = "1"
    return client.post("/agents/coder/memories/bulk/", data, headers=headers or {})


def test_bulk_archive_asks_first_then_archives_them_all(three, editor):
    asked = bulk(editor, "archive", three[:2])
    assert asked.status_code == 200
    confirmation = dom(asked).one("#bulk-confirmation")
    assert confirmation.one("h2").text == "Archive 2 memories?"
    assert [li.text for li in confirmation.select("li")] == [
        "fact active two facts",
        "fact active one fact",
    ] or [li.text for li in confirmation.select("li")] == [
        "fact active one fact",
        "fact active two facts",
    ]
    hidden = confirmation.select("form input[name=ids]")
    assert sorted(int(i.attrs["value"]) for i in hidden) == sorted(m.pk for m in three[:2])
    assert Memory.objects.filter(status="archived").count() == 0  # nothing yet
    inline = bulk(editor, "archive", three[:2], headers=HX)
    assert "<html" not in inline.content.decode() and dom(inline).select("#bulk-confirmation")
    done = bulk(
        editor, "archive", three[:2], confirm=True, next="/agents/coder/memories/?type=fact"
    )
    assert done.status_code == 302 and done["Location"] == "/agents/coder/memories/?type=fact"
    assert set(Memory.objects.filter(status="archived")) == set(three[:2])
    for memory in three[:2]:
        assert (latest(memory).action, latest(memory).actor) == ("delete", "user:edna")
    page = dom(editor.get(done["Location"]))
    assert page.one("ul.notices").text == "Archived 2 memories."


def test_bulk_delete_deletes_for_good_and_keeps_a_record(three, editor):
    asked = dom(bulk(editor, "delete", three))
    assert asked.one("h2").text == "Delete 3 memories?"
    assert asked.one("#bulk-confirmation button").text == "Delete 3 for good"
    done = bulk(editor, "delete", three, confirm=True)
    assert done["Location"] == "/agents/coder/memories/"
    assert Memory.objects.count() == 0
    records = MemoryEvent.objects.filter(action="delete", after__isnull=True, actor="user:edna")
    assert sorted(records.values_list("target_id", flat=True)) == sorted(m.pk for m in three)


def test_bulk_leaves_other_agents_memories_and_bad_requests_alone(agent, three, editor):
    other = Agent.objects.create(name="other")
    theirs = Memory.remember(other, "theirs", memory_type="fact", confidence=1, actor="agent:o")[0]
    editor.get(bulk(editor, "delete", [three[0], theirs], confirm=True)["Location"])
    assert Memory.objects.filter(pk=theirs.pk).exists()
    assert not Memory.objects.filter(pk=three[0].pk).exists()
    assert bulk(editor, "explode", three, confirm=True).status_code == 400
    nothing = dom(bulk(editor, "archive", [], confirm=True))
    assert "No memories selected" in nothing.one("#bulk-confirmation").text
    # Only ever back to the memories page.
    away = bulk(editor, "archive", three[1:2], confirm=True, next="https://evil.example/")
    assert away["Location"] == "/agents/coder/memories/"
    editor.get(away["Location"])
    # Archiving what is not active says so.
    again = bulk(editor, "archive", three[1:], confirm=True)
    assert dom(editor.get(again["Location"])).one("ul.notices").text == (
        "Archived 1 memory (1 was not active)."
    )


def test_the_memories_page_offers_bulk_selection_to_editors(three, editor):
    html = dom(editor.get("/agents/coder/memories/?status=all"))
    form = html.one("form#bulk-form")
    assert form.attrs["method"] == "post" and form.attrs["action"] == form.attrs["hx-post"]
    assert (
        html.one("form#bulk-form input[name=next]").attrs["value"]
        == "/agents/coder/memories/?status=all"
    )
    picks = html.select("#memory-list input.bulk-pick")
    assert [p.attrs["form"] for p in picks] == ["bulk-form"] * 3
    assert sorted(int(p.attrs["value"]) for p in picks) == sorted(m.pk for m in three)
    assert [b.attrs["value"] for b in form.select("button")] == ["archive", "delete"]
    scripts = [s.attrs["src"] for s in html.select("script[src]")]
    assert any(src.endswith("/memories-bulk.js") for src in scripts)


# --- memoryapp/lib/diff.py ----------------------------------------------------------------


def test_word_diff_rebuilds_both_texts():
    old, new = "the parser keeps  tokens\nin order", "the lexer keeps tokens\nin order, always"
    parts = diff.word_diff(old, new)
    assert "".join(p.text for p in parts if p.op != "ins") == old
    assert "".join(p.text for p in parts if p.op != "del") == new
    assert ("del", "parser") in parts and ("ins", "lexer") in parts
    assert diff.word_diff("same", "same") == [("same", "same")]


def test_changes_are_only_the_fields_that_differ():
    before = {"content": "a b", "confidence": 0.5, "tags": ["x"], "ok": True}
    after = {"content": "a c", "confidence": 0.5, "tags": ["x", "y"], "ok": False}
    found = diff.changes(before, after, {"ok": "success"}, order=("content", "tags"))
    assert [c.field for c in found] == ["content", "tags", "ok"]
    # Without an order, by name: never the snapshot's key order (jsonb reorders keys).
    assert [c.field for c in diff.changes(after, before)] == ["content", "ok", "tags"]
    assert found[0].words == [("same", "a "), ("del", "b"), ("ins", "c")]
    assert (found[1].old, found[1].new, found[1].words) == ('["x"]', '["x", "y"]', None)
    assert (found[2].label, found[2].old, found[2].new) == ("success", "yes", "no")
    added = diff.changes(None, {"content": "a", "empty": "", "none": None})
    assert [(c.field, c.old, c.new) for c in added] == [("content", None, "a")]
    removed = diff.changes({"content": "a"}, None)
    assert [(c.field, c.old, c.new) for c in removed] == [("content", "a", None)]


def test_reverting_an_early_replacement_archives_the_fact_holding_its_place_now(memory, editor):
    """v1 → v2 → v3: reverting v1's replacement brings v1 back and archives v3 (v2 is
    already superseded), so exactly one of the three is active (found in review: v3
    stayed active beside v1)."""
    edit(editor, memory, "The API is v2")
    v2 = Memory.objects.get(content="The API is v2")
    edit(editor, v2, "The API is v3")
    v3 = Memory.objects.get(content="The API is v3")
    memory.refresh_from_db()
    assert memory.live_replacement() == v3
    replaced = MemoryEvent.objects.filter(
        target_kind="memory", target_id=memory.pk, after__status="superseded"
    ).get()
    plan = memory.revert_plan(replaced)
    assert "The API is v3" in plan and "holds its place now" in plan
    response = editor.post(url(memory, f"revert/{replaced.pk}"), {"shown_as": v3.pk}, headers=HX)
    assert response.status_code == 200
    statuses = dict(Memory.objects.values_list("content", "status"))
    assert statuses == {
        "The API is v1": "active",
        "The API is v2": "superseded",
        "The API is v3": "archived",
    }
