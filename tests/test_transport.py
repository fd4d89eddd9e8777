"""agents.transport against scripted HTTP/1.1 servers: each behaviour is checked on both
of its transports and on httpx's own (the contract it keeps), sync and async."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable

import h11
import httpx
import pytest

from agents import transport as transport_module
from agents.client import AsyncMemoryClient, MemoryClient, Unreachable
from agents.transport import AsyncH11Transport, H11Transport

# What a scripted server does after a request: its answer's bytes, and then.
KEEP, CLOSE, HANG = "keep", "close", "hang"


def ok(body: bytes = b'{"ok": true}', *headers: tuple[str, str]) -> bytes:
    head = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers]
    lines = "".join(f"{name}: {value}\r\n" for name, value in head)
    return f"HTTP/1.1 200 OK\r\n{lines}\r\n".encode() + body


class Server:
    """A TCP server on 127.0.0.1 that parses each request (h11) and answers as
    `answer(request, body, connection_number)` says: (bytes to send, KEEP | CLOSE | HANG).
    With `read_body=False` it answers after the head, without reading the body."""

    def __init__(self, answer: Callable, read_body: bool = True) -> None:
        self.answer = answer
        self.read_body = read_body
        self.accepted = 0
        self.requests: list[tuple[h11.Request, bytes]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(sock, self.accepted), daemon=True).start()

    def _serve(self, sock: socket.socket, number: int) -> None:
        state = h11.Connection(h11.SERVER)
        with sock:
            while True:
                request, body = None, b""
                while True:
                    event = state.next_event()
                    if event is h11.NEED_DATA:
                        try:
                            data = sock.recv(65536)
                        except OSError:  # the client dropped the connection
                            return
                        if not data:
                            return
                        state.receive_data(data)
                    elif isinstance(event, h11.Request):
                        request = event
                        if not self.read_body:
                            break
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                self.requests.append((request, body))
                data, then = self.answer(request, body, number)
                sock.sendall(data)
                if then == HANG:
                    self.stopped.wait(10)
                    return
                if then == CLOSE or not self.read_body:
                    return
                state = h11.Connection(h11.SERVER)  # a fresh cycle: answers are raw bytes

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


@pytest.fixture
def serve():
    servers: list[Server] = []

    def start(answer: Callable, **options) -> Server:
        servers.append(Server(answer, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


SYNC = [H11Transport, httpx.HTTPTransport]
ASYNC = [AsyncH11Transport, httpx.AsyncHTTPTransport]
TIMEOUT = httpx.Timeout(2.0, read=0.3)


def unused_port() -> int:
    """A port of 127.0.0.1 nothing listens on (a connection to it is refused)."""
    with socket.create_server(("127.0.0.1", 0)) as unused:
        return unused.getsockname()[1]


def get(transport: httpx.BaseTransport, url: str, **options) -> httpx.Response:
    with httpx.Client(transport=transport, timeout=TIMEOUT) as client:
        return client.get(url, **options)


def always(data: bytes, then: str = KEEP) -> Callable:
    return lambda request, body, number: (data, then)


# --- the synchronous transport ----------------------------------------------------------------


@pytest.mark.parametrize("kind", SYNC)
def test_a_request_and_its_answer_go_through_whole(kind, serve):
    server = serve(lambda request, body, number: (ok(b'{"echo": %d}' % len(body)), KEEP))
    with httpx.Client(transport=kind(), timeout=TIMEOUT, base_url=server.url) as client:
        answer = client.post("/a/b", params={"q": "x y"}, json={"k": "v" * 100})
        assert answer.status_code == 200 and answer.json() == {"echo": 108}
        assert answer.headers["content-type"] == "application/json"
        assert answer.http_version == "HTTP/1.1" and answer.reason_phrase == "OK"
    request, body = server.requests[0]
    assert request.method == b"POST" and request.target == b"/a/b?q=x+y"
    headers = dict(request.headers)
    assert headers[b"host"] == server.url.removeprefix("http://").encode()
    assert headers[b"content-type"] == b"application/json"
    assert body == b'{"k":"' + b"v" * 100 + b'"}'


@pytest.mark.parametrize("kind", SYNC)
def test_a_kept_alive_connection_carries_the_next_request(kind, serve):
    server = serve(always(ok()))
    with httpx.Client(transport=kind(), timeout=TIMEOUT) as client:
        for _ in range(3):
            assert client.get(server.url + "/").json() == {"ok": True}
    assert server.accepted == 1


@pytest.mark.parametrize("kind", SYNC)
def test_a_connection_the_server_closed_is_not_used_again(kind, serve):
    server = serve(always(ok(), CLOSE))  # answers and closes, with no Connection: close
    with httpx.Client(transport=kind(), timeout=TIMEOUT) as client:
        for _ in range(3):
            assert client.get(server.url + "/").status_code == 200
            time.sleep(0.05)  # the server's close arrives before the next request
    assert server.accepted == 3


@pytest.mark.parametrize("kind", SYNC)
def test_connection_close_is_honoured(kind, serve):
    # The server says it will close but keeps the socket open: the client must not reuse it.
    server = serve(always(ok(b"{}", ("Connection", "close"))))
    with httpx.Client(transport=kind(), timeout=TIMEOUT) as client:
        client.get(server.url + "/")
        client.get(server.url + "/")
    assert server.accepted == 2


HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"  # a HEAD's answer: no body
NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
NOT_MODIFIED = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"
CONTINUE_FIRST = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"{}")


@pytest.mark.parametrize("kind", SYNC)
@pytest.mark.parametrize(
    ("method", "answer", "body"),
    [
        ("HEAD", HEAD_200, b""),
        ("GET", NO_CONTENT, b""),
        ("GET", NOT_MODIFIED, b""),
        ("GET", CONTINUE_FIRST, b"{}"),
    ],
)
def test_answers_without_a_body_and_informational_ones(kind, method, answer, body, serve):
    server = serve(always(answer))
    with httpx.Client(transport=kind(), timeout=TIMEOUT) as client:
        for _ in range(2):
            assert client.request(method, server.url + "/").content == body
    assert server.accepted == 1  # each ended cleanly: the connection carried the next


@pytest.mark.parametrize("kind", SYNC)
def test_an_http_1_0_answer_ends_with_the_connection(kind, serve):
    server = serve(always(b"HTTP/1.0 200 OK\r\n\r\nuntil the end", CLOSE))
    answer = get(kind(), server.url + "/")
    assert answer.text == "until the end" and answer.http_version == "HTTP/1.0"


@pytest.mark.parametrize("kind", SYNC)
def test_a_chunked_answer_is_read_whole(kind, serve):
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    server = serve(always(chunked))
    assert get(kind(), server.url + "/").text == "hello world"


@pytest.mark.parametrize("kind", SYNC)
def test_a_streamed_body_arrives_whole(kind, serve):
    server = serve(always(ok()))
    with httpx.Client(transport=kind(), timeout=TIMEOUT) as client:
        client.post(server.url + "/", content=(part for part in [b"one ", b"", b"two"]))
    assert server.requests[0][1] == b"one two"


@pytest.mark.parametrize("kind", SYNC)
def test_silence_is_a_read_timeout(kind, serve):
    server = serve(always(b"", HANG))
    with pytest.raises(httpx.ReadTimeout):
        get(kind(), server.url + "/")


@pytest.mark.parametrize("kind", SYNC)
def test_a_server_that_closes_without_answering(kind, serve):
    server = serve(always(b"", CLOSE))
    with pytest.raises(httpx.RemoteProtocolError):
        get(kind(), server.url + "/")


@pytest.mark.parametrize("kind", SYNC)
def test_an_answer_cut_short(kind, serve):
    server = serve(always(ok(b"x" * 100)[:-90], CLOSE))
    with pytest.raises(httpx.RemoteProtocolError):
        get(kind(), server.url + "/")


@pytest.mark.parametrize("kind", SYNC)
def test_a_refused_connection_is_a_connect_error(kind):
    port = unused_port()
    with pytest.raises(httpx.ConnectError):
        get(kind(), f"http://127.0.0.1:{port}/")


@pytest.mark.parametrize("kind", SYNC)
def test_an_early_answer_beats_the_unsent_body(kind, serve):
    # A 413 before the body is read, then the server closes: the answer, not a WriteError.
    refused = b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    server = serve(always(refused), read_body=False)
    with httpx.Client(transport=kind(), timeout=httpx.Timeout(5.0)) as client:
        answer = client.post(server.url + "/", content=b"x" * 20_000_000)
    assert answer.status_code == 413


@pytest.mark.parametrize("kind", SYNC)
def test_garbage_is_a_protocol_error(kind, serve):
    server = serve(always(b"this is not http\r\n\r\n"))
    with pytest.raises(httpx.RemoteProtocolError):
        get(kind(), server.url + "/")


def test_unasked_bytes_on_an_idle_connection_retire_it(serve):
    # The server answers, then sends bytes no request asked for: the next request must
    # not read them as its answer.
    server = serve(always(ok() + b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlies"))
    with httpx.Client(transport=H11Transport(), timeout=TIMEOUT) as client:
        client.get(server.url + "/")
        time.sleep(0.05)
        assert client.get(server.url + "/").json() == {"ok": True}
    assert server.accepted == 2


def test_idle_connections_expire(serve):
    server = serve(always(ok()))
    with httpx.Client(transport=H11Transport(keepalive_expiry=0.05), timeout=TIMEOUT) as client:
        client.get(server.url + "/")
        time.sleep(0.1)
        client.get(server.url + "/")
    assert server.accepted == 2


def test_the_pool_waits_for_a_free_connection_then_gives_up(serve):
    server = serve(always(ok()))
    transport = H11Transport(max_connections=1)
    url = server.url + "/"
    held = transport.handle_request(httpx.Request("GET", url))  # its body not read yet
    waited = httpx.Request("GET", url, extensions={"timeout": {"pool": 0.1}})
    with pytest.raises(httpx.PoolTimeout):
        transport.handle_request(waited)
    later = httpx.Request("GET", url, extensions={"timeout": {"pool": 2.0}})
    threading.Timer(0.1, lambda: (held.read(), held.close())).start()
    answer = transport.handle_request(later)  # waits until the held one is given back
    answer.read()
    answer.close()
    assert answer.json() == {"ok": True} and server.accepted == 1
    transport.close()


def test_threads_share_one_transport(serve):
    server = serve(always(ok()))
    client = httpx.Client(transport=H11Transport(max_connections=3), timeout=TIMEOUT)
    answers: list[int] = []

    def work() -> None:
        answers.extend(client.get(server.url + "/").status_code for _ in range(20))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    assert answers == [200] * 120 and server.accepted <= 3


def test_a_switched_protocol_is_refused_not_spun_on(serve):
    # After a 2xx to CONNECT, h11 hands the connection over (PAUSED): the body's reader
    # must say so, not loop without reading.
    server = serve(always(b"HTTP/1.1 200 Connection established\r\n\r\n", HANG))
    transport = H11Transport()
    answer = transport.handle_request(httpx.Request("CONNECT", server.url + "/"))
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            answer.read()
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(2.0)
    assert not reader.is_alive() and isinstance(outcome[0], httpx.RemoteProtocolError)


def test_a_closed_transport_refuses_and_closes_what_comes_back(serve):
    server = serve(always(ok()))
    transport = H11Transport()
    answer = transport.handle_request(httpx.Request("GET", server.url + "/"))
    transport.close()  # while that request's answer is still being read
    answer.read()
    answer.close()
    assert transport._pool.open == 0 and not transport._pool.idle
    with pytest.raises(RuntimeError):
        transport.handle_request(httpx.Request("GET", server.url + "/"))


def test_a_notify_that_comes_as_a_wait_times_out_is_passed_on(serve):
    # Thread A's wait for a free connection runs out while the lock is held, and the
    # connection given back then notifies A, which is already giving up: B, waiting
    # without a timeout, must be woken instead of waiting forever.
    server = serve(always(ok()))
    transport = H11Transport(max_connections=1)
    url = server.url + "/"
    held = transport.handle_request(httpx.Request("GET", url))
    outcome: dict[str, str] = {}

    def ask(name: str, pool: float | None) -> None:
        request = httpx.Request("GET", url, extensions={"timeout": {"pool": pool}})
        try:
            answer = transport.handle_request(request)
            answer.read()
            answer.close()
            outcome[name] = "answered"
        except httpx.PoolTimeout:
            outcome[name] = "PoolTimeout"

    a = threading.Thread(target=ask, args=("A", 0.2))
    a.start()
    time.sleep(0.05)
    b = threading.Thread(target=ask, args=("B", None), daemon=True)
    b.start()
    time.sleep(0.05)
    with transport._changed:
        time.sleep(0.3)  # A's wait runs out meanwhile
        held.read()
        held.close()  # notifies one waiter: A, as it happens
    a.join()
    b.join(2.0)
    assert outcome == {"A": "PoolTimeout", "B": "answered"}


def test_other_schemes_go_to_the_fallback():
    seen: list[httpx.URL] = []
    fallback = httpx.MockTransport(lambda request: seen.append(request.url) or httpx.Response(204))
    with httpx.Client(transport=H11Transport(fallback=fallback)) as client:
        assert client.get("https://example.invalid/x").status_code == 204
    assert seen == [httpx.URL("https://example.invalid/x")]


# --- the async transport ----------------------------------------------------------------------


async def aget(transport: httpx.AsyncBaseTransport, url: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
        return await client.get(url)


@pytest.mark.parametrize("kind", ASYNC)
def test_async_round_trip_and_reuse(kind, serve):
    server = serve(lambda request, body, number: (ok(b'{"echo": %d}' % len(body)), KEEP))

    async def run() -> list:
        async with httpx.AsyncClient(transport=kind(), timeout=TIMEOUT) as client:
            first = await client.post(server.url + "/p?x=1", json={"k": "v"})
            second = await client.get(server.url + "/")
            return [first.json(), second.status_code]

    assert asyncio.run(run()) == [{"echo": 9}, 200]
    assert server.accepted == 1
    assert server.requests[0][0].target == b"/p?x=1" and server.requests[0][1] == b'{"k":"v"}'


@pytest.mark.parametrize("kind", ASYNC)
def test_async_a_connection_the_server_closed_is_not_used_again(kind, serve):
    server = serve(always(ok(), CLOSE))

    async def run() -> None:
        async with httpx.AsyncClient(transport=kind(), timeout=TIMEOUT) as client:
            for _ in range(3):
                assert (await client.get(server.url + "/")).status_code == 200
                await asyncio.sleep(0.05)

    asyncio.run(run())
    assert server.accepted == 3


@pytest.mark.parametrize("kind", ASYNC)
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (always(b"", HANG), httpx.ReadTimeout),
        (always(b"", CLOSE), httpx.RemoteProtocolError),
        (always(ok(b"x" * 100)[:-90], CLOSE), httpx.RemoteProtocolError),
        (always(b"this is not http\r\n\r\n"), httpx.RemoteProtocolError),
    ],
)
def test_async_failures_are_httpx_errors(kind, answer, error, serve):
    server = serve(answer)
    with pytest.raises(error):
        asyncio.run(aget(kind(), server.url + "/"))


@pytest.mark.parametrize("kind", ASYNC)
def test_async_streamed_body_and_chunked_answer(kind, serve):
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    server = serve(always(chunked))

    async def parts():
        for part in (b"one ", b"two"):
            yield part

    async def run() -> str:
        async with httpx.AsyncClient(transport=kind(), timeout=TIMEOUT) as client:
            return (await client.post(server.url + "/", content=parts())).text

    assert asyncio.run(run()) == "abc"
    assert server.requests[0][1] == b"one two"


def test_async_an_early_answer_beats_the_unsent_body(serve):
    # As the sync test (httpx's own async transport raises ReadError here).
    refused = b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    server = serve(always(refused), read_body=False)

    async def run() -> int:
        async with httpx.AsyncClient(transport=AsyncH11Transport(), timeout=5.0) as client:
            return (await client.post(server.url + "/", content=b"x" * 20_000_000)).status_code

    assert asyncio.run(run()) == 413


@pytest.mark.parametrize("kind", ASYNC)
def test_async_refused_connection(kind):
    port = unused_port()
    with pytest.raises(httpx.ConnectError):
        asyncio.run(aget(kind(), f"http://127.0.0.1:{port}/"))


def test_async_pool_waits_then_gives_up(serve):
    server = serve(always(ok()))
    transport = AsyncH11Transport(max_connections=1)
    url = server.url + "/"

    async def run() -> int:
        held = await transport.handle_async_request(httpx.Request("GET", url))
        waited = httpx.Request("GET", url, extensions={"timeout": {"pool": 0.1}})
        with pytest.raises(httpx.PoolTimeout):
            await transport.handle_async_request(waited)

        async def give_back() -> None:
            await asyncio.sleep(0.1)
            await held.aread()
            await held.aclose()

        later = httpx.Request("GET", url, extensions={"timeout": {"pool": 2.0}})
        _, answer = await asyncio.gather(give_back(), transport.handle_async_request(later))
        await answer.aread()
        await answer.aclose()
        await transport.aclose()
        return answer.status_code

    assert asyncio.run(run()) == 200 and server.accepted == 1


def test_async_concurrent_requests_each_have_a_connection(serve):
    server = serve(lambda request, body, number: (time.sleep(0.05), ok())[1:] + (KEEP,))
    transport = AsyncH11Transport(max_connections=4)

    async def run() -> list[int]:
        async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
            answers = await asyncio.gather(*(client.get(server.url + "/") for _ in range(10)))
            return [answer.status_code for answer in answers]

    assert asyncio.run(run()) == [200] * 10 and server.accepted == 4


def test_async_a_connection_of_an_ended_loop_is_not_reused(serve):
    server = serve(always(ok()))
    transport = AsyncH11Transport()
    url = server.url + "/"

    async def once() -> int:
        answer = await transport.handle_async_request(httpx.Request("GET", url))
        await answer.aread()
        await answer.aclose()
        return answer.status_code

    assert asyncio.run(once()) == 200
    assert asyncio.run(once()) == 200  # a new event loop: a new connection
    assert server.accepted == 2


def test_async_a_woken_waiter_cancelled_passes_its_turn_on(serve):
    server = serve(always(ok()))
    transport = AsyncH11Transport(max_connections=1)
    url = server.url + "/"

    async def run() -> int:
        held = await transport.handle_async_request(httpx.Request("GET", url))
        first = asyncio.create_task(transport.handle_async_request(httpx.Request("GET", url)))
        second = asyncio.create_task(transport.handle_async_request(httpx.Request("GET", url)))
        await asyncio.sleep(0.05)  # both wait for the one connection
        await held.aread()
        await held.aclose()  # wakes the first...
        first.cancel()  # ...which is cancelled before it runs
        answer = await asyncio.wait_for(second, 2.0)
        await answer.aread()
        await answer.aclose()
        return answer.status_code

    assert asyncio.run(run()) == 200


def test_async_a_failed_exchange_closes_its_socket_at_once(serve, monkeypatch):
    # A server that never reads: each POST's write times out with megabytes unsent, and
    # its connection must go at once, not wait to flush them (each would stay open,
    # uncounted by the pool).
    server = serve(always(b"", HANG), read_body=False)
    transport = AsyncH11Transport(max_connections=1)
    timeouts = {"timeout": {"write": 0.2, "connect": 2.0, "read": 0.2, "pool": 2.0}}
    opened: list[asyncio.Transport] = []
    made = transport_module._Wire.connection_made

    def connection_made(wire, carrier):
        opened.append(carrier)
        made(wire, carrier)

    monkeypatch.setattr(transport_module._Wire, "connection_made", connection_made)

    async def run() -> list[int]:
        for _ in range(3):
            request = httpx.Request("POST", server.url + "/", content=b"x" * 20_000_000)
            request.extensions = timeouts
            with pytest.raises((httpx.WriteTimeout, httpx.ReadTimeout)):
                await transport.handle_async_request(request)
        await asyncio.sleep(0.1)
        return [carrier.get_extra_info("socket").fileno() for carrier in opened]

    assert asyncio.run(run()) == [-1, -1, -1] and transport._pool.open == 0


def test_async_unasked_bytes_connection_close_and_expiry(serve):
    # (httpx's own async transport reads the unasked bytes as the next answer.)
    unasked = serve(always(ok() + b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlies"))
    closing = serve(always(ok(b"{}", ("Connection", "close"))))
    kept = serve(always(ok()))

    async def run() -> None:
        transport = AsyncH11Transport(keepalive_expiry=0.1)
        async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
            for server in (unasked, closing, kept):
                await client.get(server.url + "/")
                await asyncio.sleep(0.2 if server is kept else 0.05)
                assert (await client.get(server.url + "/")).status_code == 200

    asyncio.run(run())
    assert (unasked.accepted, closing.accepted, kept.accepted) == (2, 2, 2)  # kept: expired


def test_the_clients_refuse_to_send_once_closed(serve):
    server = serve(always(ok()))
    client = MemoryClient(server.url, "k")
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.agent()

    async def run() -> None:
        client = AsyncMemoryClient(server.url, "k")
        await client.aclose()
        await client.agent()

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(run())
    assert server.accepted == 0


def test_async_other_schemes_go_to_the_fallback():
    fallback = httpx.MockTransport(lambda request: httpx.Response(204))
    answer = asyncio.run(aget(AsyncH11Transport(fallback=fallback), "https://example.invalid/"))
    assert answer.status_code == 204


# --- which way the clients send ---------------------------------------------------------------


def test_the_clients_send_through_it_to_plain_http_only(monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(MemoryClient("http://memory", "k")._own, H11Transport)
    assert isinstance(AsyncMemoryClient("http://memory", "k")._own, AsyncH11Transport)
    assert MemoryClient("https://memory", "k")._own is None
    given = httpx.MockTransport(lambda request: httpx.Response(204))
    assert MemoryClient("http://memory", "k", transport=given)._own is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert MemoryClient("http://memory", "k")._own is None  # httpx's client applies it
    assert AsyncMemoryClient("http://memory", "k")._own is None


def test_the_client_sends_and_retries_through_it(serve, monkeypatch, caplog):
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.INFO, logger="httpx")
    # A GET is retried after the server closed without answering; the retry's answer
    # comes back as the client's result, with the key and the query sent.
    server = serve(
        lambda request, body, number: (b"", CLOSE) if number == 1 else (ok(b'{"a": 1}'), KEEP)
    )
    with MemoryClient(server.url, "secret", retry=None, retries=1) as client:
        client.retry = type(client.retry)(retries=1, backoff=0.0)
        assert client._own is not None
        assert client.history("s", max_messages=5) == {"a": 1}
    request = server.requests[-1][0]
    assert request.target == b"/api/v1/sessions/s/history?max_messages=5"
    # httpx's own log line for the request, as its client writes it
    assert "GET http://127.0.0.1" in caplog.text and '"HTTP/1.1 200 OK"' in caplog.text
    assert dict(request.headers)[b"authorization"] == b"Bearer secret"
    port = unused_port()
    with MemoryClient(f"http://127.0.0.1:{port}", "k", retries=0) as client:
        with pytest.raises(Unreachable):
            client.agent()
