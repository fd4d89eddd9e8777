"""Screenshots of the dashboard pages the README shows, from the demo data.

Sets up a throwaway embedded database with `seed_demo` (real transcripts through the API,
extraction in-process, an agent whose settings prune, memories with their history, an
expired session), starts the server, logs in as `demo` with Playwright and Debian's
chromium, and saves PNGs into docs/screenshots/ (or `--out`). Everything shown comes from
`seed_demo`: this script changes no data, so the pictures show what `./bin/demo` shows.

    .venv/bin/python docs/make_screenshots.py [--out DIR] [--port 8765]

A page that no longer has the element a shot scrolls to stops the script, naming it:
the picture would no longer show what the README says it does.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
AGENT = "demo-agent"
MOVED_AGENT = "moved-in"  # memory imported from mem0 and Letta
# The seeded sessions each shot is about (memoryapp/clients/management/commands/seed_demo.py).
SESSION = "swe-agent:pydicom__pydicom-1458"  # goal, subtasks, findings, working context
LONG_SESSION = "claude-code:python-to-rust-port"  # 80 messages: pruned, with a summary
HISTORY_OF = "standalone Rust library"  # a memory replaced by the agent, then by a person


@dataclass(frozen=True)
class Shot:
    name: str
    path: str
    # Scroll this element to the top of the window first (None: the top of the page).
    scroll_to: str | None = None
    # Click this first and wait for what it loads (the pruned-history marker's link).
    click: str | None = None
    full_page: bool = True
    # Before the click: tick this, and choose this file (relative to the repository) in
    # the file input (the import page's dry run).
    check: str | None = None
    upload: str | None = None


def shots(memory_id: int) -> list[Shot]:
    agent = f"/agents/{AGENT}"
    return [
        Shot("agents.png", "/"),
        Shot("agent.png", f"{agent}/?status=all"),
        Shot("session.png", f"{agent}/sessions/{SESSION}/", full_page=False),
        Shot(
            "session-summary.png",
            f"{agent}/sessions/{LONG_SESSION}/",
            scroll_to="#received",
            full_page=False,
        ),
        Shot(
            "session-pruned.png",
            f"{agent}/sessions/{LONG_SESSION}/",
            scroll_to="#pruned-marker",
            click="#pruned-marker a",
            full_page=False,
        ),
        Shot("memories.png", f"{agent}/memories/?status=all"),
        Shot("memory-history.png", f"{agent}/items/memory/{memory_id}/history/"),
        Shot("search.png", f"{agent}/search/?q=pixel+representation"),
        Shot("settings.png", f"{agent}/settings/"),
        Shot(
            "import.png",
            f"{agent}/move/",
            check="input[name=system][value=letta]",
            upload="tests/fixtures/letta/customer_service.af",
            click="button[value=preview]",
        ),
        Shot("memories-imported.png", f"/agents/{MOVED_AGENT}/memories/?status=all"),
        Shot("cleanup.png", "/cleanup/"),
    ]


def _memory_id(base: str, key: str) -> int:
    """The active memory whose history the README shows, found through the agent API."""
    found = httpx.get(
        base + "/api/v1/memories",
        params={"query": HISTORY_OF, "status": "active"},
        headers={"Authorization": f"Bearer {key}"},
    ).json()["items"]
    if not found:
        raise SystemExit(f"seed_demo made no active memory about {HISTORY_OF!r}")
    return found[0]["id"]


def _take(page, base: str, shot: Shot, out: Path) -> None:
    page.goto(base + shot.path)
    page.wait_for_load_state("networkidle")
    if shot.check:
        page.check(shot.check)
    if shot.upload:
        page.set_input_files("input[type=file]", str(ROOT / shot.upload))
    if shot.click:
        link = page.locator(shot.click).first
        if link.count() == 0:
            raise SystemExit(f"{shot.name}: {shot.path} has no {shot.click}")
        link.click()
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(300)
    if shot.scroll_to:
        target = page.locator(shot.scroll_to).first
        if target.count() == 0:
            raise SystemExit(f"{shot.name}: {shot.path} has no {shot.scroll_to}")
        target.evaluate("element => element.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)
    page.screenshot(path=str(out / shot.name), full_page=shot.full_page)
    print("saved", out / shot.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs go")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()

    var = tempfile.mkdtemp(prefix="memoryapp-shots-")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(MEMORYAPP_VAR_DIR=var, DJANGO_SETTINGS_MODULE="memoryapp.settings")
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
    seeded = subprocess.run(
        [*manage, "seed_demo"], env=env, check=True, cwd=ROOT, capture_output=True, text=True
    ).stdout
    password = re.search(r"with password:\n\s+(\S+)", seeded).group(1)
    key = seeded.strip().splitlines()[-1]
    server = subprocess.Popen(
        [*manage, "runserver", f"127.0.0.1:{args.port}", "--noreload"], env=env, cwd=ROOT
    )
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(100):
            try:
                httpx.get(base + "/api/v1/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        memory_id = _memory_id(base, key)
        from playwright.sync_api import sync_playwright

        args.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.goto(base + "/accounts/login/")
            page.fill("#id_username", "demo")
            page.fill("#id_password", password)
            page.click("button[type=submit]")
            page.wait_for_url(base + "/")
            for shot in shots(memory_id):
                _take(page, base, shot, args.out)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(var, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
