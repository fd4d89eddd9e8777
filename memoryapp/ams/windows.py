"""Context windows, for the working memory's context-percentage fields and the memory
prompt's window: the models Redis Agent Memory Server's client names (`ModelNameLiteral`,
with the server's own sizes) and the share of a window that messages use. Plain data in,
plain data out."""

from __future__ import annotations

# Tokens per model, as Redis Agent Memory Server's MODEL_CONFIGS has them.
MODEL_WINDOWS = {
    "gpt-3.5-turbo": 4096,
    "gpt-3.5-turbo-16k": 16384,
    "gpt-4": 8192,
    "gpt-4-32k": 32768,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3-mini": 200_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "gpt-5.1-chat-latest": 128_000,
    "gpt-5.2-chat-latest": 128_000,
    "text-embedding-ada-002": 8191,
    "text-embedding-3-small": 8191,
    "text-embedding-3-large": 8191,
    "claude-3-opus-20240229": 200_000,
    "claude-3-sonnet-20240229": 200_000,
    "claude-3-haiku-20240307": 200_000,
    "claude-3-5-sonnet-20240620": 200_000,
    "claude-3-7-sonnet-20250219": 200_000,
    "claude-3-5-sonnet-20241022": 200_000,
    "claude-3-5-haiku-20241022": 200_000,
    "claude-3-7-sonnet-latest": 200_000,
    "claude-3-5-sonnet-latest": 200_000,
    "claude-3-5-haiku-latest": 200_000,
    "claude-3-opus-latest": 200_000,
    "claude-sonnet-4-5-20250929": 200_000,
    "claude-haiku-4-5-20251001": 200_000,
    "claude-opus-4-5-20251101": 200_000,
    "claude-sonnet-4-5": 200_000,
    "claude-haiku-4-5": 200_000,
    "claude-opus-4-5": 200_000,
}

# Redis's server summarizes a working memory past 70% of the window; the
# "until summarization" percentage is measured against that mark.
SUMMARIZATION_THRESHOLD = 0.7


def window_for(model_name: str | None, context_window_max: int | None) -> int | None:
    """The window in tokens: `context_window_max` when given, else the model's; None when
    neither is given. An unknown model is a ValueError naming the known ones."""
    if context_window_max is not None:
        return context_window_max
    if model_name is None:
        return None
    if model_name not in MODEL_WINDOWS:
        raise ValueError(
            f"unknown model_name {model_name!r}; known: {', '.join(MODEL_WINDOWS)} "
            "(or give context_window_max)"
        )
    return MODEL_WINDOWS[model_name]


def context_percentages(tokens: int, window: int | None) -> tuple[float | None, float | None]:
    """(percent of the window used, percent of the way to the summarization mark), each
    at most 100; (None, None) without a window."""
    if window is None:
        return None, None
    if window <= 0:
        return 100.0, 100.0
    used = tokens / window * 100
    until = tokens / max(1, int(window * SUMMARIZATION_THRESHOLD)) * 100
    return round(min(used, 100.0), 2), round(min(until, 100.0), 2)
