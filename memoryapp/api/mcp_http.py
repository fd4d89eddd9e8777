"""memoryapp's MCP server over streamable HTTP, served by memoryapp itself:

    https://HOST/mcp/<key>            (the key in the URL, for clients that send no headers;
                                       http/middleware.py moves it into the header and
                                       keeps it out of every log)
    https://HOST/mcp                  (with `Authorization: Bearer <key>`)

`?session=KEY` sets the session the session-scoped tools use when given none. The tools
are those of memoryapp/api/mcp_server.py (remember, recall, forget, check_finding,
record_finding, get_context, set_context_item); each calls the agent API in process with
the request's key, so limits, validation and errors are the API's. The stdio servers
(`python -m agents.mcp_server`, `manage.py mcp`) relay to this endpoint.

Stateless, JSON responses: every POST is a complete JSON-RPC exchange (the SDK's
stateless mode, `json_response=True`), so any number of server processes can answer and
nothing is kept between requests; the streaming GET of the protocol is answered 405, as
the protocol allows for a server that never sends requests of its own.

A wrong key is a JSON 401 like anywhere in the API, counted against the address; an over
the limit key a 429 with Retry-After. Each POST counts once against the key's and the
address's limits, whatever it asks (a tool call, the tool list): the calls its tools make
to the API in process are not counted again.
"""

from __future__ import annotations

from typing import Any

import anyio
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from memoryapp.api import inprocess
from memoryapp.api.mcp_server import Api, build_server
from memoryapp.http.auth import COUNTED_FOR, ApiKeyAuth, RateLimited, client_address
from memoryapp.http.schemas import check_session_key


def _bearer(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _unauthorized() -> JsonResponse:
    response = JsonResponse(
        {
            "detail": "a valid API key is needed: /mcp/<key>, or /mcp with "
            "'Authorization: Bearer <key>'"
        },
        status=401,
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


@csrf_exempt
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    # /mcp/<key> arrives here as /mcp with the key as its bearer key (http/middleware.py).
    raw_key = _bearer(request)
    try:
        api_key = ApiKeyAuth().authenticate(request, raw_key)
    except RateLimited as exc:
        return exc.response()
    if api_key is None:
        return _unauthorized()
    if request.method != "POST":
        # Stateless: no stream to open (GET) and no session to end (DELETE).
        response = JsonResponse(
            {"detail": "this MCP endpoint is stateless: POST JSON-RPC messages to it"},
            status=405,
        )
        response["Allow"] = "POST"
        return response
    session = request.GET.get("session") or None
    if session is not None:
        try:
            session = check_session_key(session)
        except ValueError as exc:
            return JsonResponse({"detail": f"session: {exc}"}, status=422)
    status, headers, body = anyio.run(_serve, request, raw_key, api_key.key_hash, session)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() not in ("content-length", "connection", "transfer-encoding"):
            response[name] = value
    return response


async def _serve(
    request: HttpRequest, raw_key: str, key_hash: str, session: str | None
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request through the SDK's stateless streamable-HTTP transport."""
    from mcp.server.transport_security import TransportSecuritySettings

    # The outer request's scheme and host (they passed this server's checks) and address
    # (the API's per-address limits count the MCP client, not this process).
    connection = inprocess.connection(
        url=f"{request.scheme}://{request.get_host()}",
        remote_addr=client_address(request),
        close_connections=True,  # the tools call it from anyio's worker threads
        # This request was counted against the key and the address: its tools' calls
        # are not counted again (one tool call was two requests of the key's limit).
        environ={COUNTED_FOR: key_hash},
    )
    api = Api.in_process(connection, raw_key)
    server = build_server(api, session)
    # Host and Origin are Django's to check (ALLOWED_HOSTS); no cookies are involved.
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    body = request.body
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await anyio.sleep_forever()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message["headers"]]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (name.lower().encode("latin-1", "replace"), value.encode("latin-1", "replace"))
            for name, value in request.headers.items()
        ],
        "client": (request.META.get("REMOTE_ADDR") or "", 0),
        "server": (request.get_host(), 80),
    }
    try:
        async with manager.run():
            await manager.handle_request(scope, receive, send)
    finally:
        api.close()
    return status, headers, b"".join(chunks)
