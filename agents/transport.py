"""Lean HTTP/1.1 transports for httpx: h11 parses and writes the messages, a plain socket
(`H11Transport`) or asyncio's own transport (`AsyncH11Transport`) carries the bytes.
memoryapp's clients send their plain-http requests through them (agents/client.py).

httpx's default transports (httpcore, over anyio for async) run several layers of Python
for each request, and an agent's calls come after a pause (the model's turn), when that
code runs cold. Measured against memoryapp after such a pause, these take 0.3–0.9 ms less
of the client's CPU per request (README, *Benchmarks*). They keep httpx's contract: the
same exceptions (`httpx.ConnectError`, `ReadTimeout`, `RemoteProtocolError`, ...), the
four timeouts (connect, read, write, and pool: how long to wait for a free connection),
a pool of kept-alive connections (`max_connections` open at most, `max_keepalive` idle
ones kept, each for `keepalive_expiry` seconds), bodies streamed both ways, an answer
sent before the request's body was read (a 413) returned rather than the write's error.
What they do not do they hand to httpx's own transport: https, and any scheme but http.
A proxy is the client's to choose (agents.client uses httpx's own transports when one is
configured). Once closed, a transport refuses new requests (RuntimeError) and closes each
connection given back.
"""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

import h11
import httpx

READ_SIZE = 64 * 1024
# The async transport stops reading from a connection while this much has arrived unread.
READ_AHEAD = 256 * 1024

Origin = tuple[bytes, int]
CLOSED = "the transport has been closed"


def _origin(url: httpx.URL) -> Origin:
    return url.raw_host, url.port or 80


def _request_head(state: h11.Connection, request: httpx.Request) -> bytes:
    return state.send(
        h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
    )


def _whole_message(state: h11.Connection, request: httpx.Request) -> bytes | None:
    """The request's bytes when its body is already in memory (json=, content=bytes): one
    write. None for a streamed body."""
    if not isinstance(request.stream, httpx.ByteStream):
        return None
    body = request.read()
    head = _request_head(state, request)
    return (
        head + (state.send(h11.Data(data=body)) if body else b"") + state.send(h11.EndOfMessage())
    )


def _response(head: h11.Response, stream: httpx.SyncByteStream | httpx.AsyncByteStream):
    return httpx.Response(
        head.status_code,
        headers=head.headers.raw_items(),
        stream=stream,
        extensions={"http_version": b"HTTP/" + head.http_version, "reason_phrase": head.reason},
    )


def _the_head(event: object, request: httpx.Request) -> h11.Response | None:
    """The answer's head, None for an informational answer (1xx) before it; anything else
    is the server's fault."""
    if isinstance(event, h11.Response):
        return event
    if isinstance(event, h11.InformationalResponse):
        return None
    raise httpx.RemoteProtocolError(
        f"unexpected {type(event).__name__} before a response", request=request
    )


def _no_answer(request: httpx.Request) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(
        "Server disconnected without sending a response.", request=request
    )


