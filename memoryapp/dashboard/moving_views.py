"""Moving memory in and out, per agent (memoryapp.core.moving): the agent's staff upload
another system's files (mem0's get_all JSON and history.db, Letta agent files) or give a
Redis Agent Memory Server's address (the site's staff only: the server fetches from its
own network), see a dry run (what would be created or skipped, and why), then import;
anyone who may see the agent downloads its memory as mem0 or Redis Agent Memory Server
JSON.

The dry run and the import are one form: the page answers the report into its own box
and leaves the form as it is, so the files chosen stay chosen for the import after it.
A malformed source is a 422 naming where it broke, with nothing written."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from memoryapp.core.moving import SYSTEMS, Source, SourceError, move_in
from memoryapp.dashboard.access import _get_agent_and_role

PAGE = "dashboard/moving.html"
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # all files of one import together
MAX_FILES = 20
MAX_NAMES = 20  # namespaces or user ids typed in


def _names(text: str) -> list[str]:
    return [n.strip()[:200] for n in text.replace(",", " ").split() if n.strip()][:MAX_NAMES]


def _source(request: HttpRequest) -> Source | str:
    """What the form gives, or what is wrong with it."""
    uploads = request.FILES.getlist("files")
    url = request.POST.get("url", "").strip()[:2000]
    if bool(uploads) == bool(url):
        return "Choose the files to import, or give a server's address: one of the two."
    if url and not url.startswith(("http://", "https://")):
        return "A server's address starts with http:// or https://."
    if url and not request.user.is_staff:
        # The server fetches from the address given, inside its own network.
        return "Reading from a server's address is for the site's staff; upload an export."
    if len(uploads) > MAX_FILES or sum(f.size for f in uploads) > MAX_UPLOAD_BYTES:
        return f"At most {MAX_FILES} files and {MAX_UPLOAD_BYTES // 2**20} MB in one import."
    options = {
        "namespace": _names(request.POST.get("namespace", "")),
        "user_id": _names(request.POST.get("user_id", "")),
    }
    files = [(f.read(), (f.name or "upload")[:200]) for f in uploads]
    return Source(files=files, url=url, options=options)


def _context(agent, role, **extra) -> dict:
    systems = list(SYSTEMS.values())
    return {
        "agent": agent,
        "role": role,
        "systems": systems,
        "exports": [s for s in systems if s.export is not None],
        **extra,
    }


@login_required
@require_http_methods(["GET", "POST"])
def moving_page(request: HttpRequest, name: str) -> HttpResponse:
    agent, role = _get_agent_and_role(request, name, need="staff")
    if request.method == "GET":
        return render(request, PAGE, _context(agent, role))
    system = SYSTEMS.get(request.POST.get("system", ""))
    dry = request.POST.get("action") != "import"
    source = _source(request) if system is not None else "Choose where the memory is now."
    problem, report = "", None
    if isinstance(source, str):
        problem = source
    else:
        try:
            plan = system.read(source)
            report = move_in(agent, plan, dry_run=dry, actor=f"user:{request.user.username}")
        except SourceError as exc:
            problem = f"Nothing imported: {exc.where}: {exc.what}"
    context = _context(agent, role, report=report, problem=problem, chosen=system)
    template = f"{PAGE}#report" if request.htmx else PAGE
    return render(request, template, context, status=422 if problem else 200)


@login_required
@require_GET
def export_memory(request: HttpRequest, name: str, system: str) -> HttpResponse:
    agent, _ = _get_agent_and_role(request, name)
    found = SYSTEMS.get(system)
    if found is None or found.export is None:
        return HttpResponse("no such format", status=404, content_type="text/plain")
    body = json.dumps(found.export(agent), indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{agent.name}-{found.name}.json"'
    return response
