"""What people expect of any site: a styled login page, a favicon, a title on every page,
and a way back to the dashboard from the API docs and from the admin."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from memoryapp.core.models import Agent
from tests.browser_support import log_in, make_user, skip_without_chromium
from tests.conftest import logged_in_member
from tests.html_support import one, select

pytestmark = pytest.mark.django_db
TEMPLATES = Path(settings.BASE_DIR) / "templates"
EXTENDS_BASE = re.compile(r"""{%\s*extends\s+["']base\.html["']\s*%}""")
PAGES = sorted(
    path.relative_to(TEMPLATES).as_posix()
    for path in TEMPLATES.rglob("*.html")
    if EXTENDS_BASE.search(path.read_text())
)


@pytest.fixture
def staff(db) -> Client:
    return logged_in_member(None, Agent.objects.create(name="coder"), "sam", staff=True)


def _favicon(html: str) -> str:
    return one(html, "link", rel="icon")[0]["href"]


def test_the_login_page_is_styled_and_labelled():
    html = Client().get("/accounts/login/").content.decode()
    assert one(html, "title")[1] == "Log in · memoryapp"
    assert one(html, "link", rel="stylesheet")[0]["href"] == "/static/memoryapp.css"
    assert _favicon(html) == "/static/favicon.svg"
    form, _ = one(html, "form", action="/accounts/login/")
    assert form["method"] == "post"
    for name in ("username", "password"):
        field, _ = one(html, "input", name=name)
        assert one(html, "label", **{"for": field["id"]})
    assert one(html, "input", name="password")[0]["autocomplete"] == "current-password"
    assert one(html, "button", type="submit", **{"class": "primary"})[1] == "Log in"


def test_a_wrong_password_says_so_and_the_right_one_logs_in(db):
    get_user_model().objects.create_user("sam", password="pw-for-tests-only")
    client = Client()
    wrong = client.post("/accounts/login/", {"username": "sam", "password": "nope"})
    _, alert = one(wrong.content.decode(), role="alert")
    assert "correct username and password" in alert
    right = client.post("/accounts/login/", {"username": "sam", "password": "pw-for-tests-only"})
    assert right.status_code == 302 and right["Location"] == "/"


def test_the_favicon_is_ours_and_served(staff):
    assert _favicon(staff.get("/").content.decode()) == "/static/favicon.svg"
    response = staff.get("/static/favicon.svg")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(response.streaming_content)


@pytest.mark.parametrize("template", PAGES)
def test_every_page_has_its_own_title(template):
    """Tabs and history entries say which page they are, not only "memoryapp"."""
    source = (TEMPLATES / template).read_text()
    title = re.search(r"{% block title %}(.*?){% endblock %}", source)
    assert title, f"{template} has no title block"
    assert title.group(1).strip() not in ("", "memoryapp")


def test_the_title_blocks_reach_the_pages(staff):
    assert {"registration/login.html", "dashboard/cleanup.html", "dashboard/agents.html"} <= set(
        PAGES
    )
    titles = [one(staff.get(path).content.decode(), "title")[1] for path in ("/", "/cleanup/")]
    assert titles == ["Agents · memoryapp", "Cleanup · memoryapp"]


def test_the_admin_is_branded_and_links_back_to_the_dashboard(db):
    user = get_user_model().objects.create_superuser("root", password="pw-for-tests-only")
    anonymous = Client().get("/admin/login/").content.decode()
    client = Client()
    client.force_login(user)
    for html in (anonymous, client.get("/admin/").content.decode()):
        assert one(html, "a", id="dashboard-link")[0]["href"] == "/"
        assert one(html, "title")[1].endswith("| memoryapp admin")
        assert _favicon(html) == "/static/favicon.svg"
        assert one(html, "div", id="site-name")[1] == "memoryapp admin"


def test_the_admin_link_shows_only_where_the_admin_shows_something(staff):
    from django.contrib.auth.models import Permission

    def links(client: Client) -> list[str]:
        html = client.get("/").content.decode()
        return [a["href"] for a, _ in select(html, "a") if a["href"] in ("/admin/", "/cleanup/")]

    assert links(staff) == ["/cleanup/"]  # staff, but no admin permission
    assert "permission to view or edit anything" in staff.get("/admin/").content.decode()
    sam = get_user_model().objects.get(username="sam")
    sam.user_permissions.add(Permission.objects.get(codename="view_memory"))
    assert links(staff) == ["/cleanup/", "/admin/"]
    root = get_user_model().objects.create_superuser("root", password="pw-for-tests-only")
    client = Client()
    client.force_login(root)
    assert links(client) == ["/cleanup/", "/admin/"]
    member = logged_in_member("viewer", Agent.objects.get(name="coder"), "vera")
    assert links(member) == []


def test_the_api_docs_link_back_to_the_dashboard_without_inline_script():
    response = Client().get("/api/v1/docs")
    html = response.content.decode()
    assert one(html, "title")[1] == "API docs · memoryapp"
    link, text = one(html, "a", id="dashboard-link")
    assert link["href"] == "/" and "dashboard" in text
    assert _favicon(html) == "/static/favicon.svg"
    # The CSP allows scripts from our host only: every script is a file, or JSON data.
    scripts = select(html, "script")
    assert scripts and all(a.get("src") or a.get("type") == "application/json" for a, _ in scripts)
    assert "script-src 'self'" in response["Content-Security-Policy"]
    # The settings the page carries still name the OpenAPI document.
    _, settings_json = one(html, "script", id="swagger-settings")
    assert '"url": "/api/v1/openapi.json"' in settings_json


def _in_chromium(test):
    for mark in skip_without_chromium:
        test = mark(test)
    return test


@_in_chromium
def test_in_a_browser_the_docs_and_the_admin_lead_back_to_the_dashboard(page, live_server):
    """Swagger UI renders under the strict CSP, and both links land on the dashboard."""
    from django.contrib.auth.models import Permission

    sam = make_user("sam", staff=True)
    sam.user_permissions.add(Permission.objects.get(codename="view_memory"))  # the admin's
    browser_page = page.page
    log_in(browser_page, live_server, "sam")
    browser_page.goto(live_server.url + "/api/v1/docs")
    browser_page.locator(".opblock").first.wait_for()  # the operations, drawn by swagger-ui
    browser_page.click("#dashboard-link")
    browser_page.wait_for_url(live_server.url + "/")
    browser_page.click("header.top >> text=Admin")
    browser_page.click("#dashboard-link")
    browser_page.wait_for_url(live_server.url + "/")
    assert browser_page.title() == "Agents · memoryapp"
    assert page.dialogs == [] and page.violations == []
