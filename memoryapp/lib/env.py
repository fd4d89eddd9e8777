"""Strict readers for settings that come from the environment.

Each helper names the variable in its error, so a bad value stops the process at
startup with a message that says what to fix, instead of a surprise later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit


class ConfigError(Exception):
    """A setting read from the environment has a value we cannot use."""


def env_str(name: str, default: str = "", environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return environ.get(name, default)


def env_bool(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ConfigError(f"{name} must be 'true' or 'false', not {raw!r}")


def env_int(
    name: str,
    default: int,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    environ = os.environ if environ is None else environ
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, not {value}")
    return value


def env_list(name: str, default: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


# PostgreSQL's connect timeout unless DATABASE_URL sets one (?connect_timeout=N).
CONNECT_TIMEOUT_SECONDS = 5


def parse_database_url(url: str, name: str = "DATABASE_URL") -> dict:
    """Turn `sqlite:////abs/path.sqlite3` or `postgres://user:pw@host:port/db` into
    a Django DATABASES entry."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        # sqlite:////absolute/path -> netloc "" and path "//absolute/path"
        if parts.netloc:
            raise ConfigError(f"{name}: a SQLite URL has no host; use sqlite:////absolute/path")
        path = unquote(parts.path)
        if not path.startswith("//"):
            raise ConfigError(
                f"{name}: a SQLite path must be absolute (sqlite:////absolute/path), got {url!r}"
            )
        return sqlite_database(Path(path[1:]))
    if scheme in ("postgres", "postgresql", "pgsql"):
        dbname = unquote(parts.path.lstrip("/"))
        if not dbname:
            raise ConfigError(f"{name}: a PostgreSQL URL needs a database name, got {url!r}")
        try:
            port = parts.port
        except ValueError:
            raise ConfigError(f"{name}: the port is not a number in {url!r}") from None
        options = dict(parse_qsl(parts.query))
        # A server that does not answer (down, or a network partition) must not hold a
        # request for the whole outage: after this many seconds the connection fails and
        # the request is answered 503 (dashboard/middleware.py, the API's handler).
        options.setdefault("connect_timeout", str(CONNECT_TIMEOUT_SECONDS))
        conn_max_age = options.pop("conn_max_age", "60")
        try:
            conn_max_age_value = int(conn_max_age)
        except ValueError:
            raise ConfigError(f"{name}: conn_max_age must be an integer") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": dbname,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": conn_max_age_value,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise ConfigError(
        f"{name} must start with sqlite:// or postgres://, got scheme {parts.scheme!r}"
    )


def sqlite_database(path: Path) -> dict:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            # IMMEDIATE takes the write lock when a transaction starts, so two writers
            # queue on the busy timeout instead of deadlocking on a lock upgrade.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": (
                "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;PRAGMA foreign_keys=ON;"
            ),
        },
        # One test database per test process: two runs side by side (a person's and CI's)
        # must not share one file. Django removes it when the run ends.
        "TEST": {"NAME": str(path.with_name(f"{path.stem}-test-{os.getpid()}.sqlite3"))},
    }


def validate_redis_url(url: str, name: str = "REDIS_URL") -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigError(f"{name} must start with redis:// or rediss://, got {url!r}")
    if not parts.hostname:
        raise ConfigError(f"{name} needs a host, got {url!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"{name}: the port is not a number in {url!r}") from None
    return url


def env_limit(name: str, default: str) -> str:
    """A rate limit, "count/seconds" (e.g. "600/60") or "off"."""
    raw = env_str(name, default).strip()
    if raw.lower() == "off":
        return raw
    count, slash, seconds = raw.partition("/")
    if not (slash and count.isdigit() and seconds.isdigit() and int(seconds) > 0):
        raise ConfigError(f"{name} must be 'count/seconds' (like 600/60) or 'off', not {raw!r}")
    return raw
