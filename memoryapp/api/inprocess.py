"""The agent API called from inside this process (management commands, the MCP endpoint):
an `httpx.WSGITransport` into this server's own WSGI application, so every write takes
the path agents' writes take, with its validation and limits. Callers build what sends
through it: the client commands an `agents.client.MemoryClient`, the MCP endpoint its
plain `httpx.Client` (memoryapp/api/mcp_server.py); the server imports nothing of agents/.

The request must pass this server's own checks: its Host one of ALLOWED_HOSTS (with
DEBUG off, "localhost" is refused), https when the server redirects http to https, and,
behind a proxy that says so in a header (SECURE_PROXY_SSL_HEADER), that header too."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.db import connections

_app = WSGIHandler()


class _Closing:
    """A response of `_app` whose close() also closes this thread's database
    connections (after Django's own close, which sends request_finished)."""

    def __init__(self, response) -> None:
        self.response = response

    def __iter__(self):
        return iter(self.response)

    def close(self) -> None:
        try:
            self.response.close()
        finally:
            connections.close_all()


def _closing_app(environ, start_response):
    """`_app` for calls from threads that are not the server's own (the MCP endpoint's
    tools run in anyio's worker threads, which outlive the request): a persistent
    connection opened there would stay open with nobody to close or reuse it, one per
    worker thread, until the thread ends."""
    return _Closing(_app(environ, start_response))


def _with_environ(app, extra: dict[str, str]):
    def with_environ(environ, start_response):
        return app({**environ, **extra}, start_response)

    return with_environ


def base_url() -> str:
    """A URL of this server its own settings accept."""
    hosts = [h.lstrip(".") for h in settings.ALLOWED_HOSTS if h and "*" not in h]
    host = hosts[0] if hosts else "localhost"
    scheme = "https" if settings.SECURE_SSL_REDIRECT else "http"
    return f"{scheme}://{host}"


@dataclass(frozen=True)
class Connection:
    """What an HTTP client needs to call this process: the URL to send (scheme and host),
    the headers every request carries, and the transport."""

    url: str
    headers: dict[str, str]
    transport: httpx.WSGITransport


def connection(
    *,
    url: str | None = None,
    remote_addr: str = "127.0.0.1",
    close_connections: bool = False,
    environ: dict[str, str] | None = None,
) -> Connection:
    """A connection to this process's own application. `url`: the scheme and host to send
    (default `base_url()`); `remote_addr`: the address the API's limits count against;
    `close_connections`: each call closes its thread's database connections when it is
    done (for calls from short-lived or pooled threads: see _closing_app); `environ`:
    entries each request's WSGI environ gets (what no client can send, such as
    http/auth.COUNTED_FOR)."""
    url = url or base_url()
    headers = {}
    proxy_header = settings.SECURE_PROXY_SSL_HEADER
    if proxy_header and url.startswith("https:"):
        name, value = proxy_header
        headers[name.removeprefix("HTTP_").replace("_", "-")] = value
    app = _closing_app if close_connections else _app
    if environ:
        app = _with_environ(app, environ)
    return Connection(url, headers, httpx.WSGITransport(app=app, remote_addr=remote_addr))
