"""Screenshots of the main dashboard pages for the README, from the demo data.

Sets up a throwaway embedded database with `seed_demo` (real transcripts through the API,
extraction in-process), starts the server, logs in with Playwright and Debian's chromium,
and saves PNGs into docs/screenshots/.

    .venv/bin/python docs/make_screenshots.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def main() -> int:
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
        [*manage, "runserver", "127.0.0.1:8765", "--noreload"], env=env, cwd=ROOT
    )
    base = "http://127.0.0.1:8765"
    try:
        for _ in range(100):
            try:
                httpx.get(base + "/api/v1/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        api = {"Authorization": f"Bearer {key}"}
        session = "swe-agent:pydicom__pydicom-1458"
        httpx.patch(base + "/api/v1/agent", json={"max_messages": 12}, headers=api)
        for content, kind, confidence in [
            (
                "pydicom's numpy handler needs PixelRepresentation only for signed data",
                "lesson",
                0.9,
            ),
            ("Run the tests with pytest -q from the repository root", "convention", 0.85),
            ("The user prefers small, reviewed patches", "preference", 0.6),
        ]:
            httpx.post(
                base + "/api/v1/memories",
                json={
                    "content": content,
                    "memory_type": kind,
                    "confidence": confidence,
                    "session": session,
                },
                headers=api,
            )
        httpx.post(
            base + f"/api/v1/sessions/{session}/subtasks",
            json={"title": "Reproduce the bug", "status": "done"},
            headers=api,
        )
        httpx.post(
            base + f"/api/v1/sessions/{session}/subtasks",
            json={"title": "Fix numpy_handler", "status": "in_progress"},
            headers=api,
        )
        from playwright.sync_api import sync_playwright

        OUT.mkdir(parents=True, exist_ok=True)
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
            shots = [
                ("agents.png", "/"),
                ("agent.png", "/agents/demo-agent/?status=all"),
                ("session.png", f"/agents/demo-agent/sessions/{session}/"),
                ("memories.png", "/agents/demo-agent/memories/"),
                ("cleanup.png", "/cleanup/"),
            ]
            for name, path in shots:
                page.goto(base + path)
                page.wait_for_timeout(500)
                page.screenshot(path=str(OUT / name), full_page=name != "session.png")
                print("saved", OUT / name)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(var, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
