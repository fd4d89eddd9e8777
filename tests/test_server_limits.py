"""The production server (gunicorn with gunicorn.conf.py), started for real: a client that
declares a longer body than it sends gets an answer, instead of holding a worker thread
until it gives up (issue 11, defect 11). Needs nothing but this repository: the request is
refused before any database is touched."""

from __future__ import annotations

import os
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


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": "x" * 50,
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "0",
        "MEMORYAPP_BODY_TIMEOUT_SECONDS": "1",
    }
    log = open(tmp_path / "gunicorn.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "memoryapp.wsgi", "--config", "gunicorn.conf.py",
         "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "2"],
        cwd=ROOT, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("gunicorn did not start: " + (tmp_path / "gunicorn.log").read_text())
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _ask(port: int, request: bytes) -> bytes:
    """Send `request` and keep the connection open (as the slow client does) until the
    server answers and closes it; a server that held on forever fails the read."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(request)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
        return answer


def test_a_body_shorter_than_its_content_length_is_answered_408(server):
    body = b'{"messages": ['
    answer = _ask(
        server,
        b"POST /api/v1/sessions/s/turns HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + body,
    )
    head, _, content = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert b"shorter than Content-Length" in content


def test_the_same_server_answers_a_whole_request(server):
    # The timeout bounds slow bodies only: a complete request is answered as always.
    answer = _ask(
        server,
        b"GET /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 401"), answer
