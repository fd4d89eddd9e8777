"""memoryapp.gthread.StayingThreadWorker, the worker gunicorn.conf.py names, serving a
small WSGI application (tests/gthread_app.py) in a real gunicorn: a thread that answered
a kept-alive request waits on the connection for the next one, and gives it back to the
poller whenever another connection needs the thread, the connection's keepalive ends or
the worker stops. Needs nothing but this repository (no database)."""

from __future__ import annotations

import http.client
import os
import runpy
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tmp_path: Path, threads: int, keepalive: int) -> None:
        self.port = _free_port()
        self.log_path = tmp_path / "gunicorn.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "tests.gthread_app:app",
             "--config", "gunicorn.conf.py", "--bind", f"127.0.0.1:{self.port}",
             "--workers", "1", "--threads", str(threads), "--keep-alive", str(keepalive)],
            cwd=ROOT, env={**os.environ, "MEMORYAPP_BODY_TIMEOUT_SECONDS": "30"},
            stdout=self._log, stderr=self._log,
        )  # fmt: skip
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        pytest.fail("gunicorn did not start: " + self.log_path.read_text())

    def connection(self, timeout: float = 5) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(threads: int = 2, keepalive: int = 10) -> Server:
        servers.append(Server(tmp_path, threads, keepalive))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def get(connection: http.client.HTTPConnection, path: str) -> str:
    connection.request("GET", path)
    answer = connection.getresponse()
    assert answer.status == 200
    return answer.read().decode()


def staying(server: Server, expected: str, agent=None) -> str:
    """/staying ("staying given-back") asked on a new connection until it answers
    `expected`, at most 2 s; the last answer. A thread enters its wait just after its
    answer is sent: with `agent` (a connection that should have a thread staying on it),
    each try asks on it first and waits a little."""
    for _ in range(40):
        if agent is not None:
            get(agent, "/")
            time.sleep(0.02)
        with_new = server.connection()
        answer = get(with_new, "/staying")
        with_new.close()
        if answer == expected:
            break
        time.sleep(0.03)
    return answer


def test_gunicorn_conf_names_the_staying_worker():
    settings = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    assert settings["worker_class"] == "memoryapp.gthread.StayingThreadWorker"


def test_a_kept_alive_connection_is_answered_by_the_thread_that_waits_on_it(serve):
    server = serve(threads=2)
    agent = server.connection()
    first = get(agent, "/")
    # Its thread now waits on it: the other thread answers this (and may not stay too).
    assert staying(server, "1 0", agent) == "1 0"
    # Every later request on the connection, the same thread.
    assert {get(agent, "/") for _ in range(30)} == {first}
    sock = agent.sock
    assert sock is not None
    # Two requests sent at once (the second read ahead with the first): both answered.
    sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
    received = b""
    while received.count(b"HTTP/1.1 200") < 2 or not received.endswith(first.encode()):
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    assert received.count(b"HTTP/1.1 200") == 2
    agent.close()


def test_at_most_all_threads_but_one_stay(serve):
    server = serve(threads=2)
    first, second = server.connection(), server.connection()
    get(second, "/")
    get(first, "/")
    # One stays; the other went back to the poller, leaving a thread to answer this
    # (none was given back for it).
    assert staying(server, "1 0", first) == "1 0"
    # And both connections are still answered.
    get(first, "/")
    get(second, "/")


def test_a_request_waiting_for_a_thread_takes_a_staying_ones(serve):
    server = serve(threads=2, keepalive=20)
    idle = server.connection()
    assert staying(server, "1 0", idle) == "1 0"
    # The other thread is held until /release is answered: only the staying one can.
    blocked = server.connection(timeout=30)
    blocked.request("GET", "/block")
    time.sleep(0.2)  # (taken by the free thread before /release arrives)
    release = server.connection(timeout=5)  # far less than the idle one's keepalive
    assert get(release, "/release") == "ok"
    answer = blocked.getresponse()
    assert answer.read() == b"released"
    release.close()
    blocked.close()
    assert staying(server, "0 1") == "0 1"  # the idle connection given back for it
    # The idle connection, given back to the poller, is still answered.
    get(idle, "/")


def test_a_staying_connection_is_closed_after_its_keepalive(serve):
    server = serve(threads=2, keepalive=1)
    agent = server.connection(timeout=10)
    get(agent, "/")
    assert agent.sock is not None
    began = time.monotonic()
    assert agent.sock.recv(1) == b""  # closed by the server
    assert time.monotonic() - began < 5


