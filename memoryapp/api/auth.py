"""Bearer-key authentication: a key is looked up by its hash and sees only its agent."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from memoryapp.core.models import ApiKey, hash_api_key


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        if not token or len(token) > 200:
            return None
        key = (
            ApiKey.objects.usable()
            .select_related("agent")
            .filter(key_hash=hash_api_key(token))
            .first()
        )
        if key is None:
            return None
        key.touch()
        return key
