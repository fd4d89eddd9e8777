"""The production web process (`bin/serve`: nginx with deploy/nginx.conf in front of
gunicorn), started for real: a fresh client is answered within seconds while more slow,
idle and half-body clients are held than gunicorn has threads (gunicorn alone leaves such
a client waiting 30-60 s or for as long as they hold on); nginx's own refusals are JSON;
the client's address reaches the rate limits. On this test's own database: the test
database on PostgreSQL, a SQLite file otherwise.

Needs nginx (`.ci/run` installs it); without it these tests are skipped, unless
MEMORYAPP_REQUIRE_NGINX is set, as CI sets it: then they fail."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
if NGINX is None and not os.environ.get("MEMORYAPP_REQUIRE_NGINX"):
    pytest.skip("needs nginx (Debian: apt-get install nginx)", allow_module_level=True)

# gunicorn's threads in these tests: every misbehaving group below outnumbers them.
THREADS = 2
# A fresh request must be answered this fast while the others are held (a liveness bound,
# not a speed test: an answer takes milliseconds; gunicorn alone took 30 s to forever).
ANSWERED_WITHIN = 5.0
SLOW_HEADERS, IDLE, HALF_BODIES = 50, 200, 20


@dataclass
class Served:
    url: str
    port: int
    key: str
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_url(tmp_path: Path) -> str:
    """This test's own database, migrated: the test database on PostgreSQL (each test
    asks for transactional_db: committed rows, flushed afterwards), else a new SQLite
    file (an in-memory test database is this process's alone)."""
    from django.db import connection

    if connection.vendor == "postgresql":
        db = connection.settings_dict
        host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
        return f"postgres://{db['USER']}@{host}/{db['NAME']}"
    url = f"sqlite:///{tmp_path / 'served.sqlite3'}"
    manage(url, "migrate", "--verbosity", "0")
    return url


def manage(database_url: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": database_url}
    run = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout


@contextmanager
def serve(tmp_path: Path, **settings: str) -> Iterator[Served]:
    """bin/serve on a free port, on this test's database, with `settings` in its
    environment; stopped afterwards (and must stop cleanly)."""
    database_url = _database_url(tmp_path)
    key = manage(database_url, "create_agent", "served").strip().splitlines()[-1]
    port = _free_port()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "DATABASE_URL": database_url,
        "DEBUG": "false",
        "SECRET_KEY": "x" * 50,
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "0",
        "MEMORYAPP_LISTEN": f"127.0.0.1:{port}",
        **settings,
    }
    if NGINX:
        env["MEMORYAPP_NGINX"] = NGINX
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(ROOT / "bin" / "serve"), "--workers", "1", "--threads", str(THREADS)],
            cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"bin/serve did not come up:\n{log.read_text()}")
            time.sleep(0.1)
        yield Served(url, port, key, log)
    finally:
        process.terminate()
        try:
            assert process.wait(timeout=30) == 0, log.read_text()
        finally:
            if process.poll() is None:
                os.killpg(process.pid, 9)


@pytest.fixture
def served(transactional_db, tmp_path) -> Iterator[Served]:
    with serve(tmp_path) as served:
        yield served


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _answer(sock: socket.socket) -> bytes:
    """What the server answers on `sock` until it closes the connection."""
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def _append(served: Served, text: str) -> bytes:
    return json.dumps(
        {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]}
    ).encode()


