"""A LangChain chat message history kept in a memoryapp session (`pip install
"memoryapp[langchain]"`), for `RunnableWithMessageHistory` or any code that takes a
`BaseChatMessageHistory`.

    history = MemoryappChatMessageHistory("run-42", client=MemoryClient(url, key))
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])   # one turn
    history.messages                                                 # what was added

Each `add_messages` call appends one turn to the session (creating it), its messages
converted to the API's shape: `SystemMessage` is `system`, `HumanMessage` `user`,
`AIMessage` `assistant` (its tool calls in OpenAI's shape; its `usage_metadata` the turn's
usage and its model name the turn's model), `ToolMessage` `tool` (with its
`tool_call_id`), a `ChatMessage` its own role; `name` is kept. Every add sends its own
Idempotency-Key, which the client reuses when it retries, so a retried add is stored once.
Reading gives the stored conversation back as the same message types (a `ChatMessage` as
the type of its role); an unknown (or expired, or another agent's) session reads as no
messages. Reading pages through every stored message (`GET /sessions/{key}/messages`),
not the history pruned for the context window. `clear` deletes the
conversation and keeps the session's state (goal, working context, findings, subtasks):
the history owns the messages, not what the agent learned in that session.

Only text is stored: content given as a list of blocks is stored as its text (the text
blocks joined, as `message.text` reads them), leaving out reasoning blocks and tool-call
blocks (the message's `tool_calls` hold those calls); any other block (an image, a file,
audio) raises `ValueError` before anything is sent, rather than being dropped unseen.
Not kept: message ids, `additional_kwargs`, `response_metadata`, a message's own
`usage_metadata`, a tool message's `status` and `artifact`, an invalid tool call's `error`.

With an `AsyncMemoryClient` the async methods (`aget_messages`, `aadd_messages`,
`aclear`) are real coroutines on it; with only a `MemoryClient` they run the sync ones in
an executor, as LangChain's base class does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import InvalidToolCall, ToolCall, invalid_tool_call, tool_call

from agents.client import AsyncMemoryClient, MemoryClient, Message, NotFound, Usage

ROLES = ("system", "user", "assistant", "tool")
# Blocks left out of the stored text: the message's tool_calls carry the calls, and a
# model's reasoning is not part of the conversation it is given back.
TOOL_CALL_BLOCKS = frozenset({"tool_use", "tool_call", "function_call"})
REASONING_BLOCKS = frozenset({"reasoning", "thinking", "redacted_thinking"})


# --- LangChain messages to the API's messages, and back ----------------------------------


def content_text(message: BaseMessage) -> str:
    """The message's content as the text memoryapp stores (see the module docstring)."""
    if isinstance(message.content, str):
        return message.content
    for block in message.content:
        if isinstance(block, str):
            continue
        kind = block.get("type")
        if kind != "text" and kind not in TOOL_CALL_BLOCKS and kind not in REASONING_BLOCKS:
            raise ValueError(
                f"memoryapp stores text: a {type(message).__name__} with a {kind!r} content "
                "block cannot be stored"
            )
    return message.text


def openai_tool_calls(message: AIMessage) -> list[dict[str, Any]]:
    """The message's tool calls in OpenAI's shape, the shape the API stores."""
    calls = [
        {
            "id": call["id"],
            "type": "function",
            "function": {
                "name": call["name"],
                "arguments": json.dumps(call["args"], ensure_ascii=False),
            },
        }
        for call in message.tool_calls
    ]
    # Kept as the model wrote them; they read back as invalid (unless they parse).
    calls.extend(
        {
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": call["args"] or ""},
        }
        for call in message.invalid_tool_calls
    )
    return calls


def to_api_message(message: BaseMessage) -> Message:
    """One LangChain message as the API's message."""
    if isinstance(message, ChatMessage):
        role = message.role
        if role not in ROLES:
            raise ValueError(f"memoryapp stores the roles {', '.join(ROLES)}, not {role!r}")
    elif isinstance(message, SystemMessage):
        role = "system"
    elif isinstance(message, HumanMessage):
        role = "user"
    elif isinstance(message, AIMessage):
        role = "assistant"
    elif isinstance(message, ToolMessage):
        role = "tool"
    else:
        raise ValueError(f"memoryapp cannot store a {type(message).__name__}")
    stored: Message = {"role": role, "content": content_text(message)}
    if message.name:
        stored["name"] = message.name
    if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
        stored["tool_calls"] = openai_tool_calls(message)
    if isinstance(message, ToolMessage):
        stored["tool_call_id"] = message.tool_call_id
    return stored


def turn_usage(messages: Sequence[BaseMessage]) -> Usage | None:
    """The turn's usage: its model answers' `usage_metadata` added up, when they have it."""
    reported = [m.usage_metadata for m in messages if isinstance(m, AIMessage)]
    reported = [usage for usage in reported if usage]
    if not reported:
        return None
    return {
        "input_tokens": sum(usage["input_tokens"] for usage in reported),
        "output_tokens": sum(usage["output_tokens"] for usage in reported),
    }


