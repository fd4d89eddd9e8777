"""A process's copy of a session's written messages (api/restores.py): a restore read with
its key (`GET …/history`, api/auth._find_key) reads only the messages appended since its
copy, and never answers from a copy that is no longer what is stored. Every test holds
the answer to the usual way's (the read after the lookup, auth._restore_in_path off) and
counts the message rows the key's statement read."""

import copy as copy_
import dataclasses

import pytest
from django.db import connection, transaction
from django.test import Client

from memoryapp.api import auth, restores
from memoryapp.core.models import ApiKey, Message, Session
from tests.conftest import ApiClient, turn

pytestmark = [
    # Each request its own transaction, as a server runs them: a copy is made and used
    # only outside one (see restores.ROW_VERSION_SQL).
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (DATABASE_URL=postgres://...): the copies are checked "
        "against the versions of its rows (xmin)",
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
    assert contents(edited)[2] == "edited by hand" and edited == usual(api, monkeypatch)
    assert restore(api) == edited and read_rows[-2:] == [0, 10]  # its copy made again
    # A save of one message, as the Redis Agent Memory Server API's edits save it.
    message = Message.objects.get(session__key="s", seq=4)
    message.content = "saved again"
    message.save(update_fields=["content"])
    assert contents(restore(api))[3] == "saved again"


def test_a_message_deleted_is_not_answered_from_the_copy(api, monkeypatch, read_rows):
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


def test_a_message_inserted_again_under_its_own_id_is_read(api, monkeypatch, read_rows):
    """Ids alone cannot tell a row inserted again with the id it had (SQL, a fixture
    loaded again): the transaction that wrote each row's version does."""
    a_session(api)
    restore(api)
    old = Message.objects.get(session__key="s", seq=5)
    old.delete()
    old.content = "the same id, written again"
    Message.objects.bulk_create([old])  # its pk given: the same id
    assert Message.objects.get(session__key="s", seq=5).pk == old.pk
    answer = restore(api)
    assert contents(answer)[4] == "the same id, written again"
    assert answer == usual(api, monkeypatch)


def test_answering_leaves_the_copy_as_it_was(api, monkeypatch):
    a_session(api, turns=3)
    api.post(
        TURNS.format("s"),
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": "{}"}}],
                },
                {"role": "tool", "content": "ok", "tool_call_id": "c1"},
            ]
        },
    )
    restore(api)
    (copy,) = restores.COPIES._copies.values()
    before = copy_.deepcopy(copy.messages)
    restore(api)
    # Read whole (no more than the limit and one), then pruned by the token budget: the
    # copy's dicts are what the run is chosen from.
    pruned = {"max_messages": 9, "max_tokens": 40}
    answer = restore(api, params=pruned)
    assert answer["pruned_count"] > 0 and answer == usual(api, monkeypatch, params=pruned)
    assert copy.messages == before and copy.messages[8]["tool_calls"][0]["id"] == "c1"


def test_copies_are_bounded_by_their_size(api, settings, read_rows):
    for key in "stuvw":
        a_session(api, key, turns=1)
    restore(api, "s")
    (copy,) = restores.COPIES._copies.values()
    assert copy.size >= 4 * restores.MESSAGE_BYTES + sum(map(len, contents(restore(api, "s"))))
    settings.MEMORYAPP_RESTORE_COPY_BYTES = copy.size * 4  # room for four of them
    for key in "stuvw":
        restore(api, key)
    assert [at[1] for at in restores.COPIES._copies] == list("tuvw")  # the oldest went
    restore(api, "t")
    restore(api, "s")
    assert [at[1] for at in restores.COPIES._copies] == list("vwts")
    settings.MEMORYAPP_RESTORE_COPY_BYTES = copy.size * 4 - 1  # too big to copy at all
    restore(api, "s")  # from its copy, which it then drops
    assert [at[1] for at in restores.COPIES._copies] == list("vwt")
    restore(api, "s")
    restore(api, "s")
    assert read_rows[-3:] == [0, 4, 4]  # then read whole, every time
    settings.MEMORYAPP_RESTORE_COPY_BYTES = 0  # no copies
    for key in "stuvw":
        restore(api, key)
    assert len(restores.COPIES) == 0


def test_tool_calls_and_revisions_count_in_a_copys_size():
    row = [1, "user", "hi", 1, "t", None, None, None, None, None, None]
    plain = restores.size_of([tuple(row)])
    row[7], row[10] = "[" + "1," * 500 + "1]", '[{"action": "edit"}]'
    assert restores.size_of([tuple(row)]) == plain + 4 * (len(row[7]) + len(row[10]))


def test_an_empty_session_is_not_copied(api, read_rows):
    assert api.put("/api/v1/sessions/e", {}).status_code == 201
    assert restore(api, "e")["messages"] == [] and len(restores.COPIES) == 0


