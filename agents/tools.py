"""The memory tools an agent offers its model: remember, recall, forget.

The server defines them and serves their definitions at `GET /api/v1/tools`;
`definitions(client, format)` reads them from there (once per client) in OpenAI's or
Anthropic's shape, and `tool_names(client)` names them. `dispatch(client, name,
arguments)` runs a tool call on the server (`POST /api/v1/tools/call`) and returns the
text to hand back to the model.
"""

from __future__ import annotations

import copy
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.client import MemoryClient

# Client -> format -> the definitions it served: they change only with the server's version.
_served: weakref.WeakKeyDictionary[Any, dict[str, list[dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def definitions(client: MemoryClient, format: str = "openai") -> list[dict[str, Any]]:
    """The memory tools' definitions as `client`'s server serves them, for a model:
    `format` "openai" (function definitions) or "anthropic" (`input_schema`)."""
    if format not in ("openai", "anthropic"):
        raise ValueError(f"unknown tool format {format!r}: use 'openai' or 'anthropic'")
    by_format = _served.setdefault(client, {})
    if format not in by_format:
        by_format[format] = client.tools(format)
    # A copy: a caller that edits its definitions does not edit the next caller's.
    return copy.deepcopy(by_format[format])


def tool_names(client: MemoryClient) -> list[str]:
    """The memory tools' names, in the server's order."""
    return [tool["function"]["name"] for tool in definitions(client, "openai")]


def dispatch(
    client: MemoryClient, name: str, arguments: dict[str, Any], session: str | None = None
) -> str:
    """Run one memory tool call on the server; the text to give back to the model."""
    return client.call_tool(name, arguments, session=session)["result"]
