"""The client's address behind bin/serve's nginx.

gunicorn, reached only through nginx's unix socket, sees every request come from the
proxy. With MEMORYAPP_TRUST_X_REAL_IP on (bin/serve sets it), the X-Real-IP header nginx
writes (deploy/nginx.conf: `proxy_set_header X-Real-IP $remote_addr`, replacing any the
client sent) becomes REMOTE_ADDR, so the per-address rate limits and the login lockout
count each client, not the proxy. A header that is not an IP address is ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

# Longer than any IPv6 address written out (45 characters with an IPv4 tail).
MAX_ADDRESS_LENGTH = 64


class RealAddressMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.MEMORYAPP_TRUST_X_REAL_IP:
            address = real_address(request.META.get("HTTP_X_REAL_IP", ""))
            if address:
                request.META["REMOTE_ADDR"] = address
        return self.get_response(request)


def real_address(header: str) -> str | None:
    """`header` as an IP address in its canonical text, or None when it is not one."""
    if not header or len(header) > MAX_ADDRESS_LENGTH:
        return None
    try:
        return str(ipaddress.ip_address(header.strip()))
    except ValueError:
        return None
