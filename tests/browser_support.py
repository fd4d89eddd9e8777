"""Shared by the browser tests: Playwright driving Debian's chromium (headless,
--no-sandbox; Playwright's own browser download is never used). The `browser` and
`page` fixtures live in conftest.py; a test module sets `pytestmark = skip_without_chromium` (the
skip marker and transactional database) and the helpers from here.

Needs /usr/bin/chromium (`apt-get install chromium`; `.ci/run` installs it).
"""

import shutil
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.contrib.auth import get_user_model

from memoryapp.dashboard.models import Membership

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAYLOADS = [
    line
    for line in (Path(__file__).parent / "fixtures" / "xss_payloads.txt").read_text().splitlines()
    if line.strip()
]
PASSWORD = "pw-for-browser-tests"

skip_without_chromium = [
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="needs Debian's chromium: apt-get install chromium"
    ),
    pytest.mark.django_db(transaction=True),
]


class Watched:
    """A page that records dialogs, CSP violations and page errors."""

    def __init__(self, page):
        self.page = page
        self.dialogs = []
        self.violations = []
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        page.on(
            "console",
            lambda msg: (
                self.violations.append(msg.text)
                if "Content Security Policy" in msg.text or "Refused to" in msg.text
                else None
            ),
        )
        page.on("pageerror", lambda error: self.violations.append(str(error)))


def make_user(name, agent=None, role="editor", staff=False):
    user = get_user_model().objects.create_user(name, password=PASSWORD, is_staff=staff)
    if agent is not None:
        Membership.objects.create(user=user, agent=agent, role=role)
    return user


def log_in(page, live_server, username):
    page.goto(live_server.url + "/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + "/")


def append(live_server, key, session, content):
    response = httpx.post(
        f"{live_server.url}/api/v1/sessions/{quote(session, safe='')}/turns",
        json={"messages": [{"role": "user", "content": content}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
