"""Seeing and fixing what an agent remembers: the memories page, and inline editing with a
history of every change and one-click revert, for memories, findings and working-context
items alike. Editing needs the editor role; a person's edit has source `manual`.

One view answers GET with the display or form partial and POST with the display partial
(or the form with errors); other widgets learn of a change through the `memory-changed`
client event. Without JavaScript, the same URLs work as pages and redirects.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from memoryapp.core import search as fulltext
from memoryapp.core.limits import MAX_FACT_CHARS
from memoryapp.core.models import ContextItem, Finding, Memory, MemoryEvent
from memoryapp.dashboard.access import _get_agent_and_role

PAGE = 50
KINDS = ("memory", "finding", "context_item")


def _actor(request: HttpRequest) -> str:
    return f"user:{request.user.get_username()}"


def _get_item_for_user(request: HttpRequest, agent, kind: str, pk: int):
    """A memory, finding or context item of this agent, or 404."""
    if kind == "memory":
        item = Memory.objects.filter(agent=agent, pk=pk).first()
    elif kind == "finding":
        item = Finding.objects.filter(session__agent=agent, pk=pk).select_related("session").first()
    elif kind == "context_item":
        item = (
            ContextItem.objects.filter(session__agent=agent, pk=pk)
            .select_related("session")
            .first()
        )
    else:
        item = None
    if item is None:
        raise Http404("not found")
    return item


class MemoryForm(forms.Form):
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=MAX_FACT_CHARS)
    memory_type = forms.ChoiceField(choices=Memory.Type.choices)
    confidence = forms.FloatField(min_value=0, max_value=1)


class FindingForm(forms.Form):
    query = forms.CharField(required=False, max_length=MAX_FACT_CHARS)
    fact = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=MAX_FACT_CHARS)
    success = forms.BooleanField(required=False)


class ContextItemForm(forms.Form):
    value = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=10_000)
    confidence = forms.FloatField(min_value=0, max_value=1)

    def __init__(self, *args, structured: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.structured = structured

    def clean_value(self):
        text = self.cleaned_data["value"]
        if not self.structured:
            return text
        try:
            return json.loads(text)
        except ValueError:
            raise forms.ValidationError("this value is JSON: enter valid JSON") from None


def _form_for(kind: str, item, data=None):
    if kind == "memory":
        initial = {
            "content": item.content,
            "memory_type": item.memory_type,
            "confidence": item.confidence,
        }
        return MemoryForm(data, initial=initial)
    if kind == "finding":
        initial = {"query": item.query, "fact": item.fact, "success": item.success}
        return FindingForm(data, initial=initial)
    structured = not isinstance(item.value, str)
    text = json.dumps(item.value, ensure_ascii=False) if structured else item.value
    return ContextItemForm(
        data, initial={"value": text, "confidence": item.confidence}, structured=structured
    )


def _save(request: HttpRequest, kind: str, item, form):
    actor = _actor(request)
    data = form.cleaned_data
    if kind == "memory":
        return item.revise(
            actor=actor,
            content=data["content"],
            memory_type=data["memory_type"],
            confidence=data["confidence"],
            source=Memory.Source.MANUAL,
        )
    if kind == "finding":
        item.edit(actor, query=data["query"], fact=data["fact"], success=data["success"])
        return item
    updated, _ = ContextItem.put(
        item.session,
        item.key,
        data["value"],
        source=ContextItem.Source.MANUAL,
        confidence=data["confidence"],
        actor=actor,
    )
    return updated


def _row(
    request: HttpRequest, role: str, agent, kind: str, item, *, status: int = 200
) -> HttpResponse:
    context = {"agent": agent, "kind": kind, "item": item, "role": role}
    return render(request, "dashboard/_item.html", context, status=status)


def _back(agent, kind: str, item) -> str:
    if kind == "memory":
        return f"/agents/{agent.name}/memories/"
    from urllib.parse import quote

    return f"/agents/{agent.name}/sessions/{quote(item.session.key, safe='')}/"


@login_required
@require_GET
def memories(request: HttpRequest, name: str) -> HttpResponse:
    agent, role = _get_agent_and_role(request, name)
    memory_type = request.GET.get("type", "")
    status = request.GET.get("status", "active")
    query = request.GET.get("q", "").strip()[:200]
    session_key = request.GET.get("session", "").strip()[:200]
    try:
        min_confidence = float(request.GET.get("min_confidence") or 0)
        offset = max(0, int(request.GET.get("offset") or 0))
    except ValueError:
        raise Http404("bad filter") from None
    found, more = fulltext.recall_memories(
        agent,
        query=query,
        memory_type=memory_type or None,
        min_confidence=min_confidence or None,
        status=status,
        session_key=session_key or None,
        offset=offset,
        limit=PAGE,
    )
    context = {
        "agent": agent,
        "role": role,
        "memories": found,
        "next_offset": offset + PAGE if more else None,
        "types": Memory.Type.choices,
        "statuses": ["active", "archived", "superseded", "all"],
        "filters": {
            "type": memory_type,
            "status": status,
            "q": query,
            "min_confidence": request.GET.get("min_confidence", ""),
            "session": session_key,
        },
    }
    return render(request, "dashboard/memories.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def item_edit(request: HttpRequest, name: str, kind: str, pk: int) -> HttpResponse:
    """GET: the form (editors) or, with ?display, the display partial. POST: save."""
    need = "viewer" if request.method == "GET" and "display" in request.GET else "editor"
    agent, role = _get_agent_and_role(request, name, need)
    item = _get_item_for_user(request, agent, kind, pk)
    if request.method == "GET":
        if "display" in request.GET:
            return _row(request, role, agent, kind, item)
        context = {"agent": agent, "kind": kind, "item": item, "form": _form_for(kind, item)}
        template = "dashboard/_item_form.html" if request.htmx else "dashboard/edit.html"
        return render(request, template, context)
    if kind == "memory" and item.status == Memory.Status.SUPERSEDED:
        return HttpResponse("This memory was replaced; edit the new one.", status=409)
    form = _form_for(kind, item, request.POST)
    if not form.is_valid():
        context = {"agent": agent, "kind": kind, "item": item, "form": form}
        return render(request, "dashboard/_item_form.html", context, status=422)
    with transaction.atomic():
        saved = _save(request, kind, item, form)
    if not request.htmx:
        return redirect(_back(agent, kind, saved))
    return trigger_client_event(_row(request, role, agent, kind, saved), "memory-changed")


@login_required
@require_POST
def memory_status(request: HttpRequest, name: str, pk: int, action: str) -> HttpResponse:
    """Archive (forget, softly) or restore a memory."""
    agent, role = _get_agent_and_role(request, name, "editor")
    memory = _get_item_for_user(request, agent, "memory", pk)
    with transaction.atomic():
        if action == "archive":
            memory.archive(_actor(request))
        elif action == "restore":
            memory.restore(_actor(request))
        else:
            raise Http404("unknown action")
    if not request.htmx:
        return redirect(_back(agent, "memory", memory))
    return trigger_client_event(_row(request, role, agent, "memory", memory), "memory-changed")


@login_required
@require_GET
def item_history(request: HttpRequest, name: str, kind: str, pk: int) -> HttpResponse:
    agent, role = _get_agent_and_role(request, name)
    item = _get_item_for_user(request, agent, kind, pk)
    ids = [item.pk]
    if kind == "memory":
        # A memory's history includes the facts it replaced, so a replacement can be
        # reverted from the memory people see now.
        frontier = [item.pk]
        while frontier and len(ids) < 50:
            frontier = list(
                Memory.objects.filter(agent=agent, superseded_by_id__in=frontier).values_list(
                    "pk", flat=True
                )
            )
            ids.extend(frontier)
    events = list(
        MemoryEvent.objects.filter(target_kind=kind, target_id__in=ids).order_by(
            "-created_at", "-id"
        )
    )
    targets = type(item).objects.in_bulk(ids) if kind == "memory" else {item.pk: item}
    for event in events:  # what each revert would do, said beside its button
        target = targets.get(event.target_id)
        event.plan = target.revert_plan(event) if target is not None else None
    context = {
        "agent": agent,
        "kind": kind,
        "item": item,
        "events": events,
        "role": role,
    }
    template = "dashboard/_history.html" if request.htmx else "dashboard/history.html"
    return render(request, template, context)


@login_required
@require_POST
def item_revert(request: HttpRequest, name: str, kind: str, pk: int, event_id: int) -> HttpResponse:
    """One click: undo one change from the item's history (itself a new, revertible change)."""
    agent, role = _get_agent_and_role(request, name, "editor")
    item = _get_item_for_user(request, agent, kind, pk)
    event = MemoryEvent.objects.filter(target_kind=kind, target_id=item.pk, pk=event_id).first()
    replacing = request.POST.get("shown_as")  # the row on screen, when reverting a predecessor
    if event is None:
        raise Http404("no such change")
    actor = _actor(request)
    with transaction.atomic():
        if item.revert_plan(event) is None:
            # Offered only where it does something; a stale page must not change nothing
            # and answer success.
            return HttpResponse(
                "This change cannot be reverted: reverting it would change nothing now.",
                status=409,
            )
        back = _back(agent, kind, item)
        item = item.revert(event, actor)
    if item is None:  # the add was undone: the item is gone
        if not request.htmx:
            return redirect(back)
        return trigger_client_event(HttpResponse(""), "memory-changed")
    if not request.htmx:
        return redirect(_back(agent, kind, item))
    response = _row(request, role, agent, kind, item)
    if replacing and replacing.isdigit() and int(replacing) != item.pk:
        # The row on screen showed the replacement: swap it for the restored memory.
        response["HX-Retarget"] = f"#item-{kind}-{int(replacing)}"
        response["HX-Reswap"] = "outerHTML"
    return trigger_client_event(response, "memory-changed")
