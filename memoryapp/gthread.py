"""gunicorn's threaded worker, but a thread that has answered a kept-alive request waits
on that connection for its next request itself (gunicorn.conf.py names it).

gunicorn's gthread worker hands every kept-alive connection back to its main thread
after each answer: the thread queues the connection, writes a byte to a pipe to wake the
main thread, which registers the socket with its poller; when the next request arrives
the main thread unregisters it and submits it to the pool, whose thread wakes from its
queue. For an agent that appends, then restores, then appends again, that is two more
threads woken and a dozen more system calls per request, run cold after the agent's
pause. Here the thread that answered waits on the connection (with poll, as gunicorn
waits for a new connection's first bytes), and answers the next request at once: A/B
over HTTP, two servers side by side, calls interleaved, with the extraction worker: 0.1-0.6 ms
less per request back to back and 0.3-0.6 ms less after a pause of 150 ms (README).

A thread stays only while it leaves work for the others:
- at most `threads - 1` threads stay, so one is always left for a connection that is
  not staying (a new one, one back from the poller);
- a thread stays no longer than the connection's keepalive (gunicorn's `keepalive`,
  which closes a kept-alive connection after that long without a request: so does it);
- a thread stays only on a plain connection (TLS may hold a request the socket does
  not show);
- when every thread is taken and a request waits for one, a staying thread gives its
  connection back to the poller (a pipe wakes it) and takes the request;
- a stopping worker's staying threads give their connections back to the poller, which
  answers a request arriving meanwhile with `Connection: close`, as gthread does.
Everything else (parsing, the request's handling, keep-alive's rules, HTTP/2, timeouts
of a new connection) is gthread's own code, called as it calls it.
"""

from __future__ import annotations

import os
import select
import threading
import time

from gunicorn.workers.gthread import ThreadWorker

# How often a staying thread looks whether its worker is stopping (poll's timeout).
STOP_CHECK_SECONDS = 0.5


class StayingThreadWorker(ThreadWorker):
    def init_process(self) -> None:
        self._lock = threading.Lock()
        self._occupied = 0  # threads in handle: answering a request or staying
        self._staying = 0  # of them, waiting on their connection
        self._waiting = 0  # connections submitted to the pool, not yet taken by a thread
        self._yielding = 0  # staying threads giving their connection back for those
        self.given_back = 0  # connections given back so (in all)
        self._wanted_r, self._wanted_w = os.pipe()
        os.set_blocking(self._wanted_r, False)
        os.set_blocking(self._wanted_w, False)
        super().init_process()

    def enqueue_req(self, conn) -> None:
        """gthread's (the main thread submits a connection to the pool); when no thread is
        free for it but some are staying, wake those: one gives its connection back."""
        with self._lock:
            self._waiting += 1
            wake = self._occupied >= self.cfg.threads and self._staying > 0
        super().enqueue_req(conn)
        if wake:
            try:
                os.write(self._wanted_w, b"\0")
            except BlockingIOError:  # the pipe is full of wake-ups already
                pass

    def handle(self, conn):
        with self._lock:
            self._waiting -= 1
            self._occupied += 1
            # A waiting connection taken: a thread that gave its own back for one has
            # done so (whichever thread takes it).
            self._yielding = max(0, self._yielding - 1)
        try:
            result = super().handle(conn)
            while result is True and not conn.is_http2:
                if not conn.parser.unreader.buf.getvalue():  # nothing read ahead
                    outcome = self._stay(conn)
                    if outcome == "expired":
                        return False  # closed, as the poller closes it after keepalive
                    if outcome != "request":
                        return result  # back to the poller, as gthread does
                result = super().handle(conn)
            return result
        finally:
            with self._lock:
                self._occupied -= 1

    def _stay(self, conn) -> str:
        """Wait on `conn` for its next request: "request" when it has bytes to read (or
        was closed: the parser then finds no request), "expired" after the keepalive,
        "yielded" when a waiting connection needs this thread, "back" when the thread
        may not stay or the worker is stopping."""
        if self.cfg.is_ssl:
            return "back"  # TLS may hold a decrypted request the socket does not show
        deadline = time.monotonic() + self.cfg.keepalive
        with self._lock:
            if self._staying >= self.cfg.threads - 1 or self._waiting > self._yielding:
                return "back"
            self._staying += 1
        fd = conn.sock.fileno()
        poller = select.poll()  # (select.select refuses a descriptor past 1,023)
        poller.register(fd, select.POLLIN)
        poller.register(self._wanted_r, select.POLLIN)
        try:
            while True:
                if not self.alive:
                    return "back"
                left = deadline - time.monotonic()
                if left <= 0:
                    return "expired"
                ready = {fd for fd, _ in poller.poll(min(left, STOP_CHECK_SECONDS) * 1000)}
                if fd in ready:
                    return "request"
                if self._wanted_r in ready:
                    try:
                        os.read(self._wanted_r, 512)
                    except BlockingIOError:  # another staying thread drained it first
                        pass
                    with self._lock:
                        if self._waiting > self._yielding:
                            self._yielding += 1
                            self.given_back += 1
                            return "yielded"
        finally:
            with self._lock:
                self._staying -= 1