def _read_failed(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """httpx's error for what reading the answer raised (TimeoutError, h11's protocol
    error, OSError)."""
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout("waiting for the response", request=request)
    if isinstance(exc, h11.RemoteProtocolError):
        return httpx.RemoteProtocolError(str(exc), request=request)
    return httpx.ReadError(str(exc) or repr(exc), request=request)


def _write_failed(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """httpx's error for what sending the request raised (TimeoutError, OSError, h11's
    refusal of the request)."""
    if isinstance(exc, TimeoutError):
        return httpx.WriteTimeout("sending the request", request=request)
    if isinstance(exc, h11.LocalProtocolError):
        return httpx.LocalProtocolError(str(exc), request=request)
    return httpx.WriteError(str(exc) or repr(exc), request=request)


def _connect_failed(exc: OSError, origin: Origin, request: httpx.Request) -> httpx.TransportError:
    if isinstance(exc, TimeoutError):
        host = origin[0].decode("ascii")
        return httpx.ConnectTimeout(f"connecting to {host}:{origin[1]}", request=request)
    return httpx.ConnectError(str(exc) or repr(exc), request=request)


READ_ERRORS = (TimeoutError, h11.RemoteProtocolError, OSError)
WRITE_ERRORS = (TimeoutError, h11.LocalProtocolError, OSError)


def _ends_cleanly(state: h11.Connection) -> bool:
    """Both sides of the exchange are done, and the server sent nothing after its answer:
    the connection can carry another."""
    if state.our_state is h11.DONE and state.their_state is h11.DONE and not state.trailing_data[0]:
        state.start_next_cycle()
        return True
    return False


class _Pool:
    """The bookkeeping both transports share: idle connections (most recently used
    last), how many are open, the limits. The caller holds whatever lock it needs."""

    def __init__(self, max_connections: int, max_keepalive: int, keepalive_expiry: float):
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.max_connections = max_connections
        self.max_keepalive = max_keepalive
        self.keepalive_expiry = keepalive_expiry
        self.idle: deque = deque()
        self.open = 0
        self.closed = False

    def take(self, origin: Origin, usable: Callable) -> tuple[object | None, list]:
        """The most recently used idle connection to `origin` that `usable` accepts, and
        the spent ones found on the way (expired, or `origin`'s that `usable` refused),
        taken out to be closed. `usable` is asked only of the candidates, newest first
        (the sync transport's asks the socket: one system call each); another origin's
        idle connection goes when it expires, is a candidate, or gives its place."""
        now = time.monotonic()
        spent = []
        found = None
        for connection in reversed(self.idle):
            if now - connection.idle_since >= self.keepalive_expiry:
                spent.append(connection)
            elif found is None and connection.origin == origin:
                if usable(connection):
                    found = connection
                else:
                    spent.append(connection)
        for connection in spent:
            self.idle.remove(connection)
        if found is not None:
            self.idle.remove(found)
        return found, spent

    def give_back(self, connection, ended: bool) -> list:
        """A response has been read (or abandoned): its connection kept idle when its
        exchange ended cleanly (and the transport is open). The connections to close, not
        yet counted out: this one otherwise, the idle ones beyond max_keepalive."""
        if not (ended and not self.closed and _ends_cleanly(connection.h11)):
            return [connection]
        connection.idle_since = time.monotonic()
        self.idle.append(connection)
        extra = []
        while len(self.idle) > self.max_keepalive:
            extra.append(self.idle.popleft())
        return extra


class _Body:
    """A response's body as it arrives; closing it gives its connection back."""

    def __init__(self, transport, connection, request: httpx.Request, timeout: float | None):
        self._transport = transport
        self._connection = connection
        self._request = request
        self._timeout = timeout
        self._ended = False
        self._closed = False

    def _bytes(self, event: object) -> bytes | None:
        """The bytes of one of the body's events; None at its end."""
        if isinstance(event, h11.Data):
            return bytes(event.data)
        if isinstance(event, h11.EndOfMessage):
            self._ended = True
            return None
        if isinstance(event, h11.ConnectionClosed):
            raise httpx.RemoteProtocolError(
                "the server closed the connection mid-response", request=self._request
            )
        # h11.PAUSED: the connection switched protocols (CONNECT, Upgrade), which this
        # transport does not carry.
        raise httpx.RemoteProtocolError(
            f"unexpected {event!r} in a response's body", request=self._request
        )


# --- the synchronous transport ----------------------------------------------------------------


class _SocketConnection:
    __slots__ = ("origin", "sock", "h11", "idle_since")

    def __init__(self, origin: Origin, sock: socket.socket) -> None:
        self.origin = origin
        self.sock = sock
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    def quiet(self) -> bool:
        """Nothing to read on an idle connection: the server has neither closed it nor
        sent anything unasked."""
        try:
            if hasattr(select, "poll"):
                poller = select.poll()
                poller.register(self.sock, select.POLLIN)
                return not poller.poll(0)
            return not select.select([self.sock], [], [], 0)[0]  # Windows
        except (OSError, ValueError):
            return False


class H11Transport(httpx.BaseTransport):
    """httpx's transport interface over h11 and blocking sockets, for `http://` URLs.
    Safe to share between threads (each request has a connection to itself)."""

    def __init__(
        self,
        *,
        max_connections: int = 100,
        max_keepalive: int = 20,
        keepalive_expiry: float = 5.0,
        fallback: httpx.BaseTransport | None = None,
    ) -> None:
        self._pool = _Pool(max_connections, max_keepalive, keepalive_expiry)
        self._changed = threading.Condition()
        self._fallback = fallback

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            return self._other().handle_request(request)
        timeouts = request.extensions.get("timeout", {})
        connection = self._connection(request, timeouts.get("pool"), timeouts.get("connect"))
        read_timeout = timeouts.get("read")
        try:
            try:
                self._send(connection, request, timeouts.get("write"))
            except httpx.WriteError as unsent:
                # The server may have answered and closed before reading the whole body
                # (a 413): its answer, when there is one, says more than the write's error.
                try:
                    head = self._head(connection, request, read_timeout)
                except httpx.TransportError:
                    raise unsent from None
            else:
                head = self._head(connection, request, read_timeout)
        except BaseException:
            self._release(connection, False)
            raise
        return _response(head, _SocketBody(self, connection, request, read_timeout))

    def close(self) -> None:
        with self._changed:
            self._pool.closed = True
            idle = list(self._pool.idle)
            self._pool.idle.clear()
            self._pool.open -= len(idle)
            self._changed.notify_all()
            fallback = self._fallback
        for connection in idle:
            connection.sock.close()
        if fallback is not None:
            fallback.close()

    def _other(self) -> httpx.BaseTransport:
        with self._changed:
            if self._fallback is None:
                self._fallback = httpx.HTTPTransport()
            return self._fallback

    def _connection(
        self, request: httpx.Request, pool_timeout: float | None, connect_timeout: float | None
    ) -> _SocketConnection:
        origin = _origin(request.url)
        deadline = None if pool_timeout is None else time.monotonic() + pool_timeout
        with self._changed:
            while True:
                if self._pool.closed:
                    raise RuntimeError(CLOSED)
                found, spent = self._pool.take(origin, _SocketConnection.quiet)
                self._pool.open -= len(spent)
                for connection in spent:
                    connection.sock.close()
                if found is not None:
                    return found
                if self._pool.open < self._pool.max_connections:
                    break
                if self._pool.idle:  # another origin's idle connection gives its place
                    self._pool.open -= 1
                    self._pool.idle.popleft().sock.close()
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if (left is not None and left <= 0) or not self._changed.wait(left):
                    # A notify that came as the wait ran out is passed on, not lost.
                    self._changed.notify()
                    raise httpx.PoolTimeout("no connection freed in time", request=request)
            self._pool.open += 1
        try:
            sock = socket.create_connection(
                (origin[0].decode("ascii"), origin[1]), timeout=connect_timeout
            )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException as exc:
            with self._changed:
                self._pool.open -= 1
                self._changed.notify()
            if isinstance(exc, OSError):
                raise _connect_failed(exc, origin, request) from exc
            raise
        return _SocketConnection(origin, sock)

    def _release(self, connection: _SocketConnection, ended: bool) -> None:
        with self._changed:
            closing = self._pool.give_back(connection, ended)
            self._pool.open -= len(closing)
            self._changed.notify()
        for spent in closing:
            spent.sock.close()

    def _send(
        self, connection: _SocketConnection, request: httpx.Request, timeout: float | None
    ) -> None:
        sock, state = connection.sock, connection.h11
        try:
            sock.settimeout(timeout)
            whole = _whole_message(state, request)
            if whole is not None:
                sock.sendall(whole)
                return
            sock.sendall(_request_head(state, request))
            for chunk in request.stream:  # type: ignore[union-attr]
                if chunk:
                    sock.sendall(state.send(h11.Data(data=chunk)))
            sock.sendall(state.send(h11.EndOfMessage()))
        except WRITE_ERRORS as exc:
            raise _write_failed(exc, request) from exc

    def _head(
        self, connection: _SocketConnection, request: httpx.Request, timeout: float | None
    ) -> h11.Response:
        while (head := _the_head(self._event(connection, request, timeout), request)) is None:
            pass
        return head

    def _event(
        self, connection: _SocketConnection, request: httpx.Request, timeout: float | None
    ) -> object:
        sock, state = connection.sock, connection.h11
        try:
            while (event := state.next_event()) is h11.NEED_DATA:
                sock.settimeout(timeout)
                data = sock.recv(READ_SIZE)
                if not data and state.their_state is h11.SEND_RESPONSE:
                    raise _no_answer(request)
                state.receive_data(data)
        except READ_ERRORS as exc:
            raise _read_failed(exc, request) from exc
        return event


class _SocketBody(_Body, httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        while not self._ended:
            event = self._transport._event(self._connection, self._request, self._timeout)
            if (data := self._bytes(event)) is not None:
                yield data

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport._release(self._connection, self._ended)


# --- the async transport ----------------------------------------------------------------------


class _Wire(asyncio.Protocol):
    """One TCP connection's bytes for the async transport: what has arrived (reading
    paused while READ_AHEAD is unread), whether the peer closed, and backpressure for
    writes."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.reading_paused = False
        self.waiter: asyncio.Future[None] | None = None
        self.writable: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_AHEAD and not self.reading_paused and self.transport:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self.writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self) -> bytes:
        """What has arrived, waiting for something; b"" once the peer has closed."""
        if not self.buffer and not self.closed:
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        data = bytes(self.buffer)
        self.buffer.clear()
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()
        return data

    async def write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection was closed")
        self.transport.write(data)
        if self.writable is not None:
            await self.writable
            if self.closed:
                raise ConnectionResetError("the connection was closed")

    def close(self, clean: bool = True) -> None:
        """Close the connection: after what is left to write when `clean` (an idle one
        has nothing), at once otherwise (an exchange that failed or was abandoned)."""
        if self.transport is not None:
            try:
                self.transport.close() if clean else self.transport.abort()
            except RuntimeError:  # its event loop has ended: the socket goes with it
                pass


class _WireConnection:
    __slots__ = ("origin", "wire", "h11", "idle_since")

    def __init__(self, origin: Origin, wire: _Wire) -> None:
        self.origin = origin
        self.wire = wire
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0


async def _within(awaitable, seconds: float | None):
    if seconds is None:
        return await awaitable
    async with asyncio.timeout(seconds):
        return await awaitable


class AsyncH11Transport(httpx.AsyncBaseTransport):
    """httpx's async transport interface over h11 and asyncio, for `http://` URLs. A
    connection serves the event loop that opened it (one kept from a loop that has
    ended is closed, not reused)."""

    def __init__(
        self,
        *,
        max_connections: int = 100,
        max_keepalive: int = 20,
        keepalive_expiry: float = 5.0,
        fallback: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._pool = _Pool(max_connections, max_keepalive, keepalive_expiry)
        self._slots: deque[asyncio.Future[None]] = deque()
        self._fallback = fallback

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            if self._fallback is None:
                self._fallback = httpx.AsyncHTTPTransport()
            return await self._fallback.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        connection = await self._connection(request, timeouts.get("pool"), timeouts.get("connect"))
        read_timeout = timeouts.get("read")
        try:
            try:
                await self._send(connection, request, timeouts.get("write"))
            except httpx.WriteError as unsent:
                # As H11Transport: an answer sent before the body was read says more.
                try:
                    head = await self._head(connection, request, read_timeout)
                except httpx.TransportError:
                    raise unsent from None
            else:
                head = await self._head(connection, request, read_timeout)
        except BaseException:
            self._release(connection, False)
            raise
        return _response(head, _WireBody(self, connection, request, read_timeout))

    async def aclose(self) -> None:
        self._pool.closed = True
        while self._pool.idle:
            self._pool.idle.pop().wire.close()
            self._pool.open -= 1
        while self._slots:  # each waiter finds the transport closed
            self._wake()
        if self._fallback is not None:
            await self._fallback.aclose()

    async def _connection(
        self, request: httpx.Request, pool_timeout: float | None, connect_timeout: float | None
    ) -> _WireConnection:
        loop = asyncio.get_running_loop()
        origin = _origin(request.url)
        deadline = None if pool_timeout is None else loop.time() + pool_timeout

        def usable(connection: _WireConnection) -> bool:
            wire = connection.wire
            return (
                wire.loop is loop
                and not wire.closed
                and not wire.buffer
                and wire.transport is not None
                and not wire.transport.is_closing()
            )

        while True:
            if self._pool.closed:
                raise RuntimeError(CLOSED)
            found, spent = self._pool.take(origin, usable)
            for connection in spent:
                connection.wire.close()
            self._pool.open -= len(spent)
            if found is not None:
                return found
            if self._pool.open < self._pool.max_connections:
                break
            if self._pool.idle:  # another origin's idle connection gives its place
                self._pool.idle.popleft().wire.close()
                self._pool.open -= 1
                continue
            await self._free_slot(loop, deadline, request)
        self._pool.open += 1
        try:
            _, wire = await _within(
                loop.create_connection(lambda: _Wire(loop), origin[0].decode("ascii"), origin[1]),
                connect_timeout,
            )
        except BaseException as exc:
            self._pool.open -= 1
            self._wake()
            if isinstance(exc, OSError):
                raise _connect_failed(exc, origin, request) from exc
            raise
        return _WireConnection(origin, wire)

    async def _free_slot(
        self, loop: asyncio.AbstractEventLoop, deadline: float | None, request: httpx.Request
    ) -> None:
        """Wait until a connection is given back or closed (PoolTimeout at `deadline`)."""
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            raise httpx.PoolTimeout("no connection freed in time", request=request)
        slot = loop.create_future()
        self._slots.append(slot)
        try:
            await _within(slot, left)
        except BaseException as exc:
            if slot.done() and not slot.cancelled():
                self._wake()  # woken, but not going on: the next waiter may
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout("no connection freed in time", request=request) from None
            raise
        finally:
            if slot in self._slots:
                self._slots.remove(slot)

    def _release(self, connection: _WireConnection, ended: bool) -> None:
        closing = self._pool.give_back(connection, ended and not connection.wire.closed)
        for spent in closing:
            spent.wire.close(clean=spent is not connection)
        self._pool.open -= len(closing)
        self._wake()

    def _wake(self) -> None:
        """A connection was given back or closed: a request waiting for one may go on."""
        while self._slots:
            slot = self._slots.popleft()
            if not slot.done():
                slot.set_result(None)
                return

    async def _send(
        self, connection: _WireConnection, request: httpx.Request, timeout: float | None
    ) -> None:
        wire, state = connection.wire, connection.h11
        try:
            whole = _whole_message(state, request)
            if whole is not None:
                await _within(wire.write(whole), timeout)
                return
            await _within(wire.write(_request_head(state, request)), timeout)
            async for chunk in request.stream:  # type: ignore[union-attr]
                if chunk:
                    await _within(wire.write(state.send(h11.Data(data=chunk))), timeout)
            await _within(wire.write(state.send(h11.EndOfMessage())), timeout)
        except WRITE_ERRORS as exc:
            raise _write_failed(exc, request) from exc

    async def _head(
        self, connection: _WireConnection, request: httpx.Request, timeout: float | None
    ) -> h11.Response:
        while True:
            head = _the_head(await self._event(connection, request, timeout), request)
            if head is not None:
                return head

    async def _event(
        self, connection: _WireConnection, request: httpx.Request, timeout: float | None
    ) -> object:
        wire, state = connection.wire, connection.h11
        try:
            while (event := state.next_event()) is h11.NEED_DATA:
                data = await _within(wire.read(), timeout)
                if not data and state.their_state is h11.SEND_RESPONSE:
                    raise _no_answer(request)
                state.receive_data(data)
        except READ_ERRORS as exc:
            raise _read_failed(exc, request) from exc
        return event


class _WireBody(_Body, httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._ended:
            event = await self._transport._event(self._connection, self._request, self._timeout)
            if (data := self._bytes(event)) is not None:
                yield data

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport._release(self._connection, self._ended)
