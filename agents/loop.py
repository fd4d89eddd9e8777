"""A reference agent loop with memory built in: the execute loop of the design.

    loop = AgentLoop(client, "run-42", model, tools={"read_file": read_file})
    result = loop.run("Why does the import fail?")

What it does, in order:

1. Restores the session's history before the first model call (the pruned conversation;
   nothing stored is deleted), so a restarted agent picks up where it stopped.
2. Before each model call, builds the prompt from the assembled context
   (`GET /sessions/{key}/context`): a system message with the agent's instructions and
   the memory prompt (session state, summary of pruned history, working context,
   findings, long-term memories), then the conversation the server kept, then what this
   step adds (the task, tool results).
3. After each model response, stores the turn: the new inputs, the model's reply with
   its tool calls, the usage, and the tool calls whose results are among the inputs (so
   the server extracts findings from them). Each turn has its own Idempotency-Key, which
   the client reuses when it retries.
4. Runs the tools the model asked for. The memory tools (remember, recall, forget) run on
   the server. Before any other tool runs, the loop asks the server whether its result is
   already known (`findings/check`): when it is, and not stale, the tool is not run; the
   model is told what is known instead, and the skip is stored with the turn
   (`known_from`), so `GET /sessions/{key}/stats` counts it as a redundant call avoided.
5. Stops when the model answers without tool calls, or after `max_steps` model calls; the
   results of tools already run are stored either way.

The model is a plain callable: `model(messages, tools) -> ModelReply`, messages in
OpenAI's chat shape and tools as OpenAI function definitions; wrap any provider's SDK in
a few lines. Tests drive the loop with a scripted model.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.client import ApiError, MemoryClient, Message, NotFound, ToolCall
from agents.tools import definitions, tool_names


@dataclass
class ToolRequest:
    """A tool call the model asked for."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:12])


@dataclass
class ModelReply:
    content: str = ""
    tool_calls: list[ToolRequest] = field(default_factory=list)
    # Reported by the provider: {"input_tokens": .., "output_tokens": ..}
    usage: dict[str, int] | None = None
    model: str = ""


Model = Callable[[list[Message], list[dict[str, Any]]], ModelReply]


@dataclass
class Tool:
    """One of the agent's own tools: `run(arguments) -> text`, and what the model is told
    about it (an OpenAI function definition's `description` and `parameters`)."""

    run: Callable[[dict[str, Any]], str]
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass
class Skip:
    """A tool call not run because a finding already answered it."""

    tool: str
    arguments: dict[str, Any]
    finding_id: int
    fact: str


@dataclass
class LoopResult:
    answer: str
    steps: int  # model calls
    restored: int  # messages of earlier runs restored before the first model call
    ran: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    finished: bool = True  # False when max_steps ran out first


def known_result(fact: str) -> str:
    """What the model is told instead of a tool's output when the result is known."""
    return f"Already known from an earlier call (not run again): {fact}"


