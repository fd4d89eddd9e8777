"""The dashboard's import and export page (memoryapp/dashboard/moving_views.py): staff
only for the import, a dry run that writes nothing, a malformed file a 422 that names
where it broke, the imported memories marked with where they came from, and the exports
as downloads (tests/test_browser_moving.py: the page in chromium)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from memoryapp.core.models import Agent, Memory, Origin, Session
from tests.conftest import logged_in_member

FIXTURES = Path(__file__).parent / "fixtures"


def _mem0_files():
    return [
        SimpleUploadedFile(n, (FIXTURES / "mem0" / n).read_bytes())
        for n in ("get_all_alice.json", "get_all_bob.json", "history.db")
    ]


def test_only_the_agents_staff_import(agent):
    url = reverse("dashboard:moving", args=[agent.name])
    assert logged_in_member("editor", agent, "ed").get(url).status_code == 403
    assert logged_in_member(None, agent, "nobody").get(url).status_code == 404
    assert logged_in_member("staff", agent, "stella").get(url).status_code == 200


def test_a_dry_run_then_the_import(agent):
    client = logged_in_member("staff", agent, "stella")
    url = reverse("dashboard:moving", args=[agent.name])
    dry = client.post(url, {"system": "mem0", "action": "preview", "files": _mem0_files()})
    assert dry.status_code == 200
    assert "9 memories would be created" in dry.content.decode()
    assert not Memory.objects.filter(agent=agent).exists()
    done = client.post(url, {"system": "mem0", "action": "import", "files": _mem0_files()})
    assert "9 memories created" in done.content.decode()
    assert Origin.objects.filter(agent=agent, system="mem0").count() == 9
    again = client.post(url, {"system": "mem0", "action": "import", "files": _mem0_files()})
    assert "9 memories skipped" in again.content.decode()
    page = client.get(reverse("dashboard:memories", args=[agent.name])).content.decode()
    assert "imported from mem0, id 191bbc0a-9f7a-47e1-9b32-445568a86732" in page


def test_a_broken_file_is_a_422_naming_where_and_nothing_is_written(agent):
    client = logged_in_member("staff", agent, "stella")
    url = reverse("dashboard:moving", args=[agent.name])
    cut = (FIXTURES / "letta" / "loop.af").read_bytes()[:3000]
    answer = client.post(
        url,
        {"system": "letta", "action": "import", "files": [SimpleUploadedFile("loop.af", cut)]},
        headers={"HX-Request": "true"},
    )
    assert answer.status_code == 422
    assert re.search(
        r"Nothing imported: agent file: line \d+ column \d+: not JSON", answer.content.decode()
    )
    assert not Session.objects.filter(agent=agent).exists()
    neither = client.post(url, {"system": "letta", "action": "preview"})
    assert neither.status_code == 422 and "one of the two" in neither.content.decode()
    both = client.post(url, {"system": "ams", "url": "ftp://x", "action": "preview"})
    assert both.status_code == 422 and "http://" in both.content.decode()


def test_the_exports_download_for_anyone_who_sees_the_agent(agent):
    Memory.remember(agent, "Deploys on Tuesdays", memory_type="fact", confidence=0.8,
                    actor="agent:x")  # fmt: skip
    client = logged_in_member("viewer", agent, "vera")
    mem0 = client.get(reverse("dashboard:moving_export", args=[agent.name, "mem0"]))
    assert mem0["Content-Disposition"] == f'attachment; filename="{agent.name}-mem0.json"'
    assert [i["memory"] for i in json.loads(mem0.content)["results"]] == ["Deploys on Tuesdays"]
    ams = json.loads(
        client.get(reverse("dashboard:moving_export", args=[agent.name, "ams"])).content
    )
    assert [r["text"] for r in ams["long_term_memory"]] == ["Deploys on Tuesdays"]
    assert (
        client.get(reverse("dashboard:moving_export", args=[agent.name, "letta"])).status_code
        == 404
    )
    other = Agent.objects.create(name="other")
    assert (
        client.get(reverse("dashboard:moving_export", args=[other.name, "mem0"])).status_code == 404
    )


def test_reading_from_a_server_is_for_the_sites_staff(agent):
    client = logged_in_member("staff", agent, "stella")  # the agent's staff, not the site's
    url = reverse("dashboard:moving", args=[agent.name])
    answer = client.post(url, {"system": "ams", "url": "http://127.0.0.1:9", "action": "preview"})
    assert answer.status_code == 422 and "for the site&#x27;s staff" in answer.content.decode()
    site = logged_in_member("staff", agent, "sam", staff=True)
    answer = site.post(url, {"system": "ams", "url": "http://127.0.0.1:9", "action": "preview"})
    assert answer.status_code == 422 and "cannot reach the server" in answer.content.decode()
