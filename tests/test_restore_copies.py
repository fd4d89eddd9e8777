"""A process's copy of a session's written messages (api/restores.py): a restore read with
its key (`GET …/history`, api/auth._find_key) reads only the messages appended since its
copy, and never answers from a copy that is no longer what is stored. Every test holds
the answer to the usual way's (the read after the lookup, auth._restore_in_path off) and
counts the message rows the key's statement read."""

import dataclasses

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from memoryapp.api import auth, restores
from memoryapp.core.models import ApiKey, Message, Session
from tests.conftest import ApiClient, turn

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (DATABASE_URL=postgres://...): the copies are checked "
        "against its trigger-kept messages_version (core migration 0014)",
    ),
]

HISTORY = "/api/v1/sessions/{}/history"
TURNS = "/api/v1/sessions/{}/turns"
WHOLE = {"max_messages": 10000, "max_tokens": 10_000_000}


@pytest.fixture(autouse=True)
def fresh_copies():
    """This module counts and reads the process's copies: none from another test."""
    restores.COPIES.clear()


@pytest.fixture
def read_rows(monkeypatch) -> list[int]:
    """How many message rows each restore's key statement read (its lookup's row aside)."""
    counts: list[int] = []
    first_read = auth.rows.first_read

    def counted(sql, params):
        found = first_read(sql, params)
        if "UNION ALL" in sql:
            counts.append(len(found) - 1)
        return found

    monkeypatch.setattr(auth.rows, "first_read", counted)
    return counts


def restore(api, key: str = "s", params: dict | None = None) -> dict:
    answer = api.get(HISTORY.format(key), WHOLE if params is None else params)
    assert answer.status_code == 200, answer.content
    return answer.json()


def usual(api, monkeypatch, key: str = "s", params: dict | None = None) -> dict:
    """The same restore the usual way: the messages read after the key, no copy used."""
    with monkeypatch.context() as m:
        m.setattr(auth, "_restore_in_path", lambda request: None)
        return restore(api, key, params)


def a_session(api, key: str = "s", turns: int = 4) -> None:
    api.post(TURNS.format(key), turn(("system", "You fix parsers."), ("user", "Where? é 😀")))
    for n in range(turns):
        api.post(
            TURNS.format(key),
            turn(("user", f"step {n}: run the tests"), ("assistant", f"Ran them: {n} passed.")),
        )


def contents(answer: dict) -> list[str]:
    return [m["content"] for m in answer["messages"]]


def test_a_restore_reads_only_what_was_appended_since_the_last(api, monkeypatch, read_rows):
    a_session(api)
    first = restore(api)
    assert read_rows == [10] and len(first["messages"]) == 10
    again = restore(api)
    assert read_rows == [10, 0] and again == first  # nothing new: nothing read
    api.post(TURNS.format("s"), turn(("user", "and now?"), ("assistant", "all green")))
    after = restore(api)
    assert read_rows == [10, 0, 2]
    assert after == usual(api, monkeypatch) and contents(after)[-2:] == ["and now?", "all green"]
    # The default restore (the agent's limits) reads from the same copy.
    assert restore(api, params={}) == usual(api, monkeypatch, params={})
    assert read_rows[-1] == 0


def test_an_edit_in_place_is_read_again(api, monkeypatch, read_rows):
    a_session(api)
    restore(api)
    Message.objects.filter(session__key="s", seq=3).update(content="edited by hand")
    edited = restore(api)
    assert contents(edited)[2] == "edited by hand" and read_rows[-1] == 10
    assert edited == usual(api, monkeypatch)
    # A save of one message, as the Redis Agent Memory Server API's edits save it.
    message = Message.objects.get(session__key="s", seq=4)
    message.content = "saved again"
    message.save(update_fields=["content"])
    assert contents(restore(api))[3] == "saved again"


def test_the_trigger_raises_the_version_of_each_changed_session_only(api, other_api):
    a_session(api, "s")
    a_session(api, "t")
    a_session(other_api, "s")

    def versions() -> dict:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, messages_version FROM core_session")
            return dict(cursor.fetchall())

    mine, theirs = Session.objects.get(key="t"), Session.objects.exclude(key="t")
    before = versions()
    Message.objects.filter(session=mine).update(token_count=7)
    Message.objects.filter(session=mine, seq=99).update(token_count=7)  # no row: no change
    after = versions()
    assert after[mine.pk] == before[mine.pk] + 1
    assert all(after[s.pk] == before[s.pk] for s in theirs)
    # A full save of the session (every field the model declares) leaves it as it is.
    mine.refresh_from_db()
    mine.goal = "fix the parser"
    mine.save()
    assert versions()[mine.pk] == after[mine.pk]


def test_a_message_deleted_is_not_answered_from_the_copy(api, monkeypatch, read_rows):
    """Deletes raise no version (a trigger on DELETE made TTL cleanup three times as
    slow): the count of the copy's messages still stored tells them."""
    a_session(api)
    restore(api)
    Message.objects.filter(session__key="s", seq=5).delete()  # as the admin deletes one
    answer = restore(api)
    assert len(answer["messages"]) == 9 and "step 1: run the tests" not in contents(answer)
    assert answer == usual(api, monkeypatch)
    assert restore(api) == answer  # and again, after the check dropped the copy


def test_a_message_inserted_again_under_its_seq_is_read(api, monkeypatch, read_rows):
    a_session(api)
    restore(api)
    with transaction.atomic():
        old = Message.objects.get(session__key="s", seq=5)
        old.delete()
        old.pk, old.content = None, "written again"
        old.save()
    answer = restore(api)
    assert contents(answer)[4] == "written again" and answer == usual(api, monkeypatch)


