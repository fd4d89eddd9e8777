"""The import page in chromium (memoryapp/dashboard/moving_views.py): the files chosen stay
chosen from the dry run to the import, and the imported memories say where they came from.

Needs /usr/bin/chromium (`apt-get install chromium`; `.ci/run` installs it)."""

from pathlib import Path

from django.urls import reverse

from memoryapp.core.models import Agent, Memory
from tests.browser_support import log_in, make_user, skip_without_chromium

pytestmark = skip_without_chromium
FIXTURES = Path(__file__).parent / "fixtures"


def test_in_a_browser_the_files_stay_chosen_from_dry_run_to_import(page, live_server):
    agent = Agent.objects.create(name="coder")
    make_user("stella", agent, role="staff")
    log_in(page.page, live_server, "stella")
    page.page.goto(live_server.url + reverse("dashboard:moving", args=[agent.name]))
    page.page.check("input[name=system][value=letta]")
    page.page.set_input_files("input[name=files]", str(FIXTURES / "letta" / "loop.af"))
    page.page.click("button[value=preview]")
    page.page.wait_for_selector("#report table")
    assert "1 session and 9 memories would be created" in page.page.inner_text("#report")
    assert not Memory.objects.filter(agent=agent).exists()
    page.page.click("button[value=import]")
    page.page.wait_for_selector("#report >> text=Imported from Letta")
    assert "1 session and 9 memories created" in page.page.inner_text("#report")
    assert Memory.objects.filter(agent=agent).count() == 9
    page.page.click("#report >> text=See the memories")
    page.page.wait_for_selector(".origin")
    assert "core memory block persona" in page.page.inner_text("#memory-list")
    assert page.violations == [] and page.dialogs == []
