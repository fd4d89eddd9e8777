"""A WSGI application for tests/test_gthread.py: gunicorn serves it with gunicorn.conf.py,
whose worker (memoryapp.gthread.StayingThreadWorker) is what those tests look at.

`/block` answers once `/release` has been asked (or after 30 s: "timed out"); `/staying`
answers how many of this process's threads are staying on their connection and how
many connections they gave back for a waiting request, as "1 0"; anything
else answers the answering thread's id."""

from __future__ import annotations

import gc
import threading

released = threading.Event()


def _worker():
    from memoryapp.gthread import StayingThreadWorker

    return next(o for o in gc.get_objects() if isinstance(o, StayingThreadWorker))


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/block":
        body = b"released" if released.wait(30) else b"timed out"
    elif path == "/release":
        released.set()
        body = b"ok"
    elif path == "/staying":
        worker = _worker()
        with worker._lock:
            body = f"{worker._staying} {worker.given_back}".encode()
    else:
        body = str(threading.get_ident()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
