"""http/proxy.py: behind bin/serve's nginx the client's address is the X-Real-IP header
nginx writes, and only where the setting says the header can be trusted."""

from __future__ import annotations

import pytest
from django.test import RequestFactory, override_settings

from memoryapp.http.proxy import RealAddressMiddleware, real_address


def address_seen(header: str | None) -> str:
    seen = []
    extra = {} if header is None else {"HTTP_X_REAL_IP": header}
    request = RequestFactory().get("/api/v1/sessions", REMOTE_ADDR="", **extra)
    RealAddressMiddleware(lambda r: seen.append(r.META["REMOTE_ADDR"]))(request)
    return seen[0]


@override_settings(MEMORYAPP_TRUST_X_REAL_IP=True)
@pytest.mark.parametrize(
    ("header", "seen"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:DB8::1", "2001:db8::1"),  # canonical text: one counter per address
        (" 198.51.100.2 ", "198.51.100.2"),
        ("203.0.113.7, 10.0.0.1", ""),  # a list is not what nginx writes
        ("not an address", ""),
        ("1" * 100, ""),
        ("", ""),
        (None, ""),
    ],
)
def test_a_trusted_header_that_is_an_address_becomes_the_clients_address(header, seen):
    assert address_seen(header) == seen


def test_the_header_is_ignored_unless_trusted():
    assert address_seen("203.0.113.7") == ""


def test_real_address_bounds_what_it_parses():
    assert real_address("::ffff:192.0.2.1") == "::ffff:c000:201"
    assert real_address("192.0.2.1" + " " * 100) is None