def turn_model(messages: Sequence[BaseMessage]) -> str | None:
    """The model that answered last in the turn, as its chat model reported it."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            name = message.response_metadata.get("model_name") or message.response_metadata.get(
                "model"
            )
            if isinstance(name, str) and name:
                return name[:200]  # the API's limit; a longer one is not a model name
    return None


def parse_tool_calls(stored: list[dict[str, Any]]) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """Stored OpenAI-shaped tool calls as LangChain's: those whose arguments are not a JSON
    object (or that are not OpenAI-shaped at all) come back as invalid tool calls."""
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for call in stored:
        function = call.get("function")
        if not isinstance(function, dict):
            text = json.dumps(call, ensure_ascii=False)
            invalid.append(invalid_tool_call(name=None, args=text, id=call.get("id"), error=None))
            continue
        arguments = function.get("arguments")
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            args = None
        name, call_id = function.get("name"), call.get("id")
        if isinstance(args, dict):
            calls.append(tool_call(name=name or "", args=args, id=call_id))
        else:
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            invalid.append(invalid_tool_call(name=name, args=text, id=call_id, error=None))
    return calls, invalid


def from_api_message(stored: dict[str, Any]) -> BaseMessage:
    """One message of the API's history as the LangChain message it was stored from."""
    role, content = stored["role"], stored["content"]
    named: dict[str, Any] = {"name": stored["name"]} if stored.get("name") else {}
    if role == "system":
        return SystemMessage(content=content, **named)
    if role == "user":
        return HumanMessage(content=content, **named)
    if role == "assistant":
        calls, invalid = parse_tool_calls(stored.get("tool_calls") or [])
        return AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid, **named)
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=stored.get("tool_call_id") or "", **named)
    return ChatMessage(content=content, role=role, **named)


# --- the history ---------------------------------------------------------------------------


class MemoryappChatMessageHistory(BaseChatMessageHistory):
    """The messages of the memoryapp session `session_key`.

    Give a `MemoryClient` (sync methods; async ones through an executor), an
    `AsyncMemoryClient` (async methods), both, or `base_url` and `api_key` to have both
    made (then `close()` / `aclose()` them). Clients given are the caller's to close; an
    async client belongs to the event loop it first ran on.
    """

    def __init__(
        self,
        session_key: str,
        *,
        client: MemoryClient | None = None,
        async_client: AsyncMemoryClient | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__()
        self._owns_clients = base_url is not None or api_key is not None
        if self._owns_clients:
            if client is not None or async_client is not None:
                raise TypeError("give clients, or base_url and api_key, not both")
            if not (base_url and api_key):
                raise TypeError("base_url and api_key go together")
            client = MemoryClient(base_url, api_key)
            async_client = AsyncMemoryClient(base_url, api_key)
        elif client is None and async_client is None:
            raise TypeError("give a client, an async_client, or base_url and api_key")
        self.session_key = session_key
        self.client = client
        self.async_client = async_client

    def _sync_client(self) -> MemoryClient:
        if self.client is None:
            raise RuntimeError(
                "this history has only an AsyncMemoryClient: use aget_messages, "
                "aadd_messages and aclear, or give it a MemoryClient too"
            )
        return self.client

    def _turn(self, messages: Sequence[BaseMessage]) -> dict[str, Any]:
        # Every message is converted before anything is sent: a refused one stores nothing.
        return {
            "messages": [to_api_message(m) for m in messages],
            "usage": turn_usage(messages),
            "model": turn_model(messages),
        }

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the session, oldest first ([] for an unknown session)."""
        try:
            return [from_api_message(m) for m in self._sync_client().messages(self.session_key)]
        except NotFound:
            return []

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append `messages` to the session as one turn."""
        if messages:
            self._sync_client().append_turn(self.session_key, **self._turn(messages))

    def clear(self) -> None:
        """Delete the session's conversation; its state stays."""
        try:
            self._sync_client().delete_session(self.session_key, scope="conversation")
        except NotFound:
            pass

    async def aget_messages(self) -> list[BaseMessage]:
        if self.async_client is None:
            return await super().aget_messages()
        try:
            return [from_api_message(m) async for m in self.async_client.messages(self.session_key)]
        except NotFound:
            return []

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if self.async_client is None:
            await super().aadd_messages(messages)
        elif messages:
            await self.async_client.append_turn(self.session_key, **self._turn(messages))

    async def aclear(self) -> None:
        if self.async_client is None:
            await super().aclear()
            return
        try:
            await self.async_client.delete_session(self.session_key, scope="conversation")
        except NotFound:
            pass

    def close(self) -> None:
        """Close the clients this history made from base_url and api_key (the sync one;
        `aclose` closes both)."""
        if self._owns_clients and self.client is not None:
            self.client.close()

    async def aclose(self) -> None:
        if self._owns_clients:
            self.close()
            if self.async_client is not None:
                await self.async_client.aclose()
