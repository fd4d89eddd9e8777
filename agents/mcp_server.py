"""memoryapp as an MCP server: any MCP client (Claude Code, Claude Desktop, Cursor, ...)
gets the agent's memory as tools, with the official `mcp` SDK.

Tools: `remember`, `recall`, `forget` (long-term memories), `check_finding` ("do I
already know this?" before a tool call), `record_finding`, `get_context` (the assembled
prompt for a session) and `set_context_item` (working context). Each talks to memoryapp's
API through `agents.client.MemoryClient`, so the server runs beside the agent, against
a memoryapp anywhere:

    MEMORYAPP_KEY=... python -m agents.mcp_server --url https://memory.example.com --session run-1

or, on the memoryapp host, in process with a key that exists only while it runs:

    python manage.py mcp --agent NAME --session my-run

Both speak MCP over stdio. Session-scoped tools take an optional `session`; without it,
the server's `--session` is used. Errors from the API come back as tool errors the model
can read (the API's `detail`), never as a crash of the server.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any, Literal

import anyio

from agents.client import ApiError, MemoryClient

MemoryType = Literal["fact", "decision", "preference", "convention", "lesson"]

INSTRUCTIONS = (
    "Long-term and working memory for this agent, kept by memoryapp. Before a tool call "
    "whose answer you may already have (reading a file, searching), call check_finding; "
    "after learning something worth keeping, record_finding or remember it."
)


def build_server(client: MemoryClient, session: str | None = None) -> Any:
    """An MCPServer whose tools call `client`. `session`: the default session key."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError as MemoryToolError  # shown as is

    server = MCPServer(name="memoryapp", instructions=INSTRUCTIONS)

    async def call(function: Callable[[], Any]) -> Any:
        # The client is synchronous (and in process, Django's ORM must not run on the
        # event loop's thread): run it in a worker thread.
        try:
            return await anyio.to_thread.run_sync(function)
        except ApiError as exc:
            detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
            raise MemoryToolError(f"memoryapp refused ({exc.status_code}): {detail}") from None

    def session_key(given: str | None) -> str:
        key = given or session
        if not key:
            raise MemoryToolError("no session: pass `session`, or start the server with --session")
        return key

    _add_memory_tools(server, client, call, session)
    _add_session_tools(server, client, call, session_key)
    return server


Call = Callable[[Callable[[], Any]], Any]


def _add_memory_tools(server: Any, client: MemoryClient, call: Call, session: str | None) -> None:
    """The long-term memory tools: remember, recall, forget."""

    @server.tool()
    async def remember(
        content: str, memory_type: MemoryType = "fact", confidence: float = 0.8
    ) -> str:
        """Store a fact worth keeping beyond this conversation (a decision, a preference,
        a convention, a lesson). The same fact again strengthens it."""
        arguments = {"content": content, "memory_type": memory_type, "confidence": confidence}

        def store() -> dict:
            # Learned in the server's session when it exists (provenance); a memory belongs
            # to the agent either way, so a session not started yet is no reason to refuse.
            try:
                return client.call_tool("remember", arguments, session=session)
            except ApiError as exc:
                if exc.status_code != 404 or not session:
                    raise
                return client.call_tool("remember", arguments)

        return (await call(store))["result"]

    @server.tool()
    async def recall(query: str, memory_type: MemoryType | None = None, limit: int = 5) -> str:
        """Find remembered facts relevant to `query`, most relevant first."""
        arguments: dict[str, Any] = {"query": query, "limit": limit}
        if memory_type:
            arguments["memory_type"] = memory_type
        answer = await call(lambda: client.call_tool("recall", arguments))
        return answer["result"]

    @server.tool()
    async def forget(memory_id: int, reason: str = "") -> str:
        """Forget a remembered fact by its id (it is archived; a person can restore it)."""
        arguments = {"memory_id": memory_id, "reason": reason}
        answer = await call(lambda: client.call_tool("forget", arguments))
        return answer["result"]


def _add_session_tools(
    server: Any, client: MemoryClient, call: Call, session_key: Callable[[str | None], str]
) -> None:
    """The session-scoped tools: findings and the session's context."""

    @server.tool()
    async def check_finding(tool: str, query: str, session: str | None = None) -> str:
        """Before calling `tool` with `query` (its text or JSON arguments): is the answer
        already known in this session? A read of a file edited since is stale."""
        key = session_key(session)
        answer = await call(lambda: client.check_finding(key, tool, query))
        finding = answer["finding"]
        if answer["known"]:
            return f"Known: {finding['fact']} (finding {finding['id']}); no need to call {tool}."
        if answer["stale"]:
            return f"Stale: {finding['fact']} (the file changed since); call {tool} again."
        return f"Not known yet: call {tool}."

    @server.tool()
    async def record_finding(
        tool: str,
        fact: str,
        query: str = "",
        file_path: str = "",
        success: bool = True,
        session: str | None = None,
    ) -> str:
        """Record what a tool call taught you, as one concise fact."""
        key = session_key(session)
        body = {
            "tool": tool,
            "fact": fact,
            "query": query,
            "file_path": file_path,
            "success": success,
        }
        answer = await call(lambda: client.add_finding(key, **body))
        verb = "Recorded" if answer["created"] else "Updated"
        return f"{verb} finding {answer['finding']['id']}: {answer['finding']['fact']}"

    @server.tool()
    async def get_context(
        session: str | None = None, query_hint: str = "", token_budget: int | None = None
    ) -> str:
        """The session's memory assembled for the prompt (state, summary of pruned
        history, working context, findings, long-term memories), as markdown."""
        key = session_key(session)
        answer = await call(
            lambda: client.context(key, query_hint=query_hint, token_budget=token_budget)
        )
        return answer["prompt"] or "(nothing remembered for this session yet)"

    @server.tool()
    async def set_context_item(
        name: str, value: str, confidence: float = 1.0, session: str | None = None
    ) -> str:
        """Set a working-context item of the session (a key and its value)."""
        key = session_key(session)
        answer = await call(
            lambda: client.set_context_item(key, name, value, confidence=confidence)
        )
        return f"{answer['key']} = {json.dumps(answer['value'], ensure_ascii=False)}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="memoryapp's MCP server, over stdio")
    parser.add_argument("--url", default=os.environ.get("MEMORYAPP_URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--key", default=os.environ.get("MEMORYAPP_KEY"), help="the agent's API key"
    )
    parser.add_argument("--session", help="the session key tools use when given none")
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("an API key is needed: --key or MEMORYAPP_KEY")
    with MemoryClient(args.url, args.key) as client:
        anyio.run(build_server(client, args.session).run_stdio_async)


if __name__ == "__main__":
    main()
