"""gunicorn's settings for memoryapp (gunicorn reads ./gunicorn.conf.py; the Procfile and
the README name it with --config too). Command-line flags still override these.

A client that declares a longer body than it sends (Content-Length: 1000000, then
silence) would hold a worker thread until it gave up: gunicorn bounds reading the
request line and headers, not the body. Reading the body is bounded here instead, so
such a request is answered 408 after MEMORYAPP_BODY_TIMEOUT_SECONDS (30 by default).

Keys never reach the logs: a client that cannot send headers puts its API key in the path
(`/ams/<key>/…` for Redis Agent Memory Server's client, `/mcp/<key>`), and gunicorn logs
the raw request line. `RedactingLogger` writes that segment as `[redacted]` in the access
log and in every error-log line (Django redacts its own request log: http/middleware.py).
"""

import logging
import os
import re

from gunicorn.glogging import Logger

BODY_TIMEOUT_SECONDS = float(os.environ.get("MEMORYAPP_BODY_TIMEOUT_SECONDS", "30"))


def pre_request(worker, req):
    """Before the application reads the body: its socket waits at most the timeout for
    each read (gunicorn puts the connection back to its own mode after the request)."""
    worker.log.debug("%s %s", req.method, req.path)
    sock = getattr(req.unreader, "sock", None)
    if sock is not None and BODY_TIMEOUT_SECONDS > 0:
        sock.settimeout(BODY_TIMEOUT_SECONDS)


# A key in the path: the segment after /ams/ or /mcp/.
KEY_IN_PATH = re.compile(r"(/(?:ams|mcp)/)[^/?#\s\"]+")


def redact(value):
    """`value` with any key in a path replaced by [redacted] (text only)."""
    return KEY_IN_PATH.sub(r"\1[redacted]", value) if isinstance(value, str) else value


def _redacted(msg, args):
    return (redact(msg), *(redact(a) for a in args))


class RedactingLogger(Logger):
    """gunicorn's logger; a key in a path is redacted from every line it writes."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        return {name: redact(value) for name, value in atoms.items()}

    def critical(self, msg, *args, **kwargs):
        super().critical(*_redacted(msg, args), **kwargs)

    def error(self, msg, *args, **kwargs):
        super().error(*_redacted(msg, args), **kwargs)

    def warning(self, msg, *args, **kwargs):
        super().warning(*_redacted(msg, args), **kwargs)

    def info(self, msg, *args, **kwargs):
        super().info(*_redacted(msg, args), **kwargs)

    def debug(self, msg, *args, **kwargs):
        # pre_request logs every request at debug: redacted only when it is written.
        if self.error_log.isEnabledFor(logging.DEBUG):
            super().debug(*_redacted(msg, args), **kwargs)

    def exception(self, msg, *args, **kwargs):
        super().exception(*_redacted(msg, args), **kwargs)

    def log(self, lvl, msg, *args, **kwargs):
        super().log(lvl, *_redacted(msg, args), **kwargs)


logger_class = RedactingLogger

# gunicorn's stock threaded worker: each worker process answers `threads` requests at a time.
worker_class = "gthread"

# The longest request line gunicorn takes (its maximum) and header field (above nginx's
# 8 KiB): nginx in front (deploy/nginx.conf) refuses longer ones first, with JSON.
limit_request_line = 8190
limit_request_field_size = 16384
# As many header fields as nginx lets through in its 32 KiB of header buffers.
limit_request_fields = 32768

# Whether a request came over HTTPS is Django's to decide (SECURE_PROXY_SSL_HEADER, set
# only behind a TLS proxy): gunicorn would trust any client's X-Forwarded-Proto arriving
# through bin/serve's unix socket.
secure_scheme_headers = {}
