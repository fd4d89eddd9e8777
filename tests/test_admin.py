"""Every model has a working admin page with its search and filters."""

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client

from memoryapp.core.models import ApiKey, Message

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(api):
    # `api` stores a turn below, so every changelist has a row to render.
    api.post(
        "/api/v1/sessions/s1/turns",
        {
            "messages": [{"role": "user", "content": "<script>alert(1)</script>"}],
            "tool_calls": [{"tool": "grep", "output": "x"}],
        },
    )
    user = get_user_model().objects.create_superuser("root", password="pw-for-tests")
    client = Client()
    client.force_login(user)
    return client


def test_every_model_has_an_admin_changelist_with_search(staff_client):
    core_models = [m for m in admin.site._registry if m._meta.app_label == "core"]
    assert len(core_models) == 15
    for model in core_models:
        url = f"/admin/core/{model._meta.model_name}/"
        assert staff_client.get(url).status_code == 200, url
        assert staff_client.get(url, {"q": "x"}).status_code == 200, url


def test_admin_escapes_agent_text(staff_client):
    message = Message.objects.get()
    page = staff_client.get(f"/admin/core/message/{message.pk}/change/")
    assert page.status_code == 200
    assert b"<script>alert(1)</script>" not in page.content
    assert b"&lt;script&gt;" in page.content


def test_admin_can_revoke_keys_but_not_add_them(staff_client):
    key = ApiKey.objects.get()
    assert staff_client.get("/admin/core/apikey/add/").status_code == 403
    staff_client.post("/admin/core/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.is_revoked