def test_a_stopping_worker_gives_its_staying_connection_back(serve):
    server = serve(threads=2, keepalive=30)
    agent = server.connection()
    assert staying(server, "1 0", agent) == "1 0"
    server.process.send_signal(signal.SIGTERM)
    # Closed within gunicorn's linger for kept-alive connections (2 s), not after the
    # keepalive of 30 s the thread would otherwise have waited.
    server.process.wait(timeout=10)


def test_the_worker_answers_others_while_an_idle_connection_is_closed(serve):
    """A staying connection whose keepalive ends is closed at once, as the poller closes
    an idle one: not gracefully on the main thread, which waited up to 2 s for the idle
    client to close its end, every other connection waiting with it."""
    server = serve(threads=2, keepalive=1)
    idle = server.connection(timeout=10)
    get(idle, "/")  # its client stays idle and never closes
    assert idle.sock is not None
    assert idle.sock.recv(1) == b""  # closed by the server after its keepalive
    began = time.monotonic()
    other = server.connection(timeout=10)
    get(other, "/")
    other.close()
    assert time.monotonic() - began < 1.0  # (2 s with the graceful close)


class _Pool:
    """A thread pool that takes submissions and runs none (the counters are set by hand)."""

    def submit(self, *args):
        from concurrent.futures import Future

        return Future()


def _worker(threads: int):
    from types import SimpleNamespace

    from memoryapp.gthread import StayingThreadWorker

    worker = StayingThreadWorker.__new__(StayingThreadWorker)
    worker.cfg = SimpleNamespace(threads=threads, keepalive=10, is_ssl=False)
    worker.tpool = _Pool()
    worker.method_queue = None
    worker._init_staying()
    return worker


def _wake_ups(worker) -> int:
    try:
        return len(os.read(worker._wanted_r, 100))
    except BlockingIOError:
        return 0


def test_two_requests_submitted_together_wake_a_staying_thread_for_the_one_left():
    """Three threads: one staying, one answering, one free. Two connections submitted
    in one go (the main thread dispatches several events at once): the free thread
    takes one, and a staying thread must give its connection back for the other (it
    waited for the staying one's keepalive before)."""
    worker = _worker(threads=3)
    worker._occupied, worker._staying = 2, 1
    worker.enqueue_req(object())
    assert _wake_ups(worker) == 0  # the free thread takes it
    worker.enqueue_req(object())
    assert _wake_ups(worker) == 1  # none left: one staying thread asked
    worker._yielding = 1  # it gives its connection back
    worker.enqueue_req(object())
    assert _wake_ups(worker) == 1  # a third: asked again (none of them taken yet)


def test_a_thread_that_gave_its_connection_back_leaves_the_count_as_it_frees_itself(
    monkeypatch,
):
    """Three threads: A staying, B answering, S answering its own connection. S stays
    on it; a submitted connection C1 asks S to give it back. Once S's thread is free
    (C1 not yet taken), a second submission C2 has only that thread for two
    connections, so A must be asked too. (When the count of threads giving back
    dropped only as a thread took a waiting connection, S still counted as on its
    way: C2 woke nobody and waited for A's next look, up to STOP_CHECK_SECONDS.)"""
    import io
    import socket
    import threading
    from types import SimpleNamespace

    from gunicorn.workers.gthread import ThreadWorker

    monkeypatch.setattr(ThreadWorker, "handle", lambda self, conn: True)
    worker = _worker(threads=3)
    worker.alive = True
    worker._occupied, worker._staying = 2, 1  # A staying, B answering
    ours, clients = socket.socketpair()
    s_conn = SimpleNamespace(
        is_http2=False,
        sock=ours,
        parser=SimpleNamespace(unreader=SimpleNamespace(buf=io.BytesIO())),
    )
    worker.enqueue_req(s_conn)
    assert _wake_ups(worker) == 0  # the free thread, S, takes it
    s = threading.Thread(target=worker.handle, args=(s_conn,))
    s.start()
    deadline = time.monotonic() + 5
    while worker._staying < 2 and time.monotonic() < deadline:  # S waits on it
        time.sleep(0.01)
    assert worker._staying == 2
    worker.enqueue_req(object())  # C1: S's byte, which S reads
    s.join(timeout=5)
    assert not s.is_alive()
    assert worker.given_back == 1
    assert (worker._occupied, worker._staying, worker._waiting) == (2, 1, 1)
    worker.enqueue_req(object())  # C2
    assert _wake_ups(worker) == 1  # A asked
    ours.close()
    clients.close()
