"""The MCP server (memoryapp/api/mcp_server.py) driven by the official `mcp` SDK's own
client: in process against the API, over streamable HTTP at /mcp, and over stdio through
agents/mcp_server.py's relay (`python -m agents.mcp_server`, `python manage.py mcp`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from memoryapp.api import inprocess
from memoryapp.api.mcp_server import Api, build_server
from memoryapp.core.models import ContextItem, Finding, Memory

pytestmark = pytest.mark.django_db(transaction=True)  # the tools run in worker threads
ROOT = Path(__file__).resolve().parent.parent


def _text(result) -> str:
    return "".join(block.text for block in result.content if getattr(block, "text", None))


def _tools(api_key: str, session: str | None = "run-1"):
    # As the MCP endpoint builds it: the API in process, its worker threads' connections
    # closed after each call.
    api = Api.in_process(
        inprocess.connection(url="http://localhost", close_connections=True), api_key
    )
    return api, build_server(api, session)


def test_every_tool_through_the_sdks_client(api, api_key):
    from mcp import Client

    api.post(
        "/api/v1/sessions/run-1/turns", {"messages": [{"role": "user", "content": "Fix the lexer"}]}
    )
    memory, server = _tools(api_key)

    async def scenario():
        async with Client(server) as mcp:
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            assert names == {
                "remember", "recall", "forget", "check_finding", "record_finding",
                "get_context", "set_context_item",
            }  # fmt: skip
            said = _text(await mcp.call_tool("remember", {"content": "The lexer splits on dots"}))
            assert said.startswith("Remembered")
            found = _text(await mcp.call_tool("recall", {"query": "lexer dots"}))
            assert "The lexer splits on dots" in found
            assert "Not known yet" in _text(
                await mcp.call_tool("check_finding", {"tool": "Read", "query": "lexer.py"})
            )
            recorded = await mcp.call_tool(
                "record_finding",
                {
                    "tool": "Read",
                    "query": "lexer.py",
                    "fact": "lexer.py: 120 lines",
                    "file_path": "lexer.py",
                },
            )
            assert _text(recorded).startswith("Recorded finding")
            known = _text(
                await mcp.call_tool("check_finding", {"tool": "Read", "query": "lexer.py"})
            )
            assert known.startswith("Known: lexer.py: 120 lines")
            set_item = await mcp.call_tool(
                "set_context_item", {"name": "branch", "value": "fix-lexer"}
            )
            assert _text(set_item) == 'branch = "fix-lexer"'
            prompt = _text(await mcp.call_tool("get_context", {"query_hint": "lexer"}))
            assert "fix-lexer" in prompt and "lexer.py: 120 lines" in prompt
            memory_id = await anyio.to_thread.run_sync(lambda: Memory.objects.get().id)
            assert "Forgot memory" in _text(await mcp.call_tool("forget", {"memory_id": memory_id}))
            # A refusal is a tool error the model can read, not a crash.
            refused = await mcp.call_tool("get_context", {"session": "no-such-session"})
            assert refused.is_error and "404" in _text(refused)

    try:
        anyio.run(scenario)
    finally:
        memory.close()
    assert Memory.objects.get().status == "archived"
    assert Finding.objects.get().fact == "lexer.py: 120 lines"
    assert ContextItem.objects.get(key="branch").value == "fix-lexer"


def test_without_a_session_the_session_tools_say_how_to_give_one(api_key):
    from mcp import Client

    memory, server = _tools(api_key, session=None)

    async def scenario():
        async with Client(server) as mcp:
            result = await mcp.call_tool("get_context", {})
            assert result.is_error and "--session" in _text(result)

    try:
        anyio.run(scenario)
    finally:
        memory.close()


def test_manage_py_mcp_serves_over_stdio(tmp_path):
    """The management command a Claude Code configuration starts, on its own database."""
    from mcp import Client, StdioServerParameters

    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'memory.sqlite3'}",
        "DEBUG": "true",
        "MEMORYAPP_VAR_DIR": str(tmp_path),
    }
    env.pop("REDIS_URL", None)
    for command in (["migrate", "-v", "0"], ["create_agent", "coder"]):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--agent", "coder", "--session", "s"],
        cwd=str(ROOT),
        env=env,
    )

    async def scenario():
        async with Client(params) as mcp:
            said = _text(await mcp.call_tool("remember", {"content": "Tests run with ./bin/test"}))
            assert said.startswith("Remembered")
            assert "./bin/test" in _text(await mcp.call_tool("recall", {"query": "tests run"}))

    anyio.run(scenario)


# --- streamable HTTP, served by memoryapp at /mcp/<key> -------------------------------------


def test_streamable_http_with_the_key_in_the_url(live_server, api, api_key):
    from mcp import Client

    said = "How do deploys go through CI here?"
    api.post("/api/v1/sessions/run-1/turns", {"messages": [{"role": "user", "content": said}]})
    url = f"{live_server.url}/mcp/{api_key}?session=run-1"

    async def scenario():
        async with Client(url) as mcp:
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            assert {"remember", "recall", "check_finding", "get_context"} <= names
            said = _text(await mcp.call_tool("remember", {"content": "Deploys go through CI"}))
            assert said.startswith("Remembered")
            found = _text(await mcp.call_tool("recall", {"query": "deploys"}))
            assert "Deploys go through CI" in found
            await mcp.call_tool("set_context_item", {"name": "branch", "value": "main"})
            prompt = _text(await mcp.call_tool("get_context", {}))  # ?session=run-1
            assert "main" in prompt and "Deploys go through CI" in prompt
            refused = await mcp.call_tool("get_context", {"session": "absent"})
            assert refused.is_error and "404" in _text(refused)

    anyio.run(scenario)
    memory = Memory.objects.get()
    assert memory.content == "Deploys go through CI" and memory.session.key == "run-1"
    assert ContextItem.objects.get(key="branch").value == "main"


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def test_streamable_http_with_a_bearer_header_and_refusals(live_server, api_key):
    with httpx.Client(base_url=live_server.url, headers=MCP_HEADERS) as http:
        answer = http.post("/mcp", json=INITIALIZE, headers={"Authorization": f"Bearer {api_key}"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["serverInfo"]["name"] == "memoryapp"
        # A wrong key, or none: a JSON 401 before anything runs.
        for path, headers in (
            ("/mcp/not-a-key", {}),
            ("/mcp", {}),
            ("/mcp", {"Authorization": "Bearer not-a-key"}),
        ):
            refused = http.post(path, json=INITIALIZE, headers=headers)
            assert refused.status_code == 401
            assert "API key" in refused.json()["detail"]
        bad_session = http.post(f"/mcp/{api_key}?session=..", json=INITIALIZE)
        assert bad_session.status_code == 422
        # No server-sent stream: this server never calls the client.
        assert http.get(f"/mcp/{api_key}").status_code == 405


def test_a_key_in_the_mcp_url_never_reaches_the_logs(live_server, api_key, caplog):
    with httpx.Client(base_url=live_server.url, headers=MCP_HEADERS) as http:
        # Logged by Django as warnings: a 422 (with the right key) and a 401 (a wrong one).
        assert http.post(f"/mcp/{api_key}?session=..", json=INITIALIZE).status_code == 422
        wrong = "mk_" + "x" * 40
        assert http.post(f"/mcp/{wrong}", json=INITIALIZE).status_code == 401
    logged = caplog.text
    assert "/mcp/[redacted]" in logged
    assert api_key not in logged and wrong not in logged


def test_streamable_http_under_production_settings(settings, api, api_key):
    """The tools call the API in process with the outer request's scheme and host: with
    DEBUG off behind a TLS proxy, "http://localhost" would be refused or redirected."""
    from django.test import Client

    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["memory.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    api.post("/api/v1/sessions/run-1/turns", {"messages": [{"role": "user", "content": "hi"}]})
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": "Prod works", "session": "run-1"}},
    }
    answer = Client().post(
        f"/mcp/{api_key}",
        call,
        content_type="application/json",
        headers={**MCP_HEADERS, "Host": "memory.example.com", "X-Forwarded-Proto": "https"},
    )
    assert answer.status_code == 200, answer.content
    result = answer.json()["result"]
    assert not result["isError"], result
    assert Memory.objects.get().content == "Prod works"


def test_the_mcp_endpoint_leaves_no_database_connection_open_in_its_tool_threads(api, api_key):
    """The tools call the API in anyio's worker threads, which outlive the request: each
    call closes the connections it opened there. Before, on PostgreSQL (persistent
    connections; SQLite's close with each request), each worker thread kept one open that
    nothing would reuse or close, and PostgreSQL test runs ended with the test database
    still in use."""
    import threading

    from django.db.backends.signals import connection_created
    from django.test import Client

    api.post("/api/v1/sessions/run-1/turns", {"messages": [{"role": "user", "content": "hi"}]})
    opened = []

    def record(sender, connection, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            opened.append(connection)

    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": "Closed", "session": "run-1"}},
    }
    connection_created.connect(record)
    try:
        answer = Client().post(
            f"/mcp/{api_key}", call, content_type="application/json", headers=MCP_HEADERS
        )
    finally:
        connection_created.disconnect(record)
    assert answer.status_code == 200 and not answer.json()["result"]["isError"]
    assert opened  # the tool's call reached the database from a worker thread
    assert all(connection.connection is None for connection in opened)


# --- the stdio relay (agents/mcp_server.py) -------------------------------------------------


def test_python_m_agents_mcp_server_relays_stdio_to_a_running_server(live_server, api, api_key):
    """What an agent machine's `.mcp.json` starts: no Django there, only the relay."""
    from mcp import Client, StdioServerParameters

    api.post("/api/v1/sessions/run-1/turns", {"messages": [{"role": "user", "content": "hi"}]})
    env = {**os.environ, "MEMORYAPP_KEY": api_key}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agents.mcp_server", "--url", live_server.url, "--session", "run-1"],
        cwd=str(ROOT),
        env=env,
    )

    async def scenario():
        async with Client(params) as mcp:
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            assert {"remember", "recall", "check_finding", "get_context"} <= names
            said = _text(await mcp.call_tool("remember", {"content": "Relayed over stdio"}))
            assert said.startswith("Remembered")
            refused = await mcp.call_tool("get_context", {"session": "absent"})
            assert refused.is_error and "404" in _text(refused)

    anyio.run(scenario)
    memory = Memory.objects.get()
    assert memory.content == "Relayed over stdio" and memory.session.key == "run-1"


def test_the_relay_answers_what_the_server_refuses_as_a_json_rpc_error(live_server, api_key):
    import json

    from agents.mcp_server import connect, exchange

    line = json.dumps(INITIALIZE).encode()
    with connect(live_server.url, "mk_" + "x" * 40) as http:
        answer = json.loads(exchange(http, line))
        assert answer["id"] == 1 and "memoryapp refused (401)" in answer["error"]["message"]
        # A notification is never answered, refused or not.
        assert exchange(http, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}') is None
    with connect(live_server.url, api_key) as http:
        assert json.loads(exchange(http, b"{not json"))["error"]["code"] == -32700
        answer = json.loads(exchange(http, line, session=".."))
        assert "memoryapp refused (422)" in answer["error"]["message"]
        answer = json.loads(exchange(http, line))
        assert answer["result"]["serverInfo"]["name"] == "memoryapp"
        # The settled protocol version goes with every later request, as MCP asks.
        assert http.headers["MCP-Protocol-Version"] == answer["result"]["protocolVersion"]
    with connect("http://127.0.0.1:9", api_key, timeout=2) as http:
        assert "could not be reached" in json.loads(exchange(http, line))["error"]["message"]