def test_a_copy_waits_out_pruned_restores_and_goes_past_read_with_the_key(
    api, monkeypatch, read_rows
):
    a_session(api)  # 10 messages
    restore(api)
    restore(api, params={"max_messages": 5})  # past that limit: read the usual way
    assert len(restores.COPIES) == 1 and read_rows[-1] == 0
    assert restore(api) and read_rows[-1] == 0  # the copy still serves
    monkeypatch.setattr(auth, "READ_WITH_KEY", 11)
    auth._key_statement.cache_clear()
    try:
        api.post(TURNS.format("s"), turn(("user", "one"), ("assistant", "two")))  # 12
        answer = restore(api)
        assert len(answer["messages"]) == 12 and len(restores.COPIES) == 0
    finally:
        auth._key_statement.cache_clear()


def test_each_key_and_agent_has_its_own_copy(api, other_api, agent):
    a_session(api, "s")
    other_api.post(TURNS.format("s"), turn(("user", "the other agent's")))
    assert contents(restore(api))[1] == "Where? é 😀"
    assert contents(restore(other_api)) == ["the other agent's"]
    another = ApiClient(Client(), ApiKey.issue(agent)[1])  # the same agent's other key
    assert restore(another) == restore(api)
    assert {name for _, name in restores.COPIES._copies} == {"s"}
    assert len({key for key, _ in restores.COPIES._copies}) == 3


def test_copies_keep_the_most_recently_used(settings):
    copies = restores.Copies()
    one = restores.Copy(1, "x", ({"content": "x"},), "2", 10)
    settings.MEMORYAPP_RESTORE_COPY_BYTES = 40
    for name in ("a", "b", "c", "d"):
        copies.keep("k", name, one)
    assert copies.get("k", "a") is not None  # found, but not used yet: still the oldest
    copies.keep("k", "e", one)
    assert [name for _, name in copies._copies] == ["b", "c", "d", "e"]
    copies.keep("k", "b", one)  # used
    assert [name for _, name in copies._copies] == ["c", "d", "e", "b"]
    copies.drop("k", "d")
    assert copies._size == 30 and len(copies) == 3


def test_versions_are_written_as_an_arrays_elements():
    rows = [(None,) * 11 + ("90",), (None,) * 11 + (91,)]  # text as read, or a number
    assert restores.versions_text(rows, 11) == "90,91"
    assert restores.versions_text(rows[1:], 11, "90") == "90,91"
    assert restores.versions_text([], 11, "90") == "90"
    assert restores.versions_text([], 11) == ""


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


def test_changes_committed_as_in_production_are_read(api, monkeypatch, read_rows):
    """Each change its own transaction: an edit writes its row's new version under
    another transaction (xmin), and so does a row inserted again under its own id."""
    a_session(api)
    restore(api)
    Message.objects.filter(session__key="s", seq=3).update(content="edited, committed")
    assert contents(restore(api))[2] == "edited, committed"
    restore(api)
    old = Message.objects.get(session__key="s", seq=5)
    old.delete()
    old.content = "the same id, committed again"
    Message.objects.bulk_create([old])
    answer = restore(api)
    assert contents(answer)[4] == "the same id, committed again"
    assert answer == usual(api, monkeypatch)
    assert restore(api) == restore(api) == answer
    assert read_rows[-2:] == [10, 0]  # the copy made again, then serving


def test_no_copy_is_made_or_used_inside_a_transaction(api, monkeypatch, read_rows):
    """Within the transaction that wrote them, a row's versions share one xmin (and its
    cmin is not reliable): a restore inside a transaction reads the messages whole."""
    a_session(api)
    restore(api)
    assert len(restores.COPIES) == 1
    with transaction.atomic():
        Message.objects.filter(session__key="s", seq=3).update(content="first edit")
        assert contents(restore(api))[2] == "first edit" and read_rows[-1] == 10
        Message.objects.filter(session__key="s", seq=3).update(content="second edit")
        assert contents(restore(api))[2] == "second edit" and read_rows[-1] == 10
        # The copy made before the transaction is neither used nor replaced in it.
        (copy,) = restores.COPIES._copies.values()
        assert contents({"messages": copy.messages})[2] == "step 0: run the tests"
    assert contents(restore(api))[2] == "second edit"  # outside again: checked, read


def test_a_copy_of_another_incarnation_of_the_server_is_not_used(api, monkeypatch):
    """A transaction's id names one transaction only while the server lives and its ids'
    epoch lasts (a failover or a lost commit may hand a lost transaction's id out again):
    a copy read in another incarnation is not used."""
    a_session(api)
    restore(api)
    ((at, copy),) = restores.COPIES._copies.items()
    messages = tuple({**m, "content": "stale"} for m in copy.messages)
    stale = dataclasses.replace(copy, messages=messages)
    restores.COPIES.keep(*at, stale)
    # What the statement cannot tell from the stored rows is answered from the copy...
    assert set(contents(restore(api))) == {"stale"}
    # ...so the copy names the server's incarnation too.
    restores.COPIES.keep(*at, dataclasses.replace(stale, incarnation="another server"))
    answer = restore(api)
    assert "stale" not in contents(answer) and answer == usual(api, monkeypatch)
    assert copy.incarnation.endswith(" 0")  # started, then this epoch of transaction ids
