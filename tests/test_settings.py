"""Settings come from the environment through strict helpers; bad values stop startup
with an error naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryapp.lib.env import ConfigError, env_bool, env_int, parse_database_url

ROOT = Path(__file__).resolve().parent.parent


def test_env_bool_is_strict():
    assert env_bool("X", False, {"X": "true"}) is True
    assert env_bool("X", True, {"X": "FALSE"}) is False
    assert env_bool("X", True, {}) is True
    with pytest.raises(ConfigError, match="X must be 'true' or 'false'"):
        env_bool("X", False, {"X": "yes"})


def test_env_int_names_the_variable():
    assert env_int("N", 5, environ={"N": "7"}) == 7
    with pytest.raises(ConfigError, match="N must be an integer"):
        env_int("N", 5, environ={"N": "seven"})
    with pytest.raises(ConfigError, match="N must be at least 10"):
        env_int("N", 50, minimum=10, environ={"N": "3"})


def test_database_urls():
    sqlite = parse_database_url("sqlite:////tmp/x/db.sqlite3")
    assert sqlite["ENGINE"] == "django.db.backends.sqlite3"
    assert sqlite["NAME"] == "/tmp/x/db.sqlite3"
    assert "journal_mode=WAL" in sqlite["OPTIONS"]["init_command"]
    pg = parse_database_url("postgres://me:p%40ss@db.example:6543/mem")
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == (
        "me",
        "p@ss",
        "db.example",
        "6543",
        "mem",
    )
    # A connect timeout unless the URL sets its own: an unreachable server is a 503 within
    # seconds, not a request held for the whole outage.
    assert pg["OPTIONS"] == {"connect_timeout": "5"}
    own = parse_database_url("postgres://h/mem?connect_timeout=2&sslmode=require")
    assert own["OPTIONS"] == {"connect_timeout": "2", "sslmode": "require"}
    for bad in ("mysql://x/y", "sqlite:///relative.db", "postgres://host:port/db", "postgres://h/"):
        with pytest.raises(ConfigError, match="DATABASE_URL"):
            parse_database_url(bad)


def _start(env_overrides: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "memoryapp.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_without_secret_key_refuses_to_start():
    result = _start({"DEBUG": "false"})
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr
    assert _start({"DEBUG": "false", "SECRET_KEY": "x" * 50}).returncode == 0


@pytest.mark.parametrize(
    "name,value",
    [
        ("DEBUG", "maybe"),
        ("DATABASE_URL", "oracle://x/y"),
        ("REDIS_URL", "http://localhost"),
        ("MEMORYAPP_MAX_BODY_BYTES", "lots"),
    ],
)
def test_bad_values_are_startup_errors_naming_the_variable(name, value):
    result = _start({name: value})
    assert result.returncode != 0
    assert name in result.stderr


def _settings_of(env_overrides: dict) -> list[str]:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; "
            "print(s.DATABASES['default']['ENGINE'], s.CELERY_TASK_ALWAYS_EAGER, "
            "s.CELERY_BROKER_URL)",
        ],
        cwd=ROOT,
        env={
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG")
        }
        | {"DJANGO_SETTINGS_MODULE": "memoryapp.settings"}
        | env_overrides,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_embedded_default_is_sqlite_and_in_process_tasks():
    assert _settings_of({}) == ["django.db.backends.sqlite3", "True", "memory://localhost/"]


def test_production_urls_switch_to_postgres_and_redis_workers():
    assert _settings_of(
        {"DATABASE_URL": "postgres://u@db:5432/m", "REDIS_URL": "redis://cache:6379/2"}
    ) == ["django.db.backends.postgresql", "False", "redis://cache:6379/2"]


PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "k3Y-" + "aB9$xQ2!mZ7#rT5%wE1^yU8&iO4*pL6(sD3)fG0_hJ" * 2,
    "ALLOWED_HOSTS": "memory.example.com",
    "DATABASE_URL": "postgres://memoryapp@db.example:5432/memoryapp",
    "REDIS_URL": "redis://redis.example:6379/0",
}


def _deploy_check(env_overrides: dict) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG")
        and not k.startswith("SECURE")
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "memoryapp.settings", **env_overrides},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_documented_production_configuration_passes_check_deploy():
    """HTTPS redirect, HSTS and secure cookies come on with DEBUG=false (issue 11: W004 and
    W008 were warned); the README's production environment passes with no warning."""
    result = _deploy_check(PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    # Turning HTTPS off on purpose is what check --deploy then warns about.
    off = _deploy_check({**PRODUCTION, "SECURE_SSL_REDIRECT": "false", "SECURE_HSTS_SECONDS": "0"})
    assert off.returncode != 0 and "W004" in off.stderr + off.stdout
