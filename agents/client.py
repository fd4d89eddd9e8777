"""Typed clients for the memoryapp agent API (httpx), one synchronous and one async.

    client = MemoryClient("http://127.0.0.1:8000", api_key)
    client.append_turn("run-42", [{"role": "user", "content": "hi"}])
    history = client.history("run-42")

    async with AsyncMemoryClient("http://127.0.0.1:8000", api_key) as client:
        history = await client.history("run-42")

Both have the same methods with the same arguments (every operation is written once, in
`_Operations`, as the request it sends; each client sends it its own way), and cover the
whole API: sessions and turns, history, subtasks, context and working context, findings,
memories, tools, search, stats and the agent's settings.

Errors are typed: an HTTP error is an `ApiError` subclass named for its status
(`NotFound`, `Conflict`, `InvalidRequest`, `RateLimited`, ...) carrying the status and the
server's `detail`; a server that cannot be reached is `Unreachable` (also an
`httpx.TransportError`).

Transport: to a plain `http://` server with no proxy configured in the environment, each
client sends its requests straight through agents.transport (h11 over a socket, a pool
of kept-alive connections), which costs a fraction of httpx's own client and transport
in the client's CPU; to `https://`, through a proxy, or with a `transport=` given, through
httpx's client as usual. The requests, answers, errors and httpx's log lines are the same
either way (the clients return answers' bodies, never httpx's responses, so what only a
response carries, such as its `elapsed`, is not missed).

Retries (`retries`, default 2, with exponential backoff and jitter): a request that never
reached the server (connection refused, connect timeout) and a 429 (refused before any
work, after its Retry-After) are retried for every operation; a timeout, a dropped
connection, a 502/503/504 only for operations that are safe to repeat: reads, PUT and
DELETE, and appending a turn, whose retries reuse one `Idempotency-Key` so the server
stores a retried turn once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NotRequired, Required, TypedDict
from urllib.parse import quote
from urllib.request import getproxies

import httpx

from agents.transport import AsyncH11Transport, H11Transport

JSON = dict[str, Any]


class Message(TypedDict, total=False):
    role: Required[str]
    content: Required[str | None]
    name: str
    tool_call_id: str
    tool_calls: list[dict[str, Any]]


class ToolCall(TypedDict):
    """A tool call reported with the turn that made it (the API's `ToolCallIn`)."""

    tool: str
    query: NotRequired[str | dict[str, Any]]
    output: NotRequired[str]
    success: NotRequired[bool | None]
    file_path: NotRequired[str]
    call_id: NotRequired[str]
    details: NotRequired[dict[str, Any]]
    # Not run: the finding with this id already answered it (the reference loop's skip).
    known_from: NotRequired[int]


class Usage(TypedDict):
    """What the provider reported for the model call (cache reads and writes count as
    input)."""

    input_tokens: int
    output_tokens: int


# --- errors --------------------------------------------------------------------------------


class MemoryClientError(Exception):
    """Anything the client raises on purpose."""


class ApiError(MemoryClientError):
    """The server answered with an HTTP error: `status_code` and its `detail`."""

    def __init__(self, status_code: int, detail: Any, retry_after: float | None = None) -> None:
        super().__init__(f"{status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail
        self.retry_after = retry_after


class InvalidRequest(ApiError):
    """400 or 422: the request was refused as it is; nothing was changed."""


class Unauthorized(ApiError):
    """401: the API key is missing, wrong or revoked."""


class Forbidden(ApiError):
    """403: the key may not do this (a read-only key writing)."""


class NotFound(ApiError):
    """404: no such session, memory, subtask or item for this agent."""


class Conflict(ApiError):
    """409: the request conflicts with what is stored (an Idempotency-Key reused with
    another body, a memory changed since it was read)."""


class PayloadTooLarge(ApiError):
    """413: the body is over the server's limit."""


class RateLimited(ApiError):
    """429: too many requests; `retry_after` says how long to wait."""


class ServerError(ApiError):
    """5xx: the server failed; the detail of a 500 carries an error id for its log."""


class ServiceUnavailable(ServerError):
    """503: the server is up but its database is not; try again after `retry_after`."""


class Unreachable(MemoryClientError, httpx.TransportError):
    """No answer: the connection failed or timed out (after any retries)."""

    def __init__(self, message: str) -> None:
        httpx.TransportError.__init__(self, message)


_ERRORS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_for(response: httpx.Response) -> ApiError:
    """The typed error for an HTTP error response."""
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = response.text
    retry_after = None
    try:
        retry_after = float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        pass
    status = response.status_code
    kind = _ERRORS.get(status) or (ServerError if status >= 500 else ApiError)
    return kind(status, detail, retry_after)


# --- requests and retries -------------------------------------------------------------------

RETRIED_STATUSES = frozenset({502, 503, 504})
# httpx errors raised before a byte of the request was sent: always safe to send again.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass
class Call:
    """One API request as an operation describes it."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    # Safe to send twice: retried after a timeout or a 5xx too.
    repeatable: bool = False
    # Answer this field of the JSON body instead of all of it.
    pick: str | None = None


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 2
    backoff: float = 0.25  # seconds before the first retry; doubles each time
    max_wait: float = 5.0  # never sleeps longer than this between tries (Retry-After too)

    def wait(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds before try `attempt + 1`; None when the server asks for longer than
        `max_wait` (a client locked out for minutes gets its error now)."""
        if retry_after is not None:
            return max(retry_after, 0.0) if retry_after <= self.max_wait else None
        delay = min(self.backoff * (2**attempt), self.max_wait)
        return delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 (jitter, not crypto)


def _retry_wait(
    call: Call, policy: RetryPolicy, attempt: int, outcome: httpx.Response | Exception
) -> float | None:
    """Seconds to wait before trying `call` again, or None to give up with `outcome`."""
    if attempt >= policy.retries:
        return None
    if isinstance(outcome, Exception):
        if isinstance(outcome, NOT_SENT) or (
            call.repeatable and isinstance(outcome, httpx.TransportError)
        ):
            return policy.wait(attempt)
        return None
    if outcome.status_code == 429 or (call.repeatable and outcome.status_code in RETRIED_STATUSES):
        try:
            retry_after: float | None = float(outcome.headers["Retry-After"])
        except (KeyError, ValueError):
            retry_after = None
        return policy.wait(attempt, retry_after)
    return None


def _result(call: Call, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise error_for(response)
    if response.status_code == 204 or not response.content:
        return None
    body = response.json()
    return body[call.pick] if call.pick else body


def _quote(part: str) -> str:
    return quote(part, safe="")


def _session(key: str) -> str:
    if "/" in key:
        # Servers decode %2F before routing, so a '/' can never reach the session.
        raise ValueError("a session key cannot contain '/'")
    return "/sessions/" + _quote(key)


def _drop_none(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


# --- the operations, once --------------------------------------------------------------------


class _Operations:
    """Every API operation as the request it sends. `_send` sends it: the sync client
    returns the answer, the async client a coroutine of it."""

    def _send(self, call: Call) -> Any:
        raise NotImplementedError

    # agent and server
    def health(self) -> Any:
        return self._send(Call("GET", "/health", repeatable=True))

    def agent(self) -> Any:
        return self._send(Call("GET", "/agent", repeatable=True))

    def update_agent(self, **settings: Any) -> Any:
        return self._send(Call("PATCH", "/agent", json=settings))

    # sessions
    def put_session(
        self,
        key: str,
        *,
        goal: str | None = None,
        status: str | None = None,
        ttl_seconds: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        """Create or update a session (only the fields given change)."""
        body = _drop_none(goal=goal, status=status, ttl_seconds=ttl_seconds, metadata=metadata)
        return self._send(Call("PUT", _session(key), json=body, repeatable=True))

    def session(self, key: str) -> Any:
        return self._send(Call("GET", _session(key), repeatable=True))

    def delete_session(self, key: str, scope: str = "all") -> Any:
        """`scope="conversation"` deletes the messages and turns and keeps the session's
        state; `"all"` deletes the session. Long-term memories stay either way."""
        return self._send(Call("DELETE", _session(key), params={"scope": scope}, repeatable=True))

    def sessions_page(
        self, status: str = "active", limit: int = 50, cursor: str | None = None
    ) -> Any:
        params = _drop_none(status=status, limit=limit, cursor=cursor)
        return self._send(Call("GET", "/sessions", params=params, repeatable=True))

    def stats(self, key: str) -> Any:
        """Entries, bytes, average turn tokens and redundant tool calls avoided."""
        return self._send(Call("GET", _session(key) + "/stats", repeatable=True))

    # turns and history
    def append_turn(
        self,
        key: str,
        messages: list[Message],
        *,
        usage: Usage | dict[str, int] | None = None,
        tool_calls: list[ToolCall] | None = None,
        model: str | None = None,
        timestamp: str | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Append one turn (creating the session). Every retry of it sends the same
        Idempotency-Key, so the server stores it once."""
        body: dict[str, Any] = {"messages": messages}
        if usage is not None:
            body["usage"] = usage
        if tool_calls:
            body["tool_calls"] = tool_calls
        if model:
            body["model"] = model
        if timestamp:
            body["timestamp"] = timestamp
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return self._send(
            Call("POST", _session(key) + "/turns", json=body, headers=headers, repeatable=True)
        )

    def history(
        self, key: str, *, max_messages: int | None = None, max_tokens: int | None = None
    ) -> Any:
        """The conversation pruned for the context window (nothing is deleted)."""
        params = _drop_none(max_messages=max_messages, max_tokens=max_tokens)
        return self._send(Call("GET", _session(key) + "/history", params=params, repeatable=True))

    def messages_page(self, key: str, limit: int = 100, cursor: str | None = None) -> Any:
        """A page of every stored message, oldest first (unpruned)."""
        params = _drop_none(limit=limit, cursor=cursor)
        return self._send(Call("GET", _session(key) + "/messages", params=params, repeatable=True))

    def turns_page(self, key: str, limit: int = 50, cursor: str | None = None) -> Any:
        params = _drop_none(limit=limit, cursor=cursor)
        return self._send(Call("GET", _session(key) + "/turns", params=params, repeatable=True))

    # session state: subtasks
    def subtasks(self, key: str) -> Any:
        """`{"goal": ..., "items": [...]}`."""
        return self._send(Call("GET", _session(key) + "/subtasks", repeatable=True))

    def add_subtask(
        self, key: str, title: str, *, status: str | None = None, dependencies: list[int] = ()
    ) -> Any:
        body: dict[str, Any] = {"title": title, "dependencies": list(dependencies)}
        if status:
            body["status"] = status
        return self._send(Call("POST", _session(key) + "/subtasks", json=body))

    def update_subtask(self, key: str, subtask_id: int, **changes: Any) -> Any:
        path = f"{_session(key)}/subtasks/{int(subtask_id)}"
        return self._send(Call("PATCH", path, json=changes, repeatable=True))

    def delete_subtask(self, key: str, subtask_id: int) -> Any:
        path = f"{_session(key)}/subtasks/{int(subtask_id)}"
        return self._send(Call("DELETE", path, repeatable=True))

    # context
    def context(self, key: str, *, query_hint: str = "", token_budget: int | None = None) -> Any:
        """The assembled context: conversation, working context, findings, memories and
        summary within the budget, and the markdown `prompt` to inject."""
        params = _drop_none(query_hint=query_hint or None, token_budget=token_budget)
        return self._send(Call("GET", _session(key) + "/context", params=params, repeatable=True))

    def context_items(self, key: str) -> Any:
        return self._send(
            Call("GET", _session(key) + "/context-items", repeatable=True, pick="items")
        )

    def set_context_item(
        self, key: str, name: str, value: Any, *, source: str = "explicit", confidence: float = 1.0
    ) -> Any:
        body = {"value": value, "source": source, "confidence": confidence}
        path = _session(key) + "/context-items/" + _quote(name)
        return self._send(Call("PUT", path, json=body, repeatable=True))

    def delete_context_item(self, key: str, name: str) -> Any:
        path = _session(key) + "/context-items/" + _quote(name)
        return self._send(Call("DELETE", path, repeatable=True))

    # findings
    def add_finding(
        self,
        key: str,
        *,
        tool: str,
        fact: str,
        query: str = "",
        step: int | None = None,
        success: bool = True,
        file_path: str = "",
    ) -> Any:
        body = _drop_none(
            tool=tool, fact=fact, query=query, step=step, success=success, file_path=file_path
        )
        return self._send(Call("POST", _session(key) + "/findings", json=body))

    def findings_page(self, key: str, limit: int = 50, cursor: str | None = None) -> Any:
        params = _drop_none(limit=limit, cursor=cursor)
        return self._send(Call("GET", _session(key) + "/findings", params=params, repeatable=True))

    def check_finding(self, key: str, tool: str, query: str | dict[str, Any]) -> Any:
        """Is `tool(query)` already known? `{"known", "stale", "finding"}`. `query` is the
        call's text or its arguments; long ones go in a POST body instead of the URL."""
        path = _session(key) + "/findings/check"
        if isinstance(query, str) and len(query) <= 1000:
            params = {"tool": tool, "query": query}
            return self._send(Call("GET", path, params=params, repeatable=True))
        # A read, even as a POST.
        body = {"tool": tool, "query": query}
        return self._send(Call("POST", path, json=body, repeatable=True))

    # long-term memories
    def remember(
        self,
        content: str,
        *,
        memory_type: str = "fact",
        confidence: float = 0.8,
        session: str | None = None,
    ) -> Any:
        body = _drop_none(
            content=content, memory_type=memory_type, confidence=confidence, session=session
        )
        return self._send(Call("POST", "/memories", json=body))

    def memories_page(
        self,
        query: str = "",
        *,
        memory_type: str | None = None,
        min_confidence: float | None = None,
        status: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Any:
        params = _drop_none(
            query=query or None,
            memory_type=memory_type,
            min_confidence=min_confidence,
            status=status,
            limit=limit,
            cursor=cursor,
        )
        return self._send(Call("GET", "/memories", params=params, repeatable=True))

    def recall(self, query: str = "", **filters: Any) -> Any:
        """The first page of memories: ranked by relevance to `query`, else by confidence."""
        params = _drop_none(query=query or None, **filters)
        return self._send(Call("GET", "/memories", params=params, repeatable=True, pick="items"))

    def memory(self, memory_id: int) -> Any:
        return self._send(Call("GET", f"/memories/{int(memory_id)}", repeatable=True))

    def update_memory(self, memory_id: int, **changes: Any) -> Any:
        return self._send(Call("PATCH", f"/memories/{int(memory_id)}", json=changes))

    def forget(self, memory_id: int) -> Any:
        return self._send(Call("DELETE", f"/memories/{int(memory_id)}", repeatable=True))

    def restore_memory(self, memory_id: int) -> Any:
        return self._send(Call("POST", f"/memories/{int(memory_id)}/restore", repeatable=True))

    def memory_history(self, memory_id: int) -> Any:
        path = f"/memories/{int(memory_id)}/history"
        return self._send(Call("GET", path, repeatable=True, pick="items"))

    # memory tools and search
    def tools(self, format: str = "openai") -> Any:
        return self._send(Call("GET", "/tools", params={"format": format}, repeatable=True))

    def call_tool(self, name: str, arguments: dict[str, Any], session: str | None = None) -> Any:
        body: dict[str, Any] = {"name": name, "arguments": arguments}
        if session:
            body["session"] = session
        return self._send(Call("POST", "/tools/call", json=body))

    # export and import (a session's or the whole agent's document; see memoryapp/core/export.py)
    def export_session(self, key: str) -> Any:
        return self._send(Call("GET", _session(key) + "/export", repeatable=True))

    def export_agent(self) -> Any:
        return self._send(Call("GET", "/agent/export", repeatable=True))

    def import_export(
        self, document: JSON, *, session: str | None = None, replace: bool = False
    ) -> Any:
        """Recreate what an export holds in this agent. Never retried after it may have
        reached the server: an import that went through and is sent again is a 409 for its
        sessions, but with `replace=True`, or for a document of memories only, it would
        store them a second time."""
        params = _drop_none(session=session, replace="true" if replace else None)
        return self._send(Call("POST", "/import", params=params, json=document))

    def search(
        self, q: str, kind: str | None = None, limit: int = 20, cursor: str | None = None
    ) -> Any:
        params = _drop_none(q=q, kind=kind, limit=limit, cursor=cursor)
        return self._send(Call("GET", "/search", params=params, repeatable=True))


def _http_options(
    base_url: str, api_key: str, timeout: float | httpx.Timeout, headers: dict[str, str] | None
) -> dict[str, Any]:
    return {
        "base_url": base_url.rstrip("/") + "/api/v1",
        "headers": {**(headers or {}), "Authorization": f"Bearer {api_key}"},
        "timeout": timeout,
    }


def _sends_itself(base_url: str) -> bool:
    """Whether a client of `base_url` sends through agents.transport: plain http, and no
    proxy in the environment for it (httpx's client applies those)."""
    return base_url.startswith("http://") and not ({"http", "all"} & set(getproxies()))


def _own_request(http: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
    """The request httpx's client would send for `call` (refused, as httpx refuses it,
    once the client is closed)."""
    if http.is_closed:
        raise RuntimeError("Cannot send a request, as the client has been closed.")
    return http.build_request(
        call.method, call.path, params=call.params, json=call.json, headers=call.headers
    )


_HTTPX_LOG = logging.getLogger("httpx")


def _log(response: httpx.Response) -> None:
    """The line httpx's client logs for each request (level INFO, logger "httpx")."""
    if _HTTPX_LOG.isEnabledFor(logging.INFO):
        request = response.request
        _HTTPX_LOG.info(
            'HTTP Request: %s %s "%s %d %s"',
            request.method, request.url, response.http_version, response.status_code,
            response.reason_phrase,
        )  # fmt: skip


# --- the synchronous client ------------------------------------------------------------------


class MemoryClient(_Operations):
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = 30.0,
        retries: int = 2,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy(retries=retries)
        # Sends straight through its own transport where it can (the module's docstring).
        self._own = H11Transport() if transport is None and _sends_itself(base_url) else None
        self._http = httpx.Client(
            **_http_options(base_url, api_key, timeout, headers), transport=self._own or transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: Call) -> Any:
        attempt = 0
        while True:
            outcome: httpx.Response | Exception
            try:
                if self._own is None:
                    outcome = self._http.request(
                        call.method, call.path, params=call.params, json=call.json,
                        headers=call.headers,
                    )  # fmt: skip
                else:
                    outcome = self._own_send(call)
            except httpx.TransportError as exc:
                outcome = exc
            wait = _retry_wait(call, self.retry, attempt, outcome)
            if wait is None:
                if isinstance(outcome, Exception):
                    raise Unreachable(f"{call.method} {call.path}: {outcome}") from outcome
                return _result(call, outcome)
            time.sleep(wait)
            attempt += 1

    def _own_send(self, call: Call) -> httpx.Response:
        """`call` sent straight through the client's own transport: the request httpx's
        client would build, without its layers around the transport (authentication
        flows, redirects, hooks, cookies: the client uses none)."""
        request = _own_request(self._http, call)
        assert self._own is not None
        response = self._own.handle_request(request)
        response.request = request
        try:
            response.read()
        finally:
            response.close()
        _log(response)
        return response

    # Every page, following cursors.
    def _every(self, fetch: Callable[[str | None], Any]) -> Iterator[JSON]:
        cursor = None
        while True:
            page = fetch(cursor)
            yield from page["items"]
            if not (cursor := page["next_cursor"]):
                return

    def sessions(self, status: str = "active", page_size: int = 100) -> Iterator[JSON]:
        return self._every(lambda cursor: self.sessions_page(status, page_size, cursor))

    def messages(self, key: str, page_size: int = 200) -> Iterator[JSON]:
        return self._every(lambda cursor: self.messages_page(key, page_size, cursor))

    def turns(self, key: str, page_size: int = 100) -> Iterator[JSON]:
        return self._every(lambda cursor: self.turns_page(key, page_size, cursor))

    def findings(self, key: str, page_size: int = 200) -> list[JSON]:
        """All the session's findings, most recently learned first."""
        return list(self._every(lambda cursor: self.findings_page(key, page_size, cursor)))


# --- the async client ------------------------------------------------------------------------


class AsyncMemoryClient(_Operations):
    """The same operations as `MemoryClient`, each a coroutine."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = 30.0,
        retries: int = 2,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy(retries=retries)
        # As MemoryClient's.
        own = transport is None and _sends_itself(base_url)
        self._own = AsyncH11Transport() if own else None
        self._http = httpx.AsyncClient(
            **_http_options(base_url, api_key, timeout, headers), transport=self._own or transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> Any:
        attempt = 0
        while True:
            outcome: httpx.Response | Exception
            try:
                if self._own is None:
                    outcome = await self._http.request(
                        call.method, call.path, params=call.params, json=call.json,
                        headers=call.headers,
                    )  # fmt: skip
                else:
                    outcome = await self._own_send(call)
            except httpx.TransportError as exc:
                outcome = exc
            wait = _retry_wait(call, self.retry, attempt, outcome)
            if wait is None:
                if isinstance(outcome, Exception):
                    raise Unreachable(f"{call.method} {call.path}: {outcome}") from outcome
                return _result(call, outcome)
            await asyncio.sleep(wait)
            attempt += 1

    async def _own_send(self, call: Call) -> httpx.Response:
        """As MemoryClient._own_send."""
        request = _own_request(self._http, call)
        assert self._own is not None
        response = await self._own.handle_async_request(request)
        response.request = request
        try:
            await response.aread()
        finally:
            await response.aclose()
        _log(response)
        return response

    async def _every(self, fetch: Callable[[str | None], Any]) -> AsyncIterator[JSON]:
        cursor = None
        while True:
            page = await fetch(cursor)
            for item in page["items"]:
                yield item
            if not (cursor := page["next_cursor"]):
                return

    def sessions(self, status: str = "active", page_size: int = 100) -> AsyncIterator[JSON]:
        return self._every(lambda cursor: self.sessions_page(status, page_size, cursor))

    def messages(self, key: str, page_size: int = 200) -> AsyncIterator[JSON]:
        return self._every(lambda cursor: self.messages_page(key, page_size, cursor))

    def turns(self, key: str, page_size: int = 100) -> AsyncIterator[JSON]:
        return self._every(lambda cursor: self.turns_page(key, page_size, cursor))

    async def findings(self, key: str, page_size: int = 200) -> list[JSON]:
        """All the session's findings, most recently learned first."""
        every = self._every(lambda cursor: self.findings_page(key, page_size, cursor))
        return [item async for item in every]
