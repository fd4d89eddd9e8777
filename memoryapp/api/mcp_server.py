"""memoryapp as an MCP server: any MCP client (Claude Code, Claude Desktop, Cursor, ...)
gets the agent's memory as tools, with the official `mcp` SDK.

Tools: `remember`, `recall`, `forget` (long-term memories), `check_finding` ("do I
already know this?" before a tool call), `record_finding`, `get_context` (the assembled
prompt for a session) and `set_context_item` (working context). Each calls the agent API
in process (memoryapp/api/inprocess.py) with the caller's key, so limits, validation and
errors are the API's. memoryapp/api/mcp_http.py serves it at `/mcp`; over stdio,
`python -m agents.mcp_server` and `python manage.py mcp` relay to that endpoint.

Session-scoped tools take an optional `session`; without it, the server's default session
(`?session=`, `--session`) is used. Errors from the API come back as tool errors the
model can read (the API's `detail`), never as a crash of the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import quote

import anyio
import httpx

from memoryapp.api import inprocess

MemoryType = Literal["fact", "decision", "preference", "convention", "lesson"]

INSTRUCTIONS = (
    "Long-term and working memory for this agent, kept by memoryapp. Before a tool call "
    "whose answer you may already have (reading a file, searching), call check_finding; "
    "after learning something worth keeping, record_finding or remember it."
)


class Refused(Exception):
    """The API answered with an error: its status and `detail`."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"{status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


class Api:
    """The agent API at `/api/v1`, called through `http` (base URL, key and transport
    set), each answer's JSON or `Refused`."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    @classmethod
    def in_process(cls, connection: inprocess.Connection, raw_key: str) -> Api:
        """The API of this process (memoryapp/api/inprocess.py) with `raw_key`."""
        return cls(
            httpx.Client(
                base_url=connection.url,
                headers={**connection.headers, "Authorization": f"Bearer {raw_key}"},
                transport=connection.transport,
            )
        )

    def close(self) -> None:
        self.http.close()

    def __call__(self, method: str, path: str, **options: Any) -> Any:
        response = self.http.request(method, "/api/v1" + path, **options)
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise Refused(response.status_code, detail)
        return response.json()

    def call_tool(self, name: str, arguments: dict[str, Any], session: str | None = None) -> Any:
        body: dict[str, Any] = {"name": name, "arguments": arguments}
        if session:
            body["session"] = session
        return self("POST", "/tools/call", json=body)


def _session(key: str) -> str:
    return "/sessions/" + quote(key, safe="")


def build_server(api: Api, session: str | None = None) -> Any:
    """An MCPServer whose tools call `api`. `session`: the default session key."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError as MemoryToolError  # shown as is

    server = MCPServer(name="memoryapp", instructions=INSTRUCTIONS)

    async def call(function: Callable[[], Any]) -> Any:
        # The calls are synchronous (and in process, Django's ORM must not run on the
        # event loop's thread): run them in a worker thread.
        try:
            return await anyio.to_thread.run_sync(function)
        except Refused as exc:
            detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
            raise MemoryToolError(f"memoryapp refused ({exc.status_code}): {detail}") from None

    def session_key(given: str | None) -> str:
        key = given or session
        if not key:
            raise MemoryToolError("no session: pass `session`, or start the server with --session")
        if "/" in key:
            # Servers decode %2F before routing, so a '/' can never reach the session.
            raise MemoryToolError("a session key cannot contain '/'")
        return key

    _add_memory_tools(server, api, call, session)
    _add_session_tools(server, api, call, session_key)
    return server


Call = Callable[[Callable[[], Any]], Any]


def _add_memory_tools(server: Any, api: Api, call: Call, session: str | None) -> None:
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
                return api.call_tool("remember", arguments, session=session)
            except Refused as exc:
                if exc.status_code != 404 or not session:
                    raise
                return api.call_tool("remember", arguments)

        return (await call(store))["result"]

    @server.tool()
    async def recall(query: str, memory_type: MemoryType | None = None, limit: int = 5) -> str:
        """Find remembered facts relevant to `query`, most relevant first."""
        arguments: dict[str, Any] = {"query": query, "limit": limit}
        if memory_type:
            arguments["memory_type"] = memory_type
        answer = await call(lambda: api.call_tool("recall", arguments))
        return answer["result"]

    @server.tool()
    async def forget(memory_id: int, reason: str = "") -> str:
        """Forget a remembered fact by its id (it is archived; a person can restore it)."""
        arguments = {"memory_id": memory_id, "reason": reason}
        answer = await call(lambda: api.call_tool("forget", arguments))
        return answer["result"]


def _add_session_tools(
    server: Any, api: Api, call: Call, session_key: Callable[[str | None], str]
) -> None:
    """The session-scoped tools: findings and the session's context."""

    @server.tool()
    async def check_finding(tool: str, query: str, session: str | None = None) -> str:
        """Before calling `tool` with `query` (its text or JSON arguments): is the answer
        already known in this session? A read of a file edited since is stale."""
        path = _session(session_key(session)) + "/findings/check"
        asked = {"tool": tool, "query": query}
        # A long query goes in a body instead of the URL (a read, even as a POST).
        method, where = ("GET", "params") if len(query) <= 1000 else ("POST", "json")
        answer = await call(lambda: api(method, path, **{where: asked}))
        finding = answer["finding"]
        if answer["known"]:
            return f"Known: {finding['fact']} (finding {finding['id']}); no need to call {tool}."
        related = "".join(
            f"\nRelated: {r['finding']['fact']} ({r['why']}; finding {r['finding']['id']})"
            for r in answer.get("related", [])
        )
        if answer["stale"]:
            return f"Stale: {finding['fact']} (the file changed since); call {tool} again.{related}"
        return f"Not known yet: call {tool}.{related}"

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
        answer = await call(lambda: api("POST", _session(key) + "/findings", json=body))
        verb = "Recorded" if answer["created"] else "Updated"
        return f"{verb} finding {answer['finding']['id']}: {answer['finding']['fact']}"

    @server.tool()
    async def get_context(
        session: str | None = None, query_hint: str = "", token_budget: int | None = None
    ) -> str:
        """The session's memory assembled for the prompt (state, summary of pruned
        history, working context, findings, long-term memories), as markdown."""
        key = session_key(session)
        params: dict[str, Any] = {}
        if query_hint:
            params["query_hint"] = query_hint
        if token_budget is not None:
            params["token_budget"] = token_budget
        answer = await call(lambda: api("GET", _session(key) + "/context", params=params))
        return answer["prompt"] or "(nothing remembered for this session yet)"

    @server.tool()
    async def set_context_item(
        name: str, value: str, confidence: float = 1.0, session: str | None = None
    ) -> str:
        """Set a working-context item of the session (a key and its value)."""
        key = session_key(session)
        path = _session(key) + "/context-items/" + quote(name, safe="")
        body = {"value": value, "source": "explicit", "confidence": confidence}
        answer = await call(lambda: api("PUT", path, json=body))
        return f"{answer['key']} = {json.dumps(answer['value'], ensure_ascii=False)}"
