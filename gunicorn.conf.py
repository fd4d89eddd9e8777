"""gunicorn's settings for memoryapp (gunicorn reads ./gunicorn.conf.py; the Procfile and
the README name it with --config too). Command-line flags still override these.

A client that declares a longer body than it sends (Content-Length: 1000000, then
silence) would hold a worker thread until it gave up: gunicorn bounds reading the
request line and headers, not the body. Reading the body is bounded here instead, so
such a request is answered 408 after MEMORYAPP_BODY_TIMEOUT_SECONDS (30 by default).
"""

import os

BODY_TIMEOUT_SECONDS = float(os.environ.get("MEMORYAPP_BODY_TIMEOUT_SECONDS", "30"))


def pre_request(worker, req):
    """Before the application reads the body: its socket waits at most the timeout for
    each read (gunicorn puts the connection back to its own mode after the request)."""
    worker.log.debug("%s %s", req.method, req.path)
    sock = getattr(req.unreader, "sock", None)
    if sock is not None and BODY_TIMEOUT_SECONDS > 0:
        sock.settimeout(BODY_TIMEOUT_SECONDS)
