"""Agent settings and API keys from the dashboard: the agent's staff role only."""

import pytest
from django.test import Client

from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.models import Agent, ApiKey
from tests.conftest import logged_in_member

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}
SETTINGS = {
    "ttl_seconds_amount": "2",
    "ttl_seconds_unit": "hours",
    "max_messages": "50",
    "token_budget": "16000",
    "encoding": "cl100k_base",
    "working_budget": "3000",
}


@pytest.fixture
def agent(db):
    return Agent.objects.create(name="coder")


def test_only_staff_reach_settings_and_keys(agent):
    key = ApiKey.issue(agent)[0]
    for role in ("viewer", "editor"):
        client = logged_in_member(role, agent, role)
        assert client.get("/agents/coder/settings/").status_code == 403
        assert client.post("/agents/coder/settings/", SETTINGS).status_code == 403
        assert client.post("/agents/coder/keys/").status_code == 403
        assert client.post(f"/agents/coder/keys/{key.pk}/revoke/").status_code == 403
        assert "Settings and API keys" not in client.get("/agents/coder/").content.decode()
    outsider = logged_in_member("staff", Agent.objects.create(name="other"), "otto")
    assert outsider.get("/agents/coder/settings/").status_code == 404
    assert outsider.post(f"/agents/other/keys/{key.pk}/revoke/").status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None
    agent.refresh_from_db()
    assert agent.ttl_seconds == 3600


def test_staff_change_settings(agent):
    staff = logged_in_member("staff", agent, "sam")
    response = staff.post("/agents/coder/settings/", SETTINGS, headers=HX)
    assert response.status_code == 200 and "Saved." in response.content.decode()
    agent.refresh_from_db()
    assert (agent.ttl_seconds, agent.max_messages, agent.token_budget, agent.working_budget) == (
        7200,
        50,
        16000,
        3000,
    )
    bad = staff.post(
        "/agents/coder/settings/", {**SETTINGS, "encoding": "nope", "max_messages": "0"}, headers=HX
    )
    assert bad.status_code == 422 and "nope is not one of the available choices" in (
        bad.content.decode()
    )
    agent.refresh_from_db()
    assert agent.encoding == "cl100k_base" and agent.max_messages == 50


def test_keys_are_shown_once_and_revocable(agent):
    staff = logged_in_member("staff", agent, "sam")
    response = staff.post("/agents/coder/keys/", {"name": "ci"}, headers=HX)
    html = response.content.decode()
    raw = html.split('<pre class="secret" id="new-key">')[1].split("</pre>")[0]
    assert raw.startswith("mk_")
    api = Client()
    assert api.get("/api/v1/agent", headers={"Authorization": f"Bearer {raw}"}).status_code == 200
    assert raw not in staff.get("/agents/coder/settings/").content.decode()  # never again
    key = ApiKey.objects.get(name="ci")
    staff.post(f"/agents/coder/keys/{key.pk}/revoke/", headers=HX)
    assert api.get("/api/v1/agent", headers={"Authorization": f"Bearer {raw}"}).status_code == 401


def test_tokens_per_day_chart(agent):
    append_turn(
        agent, "s", TurnInput([MessageInput("user", "hello")], input_tokens=120, output_tokens=30)
    )
    viewer = logged_in_member("viewer", agent, "vera")
    page = viewer.get("/agents/coder/")
    today = page.context["chart"].columns[-1]
    assert today.total == 150 and [bar.value for bar in today.bars] == [120, 30]
    assert "150 tokens (120 input, 30 output)</title>" in page.content.decode()
