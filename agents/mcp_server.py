"""memoryapp's MCP server over stdio, for MCP clients that start a command (Claude Code,
Claude Desktop, Cursor, ...): a relay between stdio and the MCP endpoint memoryapp serves
itself (`/mcp`, whose tools are memoryapp/api/mcp_server.py's), so the tools, their
descriptions and their errors are the server's, whatever version it runs:

    MEMORYAPP_KEY=... python -m agents.mcp_server --url https://memory.example.com --session run-1

or, on the memoryapp host, in process with a key that exists only while it runs:

    python manage.py mcp --agent NAME --session my-run

Each JSON-RPC message read on stdin (one a line, as MCP's stdio transport frames them) is
POSTed to `<url>/mcp` with the key (and `?session=` for the session-scoped tools' default);
the endpoint's answer is written on stdout, one a line. The endpoint is stateless and
answers JSON, so one POST is one whole exchange. A request the server refuses outside MCP
(a wrong key, a 429, a server that cannot be reached) is answered with a JSON-RPC error
saying why; a notification gets nothing, as MCP has it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any

import httpx

# The MCP protocol version the initialize answer settles, sent with every later request.
PROTOCOL_HEADER = "MCP-Protocol-Version"
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700


def connect(
    url: str,
    api_key: str,
    *,
    transport: httpx.BaseTransport | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> httpx.Client:
    """An HTTP client of the memoryapp at `url` for `relay` (close it when done)."""
    return httpx.Client(
        base_url=url.rstrip("/"),
        headers={
            **(headers or {}),
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json, text/event-stream",
        },
        transport=transport,
        timeout=timeout,
    )


def _error(message_id: Any, code: int, text: str) -> bytes:
    error = {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text}}
    return json.dumps(error).encode()


def _refused(message_id: Any, text: str) -> bytes | None:
    """Said on stderr, and to the MCP client when it waits for an answer."""
    print(text, file=sys.stderr)
    return None if message_id is None else _error(message_id, INTERNAL_ERROR, text)


def exchange(http: httpx.Client, line: bytes, session: str | None = None) -> bytes | None:
    """POST one JSON-RPC message to `/mcp`; the line to answer with, if any."""
    try:
        message = json.loads(line)
    except ValueError:
        return _error(None, PARSE_ERROR, "not JSON")
    message_id = message.get("id") if isinstance(message, dict) else None
    params = {"session": session} if session else None
    try:
        response = http.post(
            "/mcp", content=line, params=params, headers={"Content-Type": "application/json"}
        )
    except httpx.HTTPError as exc:
        return _refused(message_id, f"memoryapp could not be reached: {type(exc).__name__}: {exc}")
    if not response.content:
        return None  # 202: a notification or a response, accepted
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "jsonrpc" in answer or isinstance(answer, list):
        result = answer.get("result") if isinstance(answer, dict) else None
        if isinstance(result, dict) and "protocolVersion" in result:
            http.headers[PROTOCOL_HEADER] = str(result["protocolVersion"])
        return response.content.strip()
    # Refused before MCP (memoryapp's own JSON errors: 401, 405, 413, 422, 429).
    detail = answer.get("detail") if isinstance(answer, dict) else response.text
    return _refused(message_id, f"memoryapp refused ({response.status_code}): {detail}")


def relay(
    http: httpx.Client,
    session: str | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
) -> None:
    """Relay MCP over stdio to `/mcp` until stdin ends."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    for line in stdin:
        if not line.strip():
            continue
        answer = exchange(http, line.strip(), session)
        if answer is not None:
            stdout.write(answer + b"\n")
            stdout.flush()


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
    with connect(args.url, args.key) as http:
        relay(http, args.session)


if __name__ == "__main__":
    main()
