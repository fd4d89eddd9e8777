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
over HTTP, two servers side by side, calls interleaved, with the extraction worker:
0.1-0.6 ms less per request back to back, 0.3-0.6 ms less after a pause of 150 ms
(README, *Benchmarks*).

A thread stays only while it leaves work for the others:
- at most `threads - 1` threads stay, so one is always left for a connection that is
  not staying (a new one, one back from the poller);
- a thread stays no longer than the connection's keepalive (gunicorn's `keepalive`,
  which closes a kept-alive connection after that long without a request: so does it,
  at once, as the poller does);
- a thread stays only on a plain connection (TLS may hold a request the socket does
  not show);
- when a request waits and no thread is left for it, a staying thread gives its
  connection back to the poller (a pipe wakes it) and takes the request; a request
  read ahead on a thread's connection waits behind others, as with gthread;
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

# How often a staying thread looks whether its worker is stopping, or a request waits
# for its thread without its wake-up (poll's timeout).
STOP_CHECK_SECONDS = 0.5


class StayingThreadWorker(ThreadWorker):
    def init_process(self) -> None:
        self._init_staying()
        super().init_process()  # (runs the worker)

    def _init_staying(self) -> None:
        self._lock = threading.Lock()
        self._occupied = 0  # threads in handle: answering a request or staying
        self._staying = 0  # of them, waiting on their connection
        self._waiting = 0  # connections submitted to the pool, not yet taken by a thread
        self._yielding = 0  # staying threads giving their connection back for those
        self.given_back = 0  # connections given back so (in all)
        # One byte per staying thread asked to give its connection back: each wakes (or,
        # not waiting just then, finds at its next wait) one staying thread.
        self._wanted_r, self._wanted_w = os.pipe()
        os.set_blocking(self._wanted_r, False)
        os.set_blocking(self._wanted_w, False)

    def _unserved(self) -> int:
        """Connections submitted that no free thread will take, nor a staying thread
        already giving its own back for them (under the lock)."""
        return self._waiting - self._yielding - (self.cfg.threads - self._occupied)

    def enqueue_req(self, conn) -> None:
        """gthread's (the main thread submits a connection to the pool); when no thread
        is left for it but some are staying, one of those is asked to give its connection
        back and take this one."""
        with self._lock:
            self._waiting += 1
            wake = self._staying > 0 and self._unserved() > 0
        super().enqueue_req(conn)
        if wake:
            try:
                os.write(self._wanted_w, b"\0")
            except BlockingIOError:  # the pipe is full of wake-ups already
                pass

    def finish_request(self, conn, fs) -> None:
        """gthread's, but for a connection whose keepalive ended while its thread waited
        on it: closed at once, as the poller closes an idle one (murder_keepalived), not
        gracefully on the main thread (which would wait up to 2 s for the idle client to
        close its end, the whole worker waiting with it)."""
        if getattr(conn, "keepalive_ended", False):
            self.nr_conns -= 1
            conn.close()
            return
        super().finish_request(conn, fs)

    def handle(self, conn):
        with self._lock:
            self._waiting -= 1
            self._occupied += 1
        yielded = False
        try:
            result = super().handle(conn)
            while result is True and not conn.is_http2:
                if conn.parser.unreader.buf.getvalue():  # a request read ahead
                    with self._lock:
                        if self._waiting > self._yielding:  # others first, as gthread
                            return result  # (finish_request submits it again)
                else:
                    outcome = self._stay(conn)
                    if outcome == "expired":
                        conn.keepalive_ended = True  # (finish_request closes it)
                        return result
                    if outcome != "request":
                        yielded = outcome == "yielded"
                        return result  # back to the poller, as gthread does
                result = super().handle(conn)
            return result
        finally:
            with self._lock:
                self._occupied -= 1
                # A thread giving its connection back stops counting as one on its
                # way to the waiting connection only as it frees itself: the two
                # changes cancel in _unserved, so no submitted connection is counted
                # served (no wake-up) or unserved (a needless give-back) meanwhile.
                if yielded:
                    self._yielding -= 1

    def _stay(self, conn) -> str:
        """Wait on `conn` for its next request: "request" when it has bytes to read (or
        was closed: the parser then finds no request), "expired" after the keepalive,
        "yielded" when a waiting connection needs this thread, "back" when the thread
        may not stay or the worker is stopping."""
        if self.cfg.is_ssl:
            return "back"  # TLS may hold a decrypted request the socket does not show
        deadline = time.monotonic() + self.cfg.keepalive
        with self._lock:
            if self._staying >= self.cfg.threads - 1 or self._unserved() > 0:
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
                        os.read(self._wanted_r, 1)  # one wake-up, this thread's
                    except BlockingIOError:  # another staying thread took it
                        pass
                # Looked at on every wake-up, and every STOP_CHECK_SECONDS in case one
                # was missed (taken by a thread that then had a request of its own).
                with self._lock:
                    if self._unserved() > 0:
                        self._yielding += 1
                        self.given_back += 1
                        return "yielded"
        finally:
            with self._lock:
                self._staying -= 1
