"""An agent's TTL (memoryapp/core/retention.py): what a new one would do, shown before it
is saved, and applied to the live sessions when it is, from the settings page and from
`PATCH /agent` alike."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from memoryapp.core import retention
from memoryapp.core.models import Session
from tests.conftest import logged_in_member


def _session(agent, key: str, active_ago: timedelta, own_ttl: int | None = None) -> Session:
    session = Session(agent=agent, key=key, ttl_seconds=own_ttl)
    session.slide_expiry(timezone.now() - active_ago)
    session.save()
    return session


def _sessions(agent):
    _session(agent, "two-hours-ago", timedelta(hours=2))  # agent TTL 3600: expired already
    agent.ttl_seconds = 7 * 24 * 3600
    agent.save()
    _session(agent, "three-days-ago", timedelta(days=3))
    _session(agent, "ten-minutes-ago", timedelta(minutes=10))
    _session(agent, "its-own-ttl", timedelta(days=3), own_ttl=30 * 24 * 3600)


def test_the_preview_says_which_sessions_would_go_and_when(agent):
    _sessions(agent)
    now = timezone.now()
    shorter = retention.preview(agent, 24 * 3600, now)
    assert [c.key for c in shorter.at_once] == ["three-days-ago"]
    assert [c.key for c in shorter.within_a_day] == ["ten-minutes-ago"]
    assert shorter.own_ttl_count == 1 and shorter.later_count == 0
    # Nothing was saved or moved.
    assert Session.objects.get(key="three-days-ago").expires_at > now
    longer = retention.preview(agent, 30 * 24 * 3600, now)
    assert longer.at_once == [] and longer.within_a_day == [] and longer.later_count == 2
    assert retention.preview(agent, agent.ttl_seconds, now).changes_nothing


def test_saving_a_ttl_applies_it_to_the_live_sessions(agent):
    _sessions(agent)
    client = logged_in_member("staff", agent, "stella")
    url = reverse("dashboard:agent_settings", args=[agent.name])
    form = client.get(url).context["form"]
    data = {k: v for k, v in form.initial.items() if v is not None and k != "ttl_seconds"}
    data.update(ttl_seconds_amount="1", ttl_seconds_unit="days")
    assert client.post(url, data).status_code == 302
    now = timezone.now()
    live = set(Session.objects.for_agent(agent).active(now).values_list("key", flat=True))
    assert live == {"ten-minutes-ago", "its-own-ttl"}
    going = Session.objects.get(key="ten-minutes-ago")
    assert going.expires_at == going.last_activity_at + timedelta(days=1)
    assert Session.objects.get(key="two-hours-ago").is_expired(now)  # not brought back


def test_patch_agent_applies_it_too(agent, api):
    _sessions(agent)
    response = api.patch("/api/v1/agent", {"ttl_seconds": 24 * 3600})
    assert response.status_code == 200, response.text
    live = Session.objects.for_agent(agent).active(timezone.now())
    assert set(live.values_list("key", flat=True)) == {"ten-minutes-ago", "its-own-ttl"}


def test_the_settings_page_previews_before_saving(agent):
    _sessions(agent)
    client = logged_in_member("staff", agent, "stella")
    url = reverse("dashboard:retention_preview", args=[agent.name])
    answer = client.post(
        url, {"ttl_seconds_amount": "1", "ttl_seconds_unit": "days"}, HTTP_HX_REQUEST="true"
    )
    page = answer.content.decode()
    assert "1 session would expire at once" in page and "three-days-ago" in page
    assert "1 session would expire within a day" in page and "ten-minutes-ago" in page
    assert "1 session with a TTL of its own keeps it" in page
    assert agent.__class__.objects.get(pk=agent.pk).ttl_seconds == 7 * 24 * 3600
    same = client.post(url, {"ttl_seconds_amount": "7", "ttl_seconds_unit": "days"})
    assert "no session's expiry changes" in same.content.decode()
    bad = client.post(url, {"ttl_seconds_amount": "0", "ttl_seconds_unit": "days"})
    assert bad.status_code == 422
    assert logged_in_member("editor", agent, "ed").post(url, {}).status_code == 403
