"""The settings page's retention preview in chromium: typing a new TTL says which
sessions would expire, before anything is saved.

Needs /usr/bin/chromium (`apt-get install chromium`; `.ci/run` installs it)."""

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from memoryapp.core.models import Agent, Session
from tests.browser_support import log_in, make_user, skip_without_chromium

pytestmark = skip_without_chromium


def test_a_shorter_ttl_names_the_sessions_it_would_expire(page, live_server):
    agent = Agent.objects.create(name="coder", ttl_seconds=7 * 24 * 3600)
    old = Session(agent=agent, key="three-days-ago")
    old.slide_expiry(timezone.now() - timedelta(days=3))
    old.save()
    make_user("stella", agent, role="staff")
    log_in(page.page, live_server, "stella")
    page.page.goto(live_server.url + reverse("dashboard:agent_settings", args=[agent.name]))
    page.page.fill("input[name=ttl_seconds_amount]", "1")
    page.page.select_option("select[name=ttl_seconds_unit]", "days")
    page.page.wait_for_function(
        "document.querySelector('#retention-preview').innerText.includes('three-days-ago')"
    )
    text = page.page.inner_text("#retention-preview")
    assert "1 session would expire at once" in text and "three-days-ago" in text
    assert Agent.objects.get(pk=agent.pk).ttl_seconds == 7 * 24 * 3600  # not saved
    page.page.click("#settings button[type=submit]")
    page.page.wait_for_selector("#settings .ok")
    assert Session.objects.for_agent(agent).active().count() == 0
    assert page.violations == []
