"""A small typed client for the memoryapp agent API (httpx).

    client = MemoryClient("http://127.0.0.1:8000", api_key)
    client.append_turn("run-42", [{"role": "user", "content": "hi"}])
    history = client.history("run-42")

Errors come back as `ApiError` carrying the HTTP status and the server's `detail`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, NotRequired, Required, TypedDict
from urllib.parse import quote

import httpx


class Message(TypedDict, total=False):
    role: Required[str]
    content: Required[str | None]
    name: str
    tool_call_id: str
    tool_calls: list[dict[str, Any]]


class ToolCall(TypedDict):
    tool: str
    query: NotRequired[str | dict[str, Any]]
    output: NotRequired[str]
    success: NotRequired[bool | None]
    file_path: NotRequired[str]
    call_id: NotRequired[str]
    details: NotRequired[dict[str, Any]]


class ApiError(Exception):
    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"{status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


class MemoryClient:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text
            raise ApiError(response.status_code, detail)
        if response.status_code == 204:
            return None
        return response.json()

    @staticmethod
    def _session_path(key: str) -> str:
        if "/" in key:
            # Servers decode %2F before routing, so a '/' can never reach the session.
            raise ValueError("a session key cannot contain '/'")
        return "/sessions/" + quote(key, safe="")

    def health(self) -> dict:
        return self._request("GET", "/health")

    def agent(self) -> dict:
        return self._request("GET", "/agent")

    def update_agent(self, **settings: Any) -> dict:
        return self._request("PATCH", "/agent", json=settings)

    def put_session(self, key: str, **fields: Any) -> dict:
        return self._request("PUT", self._session_path(key), json=fields)

    def session(self, key: str) -> dict:
        return self._request("GET", self._session_path(key))

    def delete_session(self, key: str, scope: str = "all") -> None:
        self._request("DELETE", self._session_path(key), params={"scope": scope})

    def sessions(self, status: str = "active", page_size: int = 100) -> Iterator[dict]:
        """Every session, following cursors page by page."""
        cursor = None
        while True:
            params: dict[str, Any] = {"status": status, "limit": page_size}
            if cursor:
                params["cursor"] = cursor
            page = self._request("GET", "/sessions", params=params)
            yield from page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return

    def append_turn(
        self,
        key: str,
        messages: list[Message],
        *,
        usage: dict[str, int] | None = None,
        tool_calls: list[ToolCall] | None = None,
        model: str | None = None,
        timestamp: str | None = None,
        idempotency_key: str | None = None,
        retries: int = 2,
    ) -> dict:
        """Append one turn. Retries on network errors and 5xx reuse one Idempotency-Key,
        so a retried request is stored once."""
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
        path = self._session_path(key) + "/turns"
        for attempt in range(retries + 1):
            try:
                return self._request("POST", path, json=body, headers=headers)
            except httpx.TransportError:
                if attempt == retries:
                    raise
            except ApiError as exc:
                if exc.status_code < 500 or attempt == retries:
                    raise
        raise AssertionError("unreachable")

    def history(
        self, key: str, *, max_messages: int | None = None, max_tokens: int | None = None
    ) -> dict:
        params = {
            k: v
            for k, v in (("max_messages", max_messages), ("max_tokens", max_tokens))
            if v is not None
        }
        return self._request("GET", self._session_path(key) + "/history", params=params)

    def turns(self, key: str, page_size: int = 100) -> Iterator[dict]:
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": page_size}
            if cursor:
                params["cursor"] = cursor
            page = self._request("GET", self._session_path(key) + "/turns", params=params)
            yield from page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return

    # --- memory engine -----------------------------------------------------------------

    def context(self, key: str, *, query_hint: str = "", token_budget: int | None = None) -> dict:
        params: dict[str, Any] = {}
        if query_hint:
            params["query_hint"] = query_hint
        if token_budget is not None:
            params["token_budget"] = token_budget
        return self._request("GET", self._session_path(key) + "/context", params=params)

    def context_items(self, key: str) -> list[dict]:
        return self._request("GET", self._session_path(key) + "/context-items")["items"]

    def set_context_item(
        self, key: str, name: str, value: Any, *, source: str = "explicit", confidence: float = 1.0
    ) -> dict:
        return self._request(
            "PUT",
            self._session_path(key) + "/context-items/" + quote(name, safe=""),
            json={"value": value, "source": source, "confidence": confidence},
        )

    def delete_context_item(self, key: str, name: str) -> None:
        self._request("DELETE", self._session_path(key) + "/context-items/" + quote(name, safe=""))

    def add_finding(self, key: str, **finding: Any) -> dict:
        return self._request("POST", self._session_path(key) + "/findings", json=finding)

    def findings(self, key: str) -> list[dict]:
        return self._request("GET", self._session_path(key) + "/findings", params={"limit": 200})[
            "items"
        ]

    def check_finding(self, key: str, tool: str, query: str | dict[str, Any]) -> dict:
        """Is `tool(query)` already known? `query` is the call's text or its arguments;
        long ones are sent in a POST body instead of the URL."""
        path = self._session_path(key) + "/findings/check"
        if isinstance(query, str) and len(query) <= 1000:
            return self._request("GET", path, params={"tool": tool, "query": query})
        return self._request("POST", path, json={"tool": tool, "query": query})

    def remember(
        self,
        content: str,
        *,
        memory_type: str = "fact",
        confidence: float = 0.8,
        session: str | None = None,
    ) -> dict:
        body: dict[str, Any] = {
            "content": content,
            "memory_type": memory_type,
            "confidence": confidence,
        }
        if session:
            body["session"] = session
        return self._request("POST", "/memories", json=body)

    def recall(self, query: str = "", **filters: Any) -> list[dict]:
        params = {"query": query, **filters} if query else dict(filters)
        return self._request("GET", "/memories", params=params)["items"]

    def forget(self, memory_id: int) -> None:
        self._request("DELETE", f"/memories/{int(memory_id)}")

    def restore_memory(self, memory_id: int) -> dict:
        return self._request("POST", f"/memories/{int(memory_id)}/restore")

    def update_memory(self, memory_id: int, **changes: Any) -> dict:
        return self._request("PATCH", f"/memories/{int(memory_id)}", json=changes)

    def memory_history(self, memory_id: int) -> list[dict]:
        return self._request("GET", f"/memories/{int(memory_id)}/history")["items"]

    def tools(self, format: str = "openai") -> list[dict]:
        return self._request("GET", "/tools", params={"format": format})

    def call_tool(self, name: str, arguments: dict[str, Any], session: str | None = None) -> dict:
        body: dict[str, Any] = {"name": name, "arguments": arguments}
        if session:
            body["session"] = session
        return self._request("POST", "/tools/call", json=body)

    def search(self, q: str, kind: str | None = None, limit: int = 20) -> dict:
        params: dict[str, Any] = {"q": q, "limit": limit}
        if kind:
            params["kind"] = kind
        return self._request("GET", "/search", params=params)
