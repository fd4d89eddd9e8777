"""Bearer-key authentication: a key is looked up by its hash and sees only its agent.

Each key has its own rate limit; an address that sends too many wrong keys is refused
for a while (the middleware answers its requests 429)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from ninja.security import HttpBearer

from memoryapp.core.models import ApiKey, hash_api_key
from memoryapp.http import ratelimit


class RateLimited(Exception):
    def __init__(self, retry_after: int, detail: str) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.detail = detail

    def response(self) -> JsonResponse:
        """The 429 outside django-ninja (an API answers through `contract._rate_limited`)."""
        response = JsonResponse({"detail": self.detail}, status=429)
        response["Retry-After"] = str(self.retry_after)
        return response


# Longer is no key of ours: refused without a lookup.
MAX_TOKEN_LENGTH = 200
# A request this process makes to its own API for one it counted already (an MCP tool's
# call, api/mcp_http.py): the WSGI environ names the key's hash, and the request is not
# counted again. Only the process sets it (a client's headers arrive as HTTP_*).
COUNTED_FOR = "memoryapp.counted_for"


def client_address(request: HttpRequest) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


def bearer_token(request: HttpRequest) -> str | None:
    """The request's bearer token as ninja's HttpBearer reads it (None without one)."""
    value = request.headers.get("Authorization")
    if not value:
        return None
    scheme, *rest = value.split(" ")
    return " ".join(rest) if scheme.lower() == "bearer" else None


def count_key_early(request: HttpRequest) -> ratelimit.Counted | None:
    """What the middleware counts of the request's key in its own round trip to the
    cache, before the key is looked up: the key's limit by the token's hash. Only with
    Redis (in process memory there is no round trip to save) and while wrong keys are
    limited: a wrong token is counted under its own hash, only when its address is
    refused nothing (ratelimit.hit_and_check), so an address makes at most as many such
    counters per window as it may send wrong keys. None: authentication counts the key."""
    limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_KEY)
    failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
    if limit.count <= 0 or failures.count <= 0 or not ratelimit.one_round_trip():
        return None
    token = bearer_token(request)
    if not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    return ("key", hash_api_key(token), limit)


def address_refusal(request: HttpRequest) -> RateLimited | None:
    """Count this request against its client address, read the address's failed
    authentications and count the request's API key (by its hash, whose limit
    authentication then applies), in one round trip to the cache: a RateLimited when
    the address sent too many requests or too many wrong keys, else None. Notes the
    key's count for authentication."""
    if request.META.get(COUNTED_FOR):
        return None
    address = client_address(request)
    failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
    limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_ADDRESS)
    key = count_key_early(request)
    failing, over, key_over = ratelimit.hit_and_check(
        "address", address, limit, check=("auth-failure", failures), also=key
    )
    if key is not None:
        request.key_counted = (key[1], key_over)  # type: ignore[attr-defined]
    if failing is not None:
        detail = f"too many requests with a wrong API key from {address}"
        return RateLimited(failing, f"{detail}; retry after {failing} seconds")
    if over is not None:
        detail = f"more than {limit.count} requests in {limit.seconds} seconds from {address}"
        return RateLimited(over, f"{detail}; retry after {over} seconds")
    return None


def _counted_early(request: HttpRequest, key_hash: str) -> tuple[bool, int | None]:
    """Whether the middleware counted this key in its round trip (count_key_early), and
    if so its answer: the seconds to wait when over the key's limit, else None."""
    if request.META.get(COUNTED_FOR) == key_hash:
        return True, None
    early = getattr(request, "key_counted", None)
    if early is not None and early[0] == key_hash:
        return True, early[1]
    return False, None


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        key = None
        if token and len(token) <= MAX_TOKEN_LENGTH:
            usable = ApiKey.objects.usable().select_related("agent")
            # get(), not first(): the hash is unique, and first() would compile an ORDER
            # BY on every request for nothing.
            try:
                key = usable.get(key_hash=hash_api_key(token))
            except ApiKey.DoesNotExist:
                key = None
        if key is None:
            failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
            ratelimit.hit("auth-failure", client_address(request), failures)
            return None
        limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_KEY)
        # Counted by the middleware in its round trip (one per request), else here.
        counted, retry_after = _counted_early(request, key.key_hash)
        if not counted:
            retry_after = ratelimit.hit("key", key.key_hash, limit)
        if retry_after is not None:
            ratelimit.note_refusal(key.pk)
            raise RateLimited(
                retry_after,
                f"this API key made more than {limit.count} requests in {limit.seconds} "
                f"seconds; retry after {retry_after} seconds",
            )
        key.touch()
        return key