class Misbehaving:
    """Clients that hold connections without finishing a request: headers sent a byte at
    a time, connections that send nothing, bodies that stop half way."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.slow = [_connect(served.port) for _ in range(SLOW_HEADERS)]
        self.idle = [_connect(served.port) for _ in range(IDLE)]
        self.bodies = [_append(served, f"half body {n}") for n in range(HALF_BODIES)]
        self.half = [_connect(served.port) for _ in range(HALF_BODIES)]
        self.header = (
            f"POST /api/v1/sessions/held/turns HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {served.key}\r\nContent-Type: application/json\r\n"
            "Connection: close\r\n"
        )
        for sock, body in zip(self.half, self.bodies, strict=True):
            head = self.header + f"Content-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body[: len(body) // 2])
        self.slow_header = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        self.sent = 0
        self.stop = threading.Event()
        self.dripping = threading.Thread(target=self._drip, daemon=True)
        self.dripping.start()

    def _drip(self) -> None:
        while not self.stop.wait(0.5) and self.sent < len(self.slow_header):
            for sock in self.slow:
                sock.sendall(self.slow_header[self.sent : self.sent + 1])
            self.sent += 1

    def finish(self) -> tuple[list[bytes], list[bytes]]:
        """Each held request completed: the answers to the half bodies and slow headers
        (proof that they were held, not dropped)."""
        self.stop.set()
        self.dripping.join()
        for sock, body in zip(self.half, self.bodies, strict=True):
            sock.sendall(body[len(body) // 2 :])
        rest = self.slow_header[self.sent :] + b"\r\nConnection: close\r\n\r\n"
        for sock in self.slow:
            sock.sendall(rest)
        answers = [_answer(sock) for sock in self.half], [_answer(sock) for sock in self.slow]
        for sock in (*self.slow, *self.idle, *self.half):
            sock.close()
        return answers


def test_a_fresh_client_is_answered_while_slow_idle_and_half_body_clients_are_held(served):
    held = Misbehaving(served)
    headers = {"Authorization": f"Bearer {served.key}"}
    with httpx.Client(base_url=served.url, timeout=ANSWERED_WITHIN) as client:
        for n in range(5):
            started = time.monotonic()
            health = client.get("/api/v1/health")
            appended = client.post(
                "/api/v1/sessions/fresh/turns",
                content=_append(served, f"fresh {n}"),
                headers={**headers, "Content-Type": "application/json"},
            )
            took = time.monotonic() - started
            assert health.status_code == 200, health.text
            assert appended.status_code == 201, appended.text
            assert took < ANSWERED_WITHIN, f"answered after {took:.1f} s"
    halves, slow = held.finish()
    assert all(answer.startswith(b"HTTP/1.1 201") for answer in halves), halves[0]
    assert all(answer.startswith(b"HTTP/1.1 200") for answer in slow), slow[0]
    stored = httpx.get(f"{served.url}/api/v1/sessions/held/history", headers=headers).json()
    contents = {message["content"] for message in stored["messages"]}
    assert {f"half body {n}" for n in range(HALF_BODIES)} <= contents


def test_a_body_that_stops_half_way_is_closed_by_the_proxy_after_its_timeout(
    transactional_db, tmp_path
):
    with serve(tmp_path, MEMORYAPP_PROXY_TIMEOUT_SECONDS="1") as served:
        with _connect(served.port) as sock:
            sock.sendall(
                b"POST /api/v1/sessions/s/turns HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Length: 1000\r\n\r\n" + b'{"messages": ['
            )
            started = time.monotonic()
            answer = _answer(sock)
    assert time.monotonic() - started < ANSWERED_WITHIN
    assert b"201" not in answer.split(b"\r\n", 1)[0]


def test_the_proxys_own_refusals_are_json(served):
    with _connect(served.port) as sock:
        sock.sendall(b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        too_long = _answer(sock)
    head, _, body = too_long.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414"), too_long[:200]
    assert b"Content-Type: application/json; charset=utf-8" in head
    assert "8 KiB" in json.loads(body)["detail"]

    from django.conf import settings

    limit = settings.MEMORYAPP_MAX_BODY_BYTES
    big = httpx.post(
        f"{served.url}/api/v1/sessions/s/turns",
        content=b"x" * (limit + 1),
        headers={"Authorization": f"Bearer {served.key}", "Content-Type": "application/json"},
    )
    assert big.status_code == 413
    assert big.json()["detail"] == f"request body is larger than the limit of {limit} bytes"


@pytest.mark.parametrize("length", [5_000, 8_160])
def test_what_the_proxy_lets_through_gunicorn_takes(served, length):
    """A request line or header the proxy passes is within gunicorn's limits (whose own
    refusals are HTML): the application answers it, in JSON."""
    path = "/api/v1/" + "a" * length
    assert httpx.get(served.url + path).json()["detail"].startswith("no such endpoint")
    headers = {"X-Long": "a" * length, **{f"X-Field-{n}": "1" for n in range(200)}}
    assert httpx.get(f"{served.url}/api/v1/health", headers=headers).status_code == 200


@pytest.mark.parametrize("line", [8_188, 8_189, 8_190, 8_191, 9_000])
def test_a_header_near_the_proxys_limit_is_answered_in_json(served, line):
    """Up to nginx's 8 KiB buffer a header reaches gunicorn, whose own limit lies above
    it; past it nginx refuses, in JSON: never gunicorn's HTML 431."""
    headers = {"X-Long": "a" * (line - len("X-Long: "))}
    answer = httpx.get(f"{served.url}/api/v1/health", headers=headers)
    assert answer.headers["Content-Type"].startswith("application/json"), answer.text[:200]
    assert answer.status_code in (200, 400)


def test_no_key_in_a_path_reaches_the_proxys_log(served):
    """nginx's error log names the request line (a body too large, one buffered to a
    file): a key given in the path is redacted from it, as from gunicorn's."""
    for path in (f"/mcp/{served.key}", f"/ams/{served.key}/v1/working-memory/s"):
        httpx.post(served.url + path, content=b"x" * 3_000_000)
    time.sleep(0.5)  # the log passes through the redacting filter
    log = served.log.read_text()
    assert "[redacted]" in log
    assert served.key not in log


def test_only_its_own_user_reaches_gunicorns_socket(served):
    listening = re.search(r"Listening at: unix:(\S+)/gunicorn\.sock", served.log.read_text())
    assert listening, served.log.read_text()
    assert stat.S_IMODE(os.stat(listening.group(1)).st_mode) == 0o700


def test_a_client_cannot_claim_https_through_the_proxy(transactional_db, tmp_path):
    """Whether a request is secure is Django's to decide (SECURE_PROXY_SSL_HEADER, off):
    an X-Forwarded-Proto a client sends through nginx changes nothing."""
    with serve(tmp_path, SECURE_SSL_REDIRECT="true") as served:
        claimed = httpx.get(f"{served.url}/api/v1/sessions", headers={"X-Forwarded-Proto": "https"})
    assert claimed.status_code == 301
    assert claimed.headers["Location"].startswith("https://")


def test_each_client_address_is_limited_on_its_own_and_cannot_choose_it(transactional_db, tmp_path):
    """Behind the proxy the address limit counts the client's address (X-Real-IP, set by
    nginx), not the proxy's; a client's own X-Real-IP is replaced, so it cannot dodge it."""
    with serve(tmp_path, MEMORYAPP_RATE_LIMIT_ADDRESS="3/60") as served:

        def status(source: str, claimed: str) -> int:
            transport = httpx.HTTPTransport(local_address=source)
            with httpx.Client(transport=transport, base_url=served.url) as client:
                headers = {"Authorization": f"Bearer {served.key}", "X-Real-IP": claimed}
                return client.get("/api/v1/sessions", headers=headers).status_code

        first = [status("127.0.0.1", f"10.0.0.{n}") for n in range(5)]
        other = status("127.0.0.2", "10.0.0.1")
    assert first == [200, 200, 200, 429, 429]
    assert other == 200