def test_a_cleared_conversation_filled_again_is_read_anew(api, monkeypatch, read_rows):
    a_session(api)
    restore(api)
    session = Session.objects.get(key="s")
    with transaction.atomic():
        session.clear_conversation()
    for n in range(6):
        api.post(TURNS.format("s"), turn(("user", f"new {n}"), ("assistant", f"again {n}")))
    answer = restore(api)
    assert contents(answer)[:2] == ["new 0", "again 0"] and len(answer["messages"]) == 12
    assert answer == usual(api, monkeypatch)


def test_a_session_made_again_under_the_same_key_is_read_anew(api, monkeypatch, read_rows):
    a_session(api)
    restore(api)
    assert api.delete("/api/v1/sessions/s?scope=all").status_code in (200, 204)
    api.post(TURNS.format("s"), turn(("user", "a new session")))
    answer = restore(api)
    assert contents(answer) == ["a new session"] and answer == usual(api, monkeypatch)


def test_a_copy_with_another_creation_time_is_not_used(api, monkeypatch):
    """A test database whose ids start again could name a new session with an old
    session's id and version: the copy's creation time must be the session's too."""
    a_session(api)
    restore(api)
    ((at, copy),) = restores.COPIES._copies.items()
    messages = tuple({**m, "content": "stale"} for m in copy.messages)
    stale = dataclasses.replace(copy, messages=messages)
    restores.COPIES.keep(*at, stale)
    # What the statement cannot tell from the stored rows is answered from the copy...
    assert set(contents(restore(api))) == {"stale"}
    # ...so the copy must name the session's creation time as well as its id.
    restores.COPIES.keep(*at, dataclasses.replace(stale, created_at=timezone.now()))
    answer = restore(api)
    assert "stale" not in contents(answer) and answer == usual(api, monkeypatch)


def test_answering_leaves_the_copy_as_it_was(api):
    a_session(api)
    restore(api)
    (copy,) = restores.COPIES._copies.values()
    before = [dict(m) for m in copy.messages]
    restore(api)
    restore(api, params={"max_messages": 3})  # pruned: the copy's dicts are chosen from
    assert [dict(m) for m in copy.messages] == before


def test_copies_are_bounded_by_their_characters(api, settings, read_rows):
    for key in "stuvw":
        a_session(api, key, turns=1)
    chars = restores.chars_of(restore(api, "s")["messages"])
    settings.MEMORYAPP_RESTORE_COPY_CHARS = chars * 4  # room for four of them
    for key in "stuvw":
        restore(api, key)
    assert [at[1] for at in restores.COPIES._copies] == list("tuvw")  # the oldest went
    restore(api, "t")
    restore(api, "s")
    assert [at[1] for at in restores.COPIES._copies] == list("vwts")
    settings.MEMORYAPP_RESTORE_COPY_CHARS = chars * 4 - 1  # too big to copy at all
    restore(api, "s")  # from its copy, which it then drops
    assert [at[1] for at in restores.COPIES._copies] == list("vwt")
    restore(api, "s")
    restore(api, "s")
    assert read_rows[-3:] == [0, 4, 4]  # then read whole, every time
    settings.MEMORYAPP_RESTORE_COPY_CHARS = 0  # no copies
    for key in "stuvw":
        restore(api, key)
    assert len(restores.COPIES) == 0


def test_each_key_and_agent_has_its_own_copy(api, other_api, agent):
    a_session(api, "s")
    other_api.post(TURNS.format("s"), turn(("user", "the other agent's")))
    assert contents(restore(api))[1] == "Where? é 😀"
    assert contents(restore(other_api)) == ["the other agent's"]
    another = ApiClient(Client(), ApiKey.issue(agent)[1])  # the same agent's other key
    assert restore(another) == restore(api)
    assert {name for _, name in restores.COPIES._copies} == {"s"}
    assert len({key for key, _ in restores.COPIES._copies}) == 3


def test_copies_keep_the_most_recently_used():
    copies = restores.Copies()
    one = restores.Copy(1, None, 0, 1, 1, ({"content": "x"},), 10)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(restores.settings, "MEMORYAPP_RESTORE_COPY_CHARS", 40, raising=False)
        for name in ("a", "b", "c", "d"):
            copies.keep("k", name, one)
        assert copies.get("k", "a") is not None  # a is now the newest
        copies.keep("k", "e", one)
        assert [name for _, name in copies._copies] == ["c", "d", "a", "e"]
        copies.drop("k", "d")
        assert copies._chars == 30 and len(copies) == 3


def test_a_message_numbered_0_is_answered_as_the_usual_way(api, monkeypatch, read_rows):
    """A seq may be 0 (PositiveIntegerField; only SQL or the admin write one): the read
    with the key and its copy read it as the usual way does, and sort it after the
    lookup's own row."""
    a_session(api)
    session = Session.objects.get(key="s")
    Message.objects.create(session=session, seq=0, role="user", content="zero", token_count=1)
    for _ in range(2):  # without a copy, then with it
        assert restore(api) == usual(api, monkeypatch)
    Message.objects.filter(session=session, seq=10).delete()  # now as many as the count
    first, again = restore(api), restore(api)
    assert first == again == usual(api, monkeypatch)
    assert contents(first)[0] == "zero" and read_rows[-1] == 0
