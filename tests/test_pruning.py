"""The pruning rule, as pure logic: system kept, both limits, contiguous newest run, no
orphan tool result at the start, seq order."""

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryapp.lib.pruning import MessageCost, keeps_all, prune


def msgs(*spec: tuple[str, int]) -> list[MessageCost]:
    return [MessageCost(i + 1, role, n) for i, (role, n) in enumerate(spec)]


def test_keeps_system_and_newest_within_message_limit():
    history = msgs(("system", 5), ("user", 5), ("assistant", 5), ("user", 5), ("assistant", 5))
    kept, cost = prune(history, max_messages=3, max_tokens=1000)
    assert kept == [1, 4, 5]
    assert cost == 5 + 5 + 5 + 3


def test_token_limit_counts_system_and_priming():
    history = msgs(("system", 10), ("user", 10), ("assistant", 10), ("user", 10))
    # 10 (system) + 3 (priming) leaves 20: the newest two fit, not three.
    kept, cost = prune(history, max_messages=100, max_tokens=33)
    assert kept == [1, 3, 4]
    assert cost == 33
    kept, _ = prune(history, max_messages=100, max_tokens=32)
    assert kept == [1, 4]


def test_run_is_contiguous_even_when_an_older_small_message_would_fit():
    history = msgs(("user", 1), ("assistant", 50), ("user", 10))
    kept, _ = prune(history, max_messages=10, max_tokens=20)
    assert kept == [3]  # message 1 would fit but is not contiguous with the newest run


def test_no_orphan_tool_result_at_start():
    history = msgs(
        ("system", 1),
        ("user", 1),
        ("assistant", 1),  # makes two tool calls
        ("tool", 1),
        ("tool", 1),
        ("assistant", 1),
    )
    kept, _ = prune(history, max_messages=4, max_tokens=1000)
    # Newest 3 non-system are tool, tool, assistant: the tools' call was pruned.
    assert kept == [1, 6]


def test_system_kept_even_when_over_the_limits():
    history = msgs(("system", 100), ("user", 1), ("system", 100))
    kept, cost = prune(history, max_messages=1, max_tokens=10)
    assert kept == [1, 3]
    assert cost == 203


def test_zero_limits_keep_only_system():
    history = msgs(("system", 1), ("user", 1))
    assert prune(history, max_messages=0, max_tokens=0)[0] == [1]
    assert prune(msgs(("user", 1)), max_messages=0, max_tokens=100) == ([], 0)


roles = st.sampled_from(["system", "user", "assistant", "tool"])
histories = st.lists(st.tuples(roles, st.integers(min_value=1, max_value=60)), max_size=40)


def histories_and_limits(test):
    """A property test over a history (`spec`) and both limits."""
    return settings(max_examples=400, deadline=None)(
        given(
            spec=histories,
            max_messages=st.integers(min_value=0, max_value=45),
            max_tokens=st.integers(min_value=0, max_value=900),
        )(test)
    )


@histories_and_limits
def test_pruning_properties(spec, max_messages, max_tokens):
    history = msgs(*spec)
    kept, cost = prune(history, max_messages=max_messages, max_tokens=max_tokens)
    by_seq = {m.seq: m for m in history}
    system = [m.seq for m in history if m.role == "system"]
    others = [m.seq for m in history if m.role != "system"]
    kept_others = [s for s in kept if by_seq[s].role != "system"]

    # Returned in seq order, every system message kept.
    assert kept == sorted(kept)
    assert set(system) <= set(kept)
    # The cost is the list's cost.
    assert cost == (sum(by_seq[s].token_count for s in kept) + 3 if kept else 0)
    # The non-system part is the newest contiguous run.
    assert kept_others == others[len(others) - len(kept_others) :]
    # Never starts with a tool result.
    if kept_others:
        assert by_seq[kept_others[0]].role != "tool"
    # Within both limits (system messages alone may exceed them; then the run is empty).
    if kept_others:
        assert len(kept) <= max_messages
        assert cost <= max_tokens
    # Longest: every longer newest run breaks a limit or starts with a tool result.
    for length in range(len(kept_others) + 1, len(others) + 1):
        longer = others[len(others) - length :]
        longer_cost = sum(by_seq[s].token_count for s in system + longer) + 3
        fits = len(system) + len(longer) <= max_messages and longer_cost <= max_tokens
        assert not fits or by_seq[longer[0]].role == "tool"


def whole(history: list[MessageCost], max_messages: int, max_tokens: int) -> int | None:
    return keeps_all(
        ((m.role, m.token_count) for m in history), max_messages=max_messages, max_tokens=max_tokens
    )


def test_keeps_all_at_the_limits_and_not_past_them():
    history = msgs(("system", 10), ("user", 10), ("assistant", 10))
    assert whole(history, 3, 33) == 30  # 30 + 3 of priming: exactly the budget
    assert whole(history, 3, 32) is None
    assert whole(history, 2, 1000) is None
    assert whole([], 0, 0) == 0


def test_keeps_all_not_when_the_oldest_other_is_a_tool_result():
    assert whole(msgs(("system", 1), ("tool", 1), ("assistant", 1)), 10, 100) is None
    assert whole(msgs(("system", 1), ("assistant", 1), ("tool", 1)), 10, 100) == 3


def test_keeps_all_system_messages_whatever_they_cost():
    assert whole(msgs(("system", 100), ("system", 100)), 1, 10) == 200


@histories_and_limits
def test_keeps_all_exactly_when_prune_keeps_every_message(spec, max_messages, max_tokens):
    history = msgs(*spec)
    kept, cost = prune(history, max_messages=max_messages, max_tokens=max_tokens)
    tokens = whole(history, max_messages, max_tokens)
    if len(kept) == len(history):
        assert tokens == sum(m.token_count for m in history)
        assert cost == (tokens + 3 if history else 0)
    else:
        assert tokens is None