class AgentLoop:
    def __init__(
        self,
        client: MemoryClient,
        session: str,
        model: Model,
        tools: dict[str, Tool | Callable[[dict[str, Any]], str]] | None = None,
        *,
        system: str = "You are a helpful agent. Use your tools; use memory to avoid repeats.",
        max_steps: int = 20,
        token_budget: int | None = None,
        memory_tools: bool = True,
    ) -> None:
        self.client = client
        self.session = session
        self.model = model
        self.tools = {
            name: tool if isinstance(tool, Tool) else Tool(run=tool)
            for name, tool in (tools or {}).items()
        }
        # The memory tools' names come from the server (GET /tools), asked only when needed.
        clash = set(self.tools) & set(tool_names(client)) if self.tools and memory_tools else ()
        if clash:
            raise ValueError(f"{sorted(clash)} are memory tools: give your tools other names")
        self.system = system
        self.max_steps = max_steps
        self.token_budget = token_budget
        self.memory_tools = memory_tools

    def definitions(self) -> list[dict[str, Any]]:
        own = [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for name, tool in self.tools.items()
        ]
        return own + (definitions(self.client, "openai") if self.memory_tools else [])

    # -- the loop ---------------------------------------------------------------------------

    def restore(self) -> int:
        """Messages of earlier runs the context will carry (0 for a new session)."""
        try:
            history = self.client.history(self.session)
        except NotFound:
            return 0
        return len(history["messages"])

    def prompt(self, task: str, pending: list[Message]) -> list[Message]:
        """The messages for the next model call, from the assembled context."""
        try:
            context = self.client.context(
                self.session, query_hint=task, token_budget=self.token_budget
            )
        except NotFound:
            context = {"prompt": "", "conversation": []}
        system = self.system + ("\n\n" + context["prompt"] if context["prompt"] else "")
        messages: list[Message] = [{"role": "system", "content": system}]
        for stored in context["conversation"]:
            if stored["role"] == "system":
                continue  # the agent's own system message is rebuilt above
            message: Message = {"role": stored["role"], "content": stored["content"]}
            for name in ("name", "tool_call_id", "tool_calls"):
                if stored.get(name):
                    message[name] = stored[name]  # type: ignore[literal-required]
            messages.append(message)
        return messages + pending

    def run(self, task: str) -> LoopResult:
        result = LoopResult(answer="", steps=0, restored=self.restore())
        pending: list[Message] = [{"role": "user", "content": task}]
        reported: list[ToolCall] = []  # the calls whose results are in `pending`
        while result.steps < self.max_steps:
            reply = self.model(self.prompt(task, pending), self.definitions())
            result.steps += 1
            assistant: Message = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                assistant["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                    for call in reply.tool_calls
                ]
            self._store([*pending, assistant], reported, reply)
            pending, reported = [], []
            if not reply.tool_calls:
                result.answer = reply.content
                return result
            for call in reply.tool_calls:
                text, record = self._run_tool(call, result)
                pending.append({"role": "tool", "content": text, "tool_call_id": call.id})
                reported.append(record)
        # Out of steps: what the tools returned is stored all the same.
        result.finished = False
        if pending:
            self._store(pending, reported, None)
        return result

    def _store(self, messages: list[Message], calls: list[ToolCall], reply: ModelReply | None):
        self.client.append_turn(
            self.session,
            messages,
            usage=reply.usage if reply else None,
            tool_calls=calls,
            model=reply.model if reply else None,
        )

    def _run_tool(self, call: ToolRequest, result: LoopResult) -> tuple[str, ToolCall]:
        record: ToolCall = {"tool": call.name, "query": call.arguments, "call_id": call.id}
        if self.memory_tools and call.name in tool_names(self.client):
            try:
                text = self.client.call_tool(call.name, call.arguments, session=self.session)[
                    "result"
                ]
                record["success"] = True
            except ApiError as exc:
                if exc.status_code >= 500:
                    raise
                # A bad call (no such memory, an argument out of range): the model hears why.
                text, record["success"] = f"error: {exc.detail}", False
            record["output"] = text
            result.ran.append((call.name, call.arguments))
            return text, record
        tool = self.tools.get(call.name)
        if tool is None:
            text = f"error: there is no tool named {call.name!r}"
            record.update(output=text, success=False)
            return text, record
        check = self.client.check_finding(self.session, call.name, call.arguments)
        finding = check.get("finding")
        if check["known"] and not check["stale"] and finding:
            result.skipped.append(Skip(call.name, call.arguments, finding["id"], finding["fact"]))
            record["known_from"] = finding["id"]
            return known_result(finding["fact"]), record
        try:
            text = str(tool.run(call.arguments))
            record["success"] = True
        except Exception as exc:  # a failing tool is the model's to hear about, not a crash
            text = f"error: {type(exc).__name__}: {exc}"
            record["success"] = False
        record["output"] = text
        result.ran.append((call.name, call.arguments))
        return text, record
