"""Bearer-key authentication: a key is looked up by its hash and sees only its agent.

Each key has its own rate limit; an address that sends too many wrong keys is refused
for a while (the middleware answers its requests 429)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja.security import HttpBearer

from memoryapp.core import ratelimit
from memoryapp.core.models import ApiKey, hash_api_key


class RateLimited(Exception):
    def __init__(self, retry_after: int, detail: str) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.detail = detail


def client_address(request: HttpRequest) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        key = None
        if token and len(token) <= 200:
            key = (
                ApiKey.objects.usable()
                .select_related("agent")
                .filter(key_hash=hash_api_key(token))
                .first()
            )
        if key is None:
            failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
            ratelimit.hit("auth-failure", client_address(request), failures)
            return None
        limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_KEY)
        retry_after = ratelimit.hit("key", str(key.pk), limit)
        if retry_after is not None:
            ratelimit.note_refusal(key.pk)
            raise RateLimited(
                retry_after,
                f"this API key made more than {limit.count} requests in {limit.seconds} "
                f"seconds; retry after {retry_after} seconds",
            )
        key.touch()
        return key
