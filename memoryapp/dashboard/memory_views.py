"""Seeing and fixing what an agent remembers: the memories page (with bulk archive and
delete), and adding, editing, the history of every change with its diff and one-click
revert, for memories, findings and working-context items alike. Editing needs the
editor role; a person's change has source `manual` and actor `user:<name>`.

What differs between the three kinds is said once, in `EDITABLE`: the model, which holds
the behaviour (add, edit, revert, whose history, where it is shown), and its forms. One
view answers GET with the display or form partial and POST with the display partial (or
the form with errors); other widgets learn of a change through the `memory-changed`
client event. Without JavaScript, the same URLs work as pages and redirects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from memoryapp.core import embeddings, recall
from memoryapp.core.limits import MAX_FACT_CHARS
from memoryapp.core.models import Agent, ContextItem, Finding, Memory, MemoryEvent, Origin
from memoryapp.dashboard.access import _get_agent_and_role, _get_session_for_user

PAGE = 50
HISTORY_ROWS = 200  # newest changes shown in one history


def _actor(request: HttpRequest) -> str:
    return f"user:{request.user.get_username()}"


def _row_id(text: str) -> int | None:
    """A row id a form sent, or None if it is none: ASCII digits only (`²` and `①` are
    digits to str.isdigit() and not to int()), and no more than a bigint column holds."""
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    return None


# --- forms ------------------------------------------------------------------------------


class MemoryForm(forms.Form):
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=MAX_FACT_CHARS)
    memory_type = forms.ChoiceField(choices=Memory.Type.choices, label="Type")
    confidence = forms.FloatField(min_value=0, max_value=1, initial=0.8)

    @classmethod
    def for_item(cls, memory: Memory, data=None) -> MemoryForm:
        initial = {
            "content": memory.content,
            "memory_type": memory.memory_type,
            "confidence": memory.confidence,
        }
        return cls(data, initial=initial)


class FindingForm(forms.Form):
    query = forms.CharField(required=False, max_length=MAX_FACT_CHARS)
    fact = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=MAX_FACT_CHARS)
    success = forms.BooleanField(required=False, initial=True)

    @classmethod
    def for_item(cls, finding: Finding, data=None) -> FindingForm:
        initial = {"query": finding.query, "fact": finding.fact, "success": finding.success}
        return cls(data, initial=initial)


class NewFindingForm(FindingForm):
    """A finding added by hand also says which tool call it answers."""

    tool = forms.CharField(max_length=200, help_text="The tool that was called, e.g. grep")
    field_order = ["tool", "query", "fact", "success"]


class ContextItemForm(forms.Form):
    value = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=10_000)
    confidence = forms.FloatField(min_value=0, max_value=1, initial=1.0)

    def __init__(self, *args, structured: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.structured = structured

    @classmethod
    def for_item(cls, item: ContextItem, data=None) -> ContextItemForm:
        structured = not isinstance(item.value, str)
        text = json.dumps(item.value, ensure_ascii=False) if structured else item.value
        initial = {"value": text, "confidence": item.confidence}
        return cls(data, initial=initial, structured=structured)

    def clean_value(self):
        text = self.cleaned_data["value"]
        if not self.structured:
            return text
        try:
            return json.loads(text)
        except ValueError:
            raise forms.ValidationError("this value is JSON: enter valid JSON") from None


class NewContextItemForm(ContextItemForm):
    key = forms.CharField(max_length=200, help_text="e.g. current_task, framework")
    field_order = ["key", "value", "confidence"]

    def clean_key(self):
        return self.cleaned_data["key"].strip()


# --- what differs between kinds, said once ---------------------------------------------------


@dataclass(frozen=True)
class Editable:
    """A kind of row people edit from the dashboard: the model holds its behaviour
    (`add_from_dashboard`, `edit_from_dashboard`, `revert`, `history_targets`,
    `dashboard_url`); the forms say what a person enters."""

    model: type[Memory] | type[Finding] | type[ContextItem]
    form: type[forms.Form]
    add_form: type[forms.Form]
    noun: str
    needs_session: bool  # added to a session (findings, context items) or to the agent

    def get(self, agent: Agent, pk: int):
        """One row of this kind that belongs to `agent`, or 404."""
        item = self.model.objects.for_agent(agent).with_provenance().filter(pk=pk).first()
        if item is None:
            raise Http404("not found")
        return item


EDITABLE: dict[str, Editable] = {
    editable.model.KIND: editable
    for editable in (
        Editable(Memory, MemoryForm, MemoryForm, "memory", needs_session=False),
        Editable(Finding, FindingForm, NewFindingForm, "finding", needs_session=True),
        Editable(
            ContextItem,
            ContextItemForm,
            NewContextItemForm,
            "working-context item",
            needs_session=True,
        ),
    )
}


def _editable(kind: str) -> Editable:
    if kind not in EDITABLE:
        raise Http404("no such kind")
    return EDITABLE[kind]


def _locked(item):
    """The row again, locked for the rest of the transaction (someone may have changed or
    removed it since it was read); 404 if it is gone."""
    locked = type(item).objects.select_for_update().filter(pk=item.pk).first()
    if locked is None:
        raise Http404("gone")
    return locked


# --- rendering ---------------------------------------------------------------------------


def _history_context(item) -> dict:
    """The item's history, newest first: each change with the fields it changed and what
    reverting it would do (None: not offered, it would change nothing)."""
    targets = item.history_targets()
    events = list(MemoryEvent.objects.history_of(item.KIND, list(targets))[:HISTORY_ROWS])
    contents = MemoryEvent.contents_for(events, targets)
    for event in events:
        target = targets.get(event.target_id)
        event.plan = target.revert_plan(event) if target is not None else None
        event.field_changes = event.changes(contents)
    return {"events": events, "history_open": True}


def _row(
    request: HttpRequest, role: str, agent: Agent, item, *, history: bool = False, oob=False
) -> HttpResponse:
    MemoryEvent.attach_people([item])
    if isinstance(item, Finding):  # as the session page shows it
        Finding.mark_stale_reads(item.session, [item])
    context = {"agent": agent, "kind": item.KIND, "item": item, "role": role, "row_oob": oob}
    if history:
        context.update(_history_context(item))
    return render(request, "dashboard/memories.html#item", context)


def _form_page(request: HttpRequest, context: dict, *, status: int = 200) -> HttpResponse:
    # htmx 2 swaps only 2xx answers: a form with errors is 200 to htmx, 422 to a browser.
    if request.htmx:
        return render(request, "dashboard/edit.html#form", context)
    return render(request, "dashboard/edit.html", context, status=status)


# --- pages -------------------------------------------------------------------------------


@login_required
@require_GET
def memories(request: HttpRequest, name: str) -> HttpResponse:
    agent, role = _get_agent_and_role(request, name)
    memory_type = request.GET.get("type", "")
    status = request.GET.get("status", "active")
    query = request.GET.get("q", "").strip()[:200]
    session_key = request.GET.get("session", "").strip()[:200]
    raw_offset = request.GET.get("offset") or "0"
    try:
        min_confidence = float(request.GET.get("min_confidence") or 0)
    except ValueError:
        raise Http404("bad filter") from None
    # A number a database column can hold, a real offset: else a bad link, not a 500.
    if not 0 <= min_confidence <= 1 or not (raw_offset.isascii() and raw_offset.isdigit()):
        raise Http404("bad filter")
    if len(raw_offset) > 9:
        raise Http404("bad filter")
    offset = int(raw_offset)
    found, more = recall.recall_memories(
        agent,
        query=query,
        memory_type=memory_type or None,
        min_confidence=min_confidence or None,
        status=status,
        session_key=session_key or None,
        offset=offset,
        limit=PAGE,
    )
    MemoryEvent.attach_people(found)
    Origin.attach(found)
    context = {
        "agent": agent,
        "role": role,
        "memories": found,
        "embedding": embeddings.progress(agent),
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
def item_add(request: HttpRequest, name: str, kind: str, key: str | None = None) -> HttpResponse:
    """GET: the form to add a memory (to the agent, or learned in a session), a finding
    or a working-context item (to a session); POST: add it. `?cancel` closes the form."""
    editable = _editable(kind)
    agent, role = _get_agent_and_role(request, name, "editor")
    session = _get_session_for_user(request, agent, key) if key is not None else None
    if editable.needs_session and session is None:
        raise Http404("added to a session")
    if "cancel" in request.GET:
        if request.htmx:
            return HttpResponse("")
        page = "dashboard:session" if session else "dashboard:memories"
        return redirect(page, *([agent.name, session.key] if session else [agent.name]))
    form = editable.add_form(request.POST if request.method == "POST" else None)
    if request.method == "GET" or not form.is_valid():
        context = {
            "agent": agent,
            "session": session,
            "kind": kind,
            "noun": editable.noun,
            "form": form,
            "action": request.path,
            "cancel_url": f"{request.path}?cancel=1",
        }
        return _form_page(request, context, status=422 if request.method == "POST" else 200)
    with transaction.atomic():
        item = editable.model.add_from_dashboard(
            agent=agent, session=session, actor=_actor(request), **form.cleaned_data
        )
    if not request.htmx:
        return redirect(item.dashboard_url())
    return trigger_client_event(_row(request, role, agent, item), "memory-changed")


@login_required
@require_http_methods(["GET", "POST"])
def item_edit(request: HttpRequest, name: str, kind: str, pk: int) -> HttpResponse:
    """GET: the form (editors) or, with ?display, the display partial. POST: save."""
    editable = _editable(kind)
    display = request.method == "GET" and "display" in request.GET
    agent, role = _get_agent_and_role(request, name, "viewer" if display else "editor")
    item = editable.get(agent, pk)
    if display:
        if not request.htmx:
            return redirect(item.dashboard_url())
        return _row(request, role, agent, item)
    if not item.is_editable:
        return HttpResponse("This was replaced since: edit what replaced it.", status=409)
    edit_url = request.path
    context = {
        "agent": agent,
        "kind": kind,
        "item": item,
        "noun": editable.noun,
        "action": edit_url,
        "cancel_url": f"{edit_url}?display=1",
    }
    if request.method == "GET":
        return _form_page(request, {**context, "form": editable.form.for_item(item)})
    with transaction.atomic():
        item = _locked(item)
        if not item.is_editable:
            return HttpResponse("This was replaced since: edit what replaced it.", status=409)
        form = editable.form.for_item(item, request.POST)
        if not form.is_valid():
            return _form_page(request, {**context, "form": form}, status=422)
        saved = item.edit_from_dashboard(_actor(request), **form.cleaned_data)
    if not request.htmx:
        return redirect(saved.dashboard_url())
    return trigger_client_event(_row(request, role, agent, saved), "memory-changed")


@login_required
@require_POST
def memory_status(request: HttpRequest, name: str, pk: int, action: str) -> HttpResponse:
    """Archive (forget, softly) or restore a memory."""
    agent, role = _get_agent_and_role(request, name, "editor")
    memory = EDITABLE["memory"].get(agent, pk)
    if action not in ("archive", "restore"):
        raise Http404("unknown action")
    with transaction.atomic():
        locked = _locked(memory)
        if action == "archive":
            locked.archive(_actor(request))
        else:
            locked.restore(_actor(request))
    memory.refresh_from_db(fields=["status", "updated_at"])
    if not request.htmx:
        return redirect(memory.dashboard_url())
    return trigger_client_event(_row(request, role, agent, memory), "memory-changed")


@login_required
@require_POST
def memories_bulk(request: HttpRequest, name: str) -> HttpResponse:
    """Archive or delete the memories ticked on the memories page: first a confirmation
    (a page, or a partial in place with htmx) naming them, then, confirmed, all of them
    in one transaction."""
    agent, role = _get_agent_and_role(request, name, "editor")
    action = request.POST.get("action")
    if action not in ("archive", "delete"):
        return HttpResponse("choose archive or delete", status=400)
    ids = [_row_id(i) for i in request.POST.getlist("ids")]
    if None in ids:
        return HttpResponse("each id is a memory's number", status=400)
    ids = ids[: PAGE * 4]
    chosen = list(
        Memory.objects.for_agent(agent)
        .filter(pk__in=ids)
        .order_by("-confidence", "-updated_at", "-id")
    )
    page = reverse("dashboard:memories", args=[agent.name])
    back = request.POST.get("next", "")
    if not (back.startswith(page) and url_has_allowed_host_and_scheme(back, None)):
        back = page  # only ever back to the memories page the person came from
    if "confirm" not in request.POST or not chosen:
        context = {"agent": agent, "memories": chosen, "action": action, "back": back}
        template = "dashboard/bulk.html#confirm" if request.htmx else "dashboard/bulk.html"
        return render(request, template, context)
    actor = _actor(request)
    with transaction.atomic():
        locked = list(Memory.objects.select_for_update().filter(pk__in=[m.pk for m in chosen]))
        if action == "archive":
            done = sum(memory.archive(actor) for memory in locked)
        else:
            for memory in locked:
                memory.remove(actor)
            done = len(locked)
    verb = "Archived" if action == "archive" else "Deleted"
    left = len(chosen) - done
    note = f" ({left} {'was' if left == 1 else 'were'} not active)" if left else ""
    messages.success(request, f"{verb} {done} {'memory' if done == 1 else 'memories'}{note}.")
    return redirect(back)


@login_required
@require_GET
def item_history(request: HttpRequest, name: str, kind: str, pk: int) -> HttpResponse:
    """The item with its history open: in place (htmx) or as a page."""
    agent, role = _get_agent_and_role(request, name)
    item = _editable(kind).get(agent, pk)
    if request.htmx:
        return _row(request, role, agent, item, history=True)
    MemoryEvent.attach_people([item])
    context = {"agent": agent, "kind": kind, "item": item, "role": role}
    context.update(_history_context(item))
    return render(request, "dashboard/history.html", context)


@login_required
@require_POST
def item_revert(request: HttpRequest, name: str, kind: str, pk: int, event_id: int) -> HttpResponse:
    """One click: undo one change from the item's history (itself a new, revertible
    change). The answer is the item with its history open, the new row on top."""
    agent, role = _get_agent_and_role(request, name, "editor")
    item = _editable(kind).get(agent, pk)
    event = MemoryEvent.objects.filter(target_kind=kind, target_id=item.pk, pk=event_id).first()
    # The row on screen, when reverting a predecessor: checked before anything is saved.
    shown_as = request.POST.get("shown_as") or None
    replacing = _row_id(shown_as) if shown_as is not None else None
    if shown_as is not None and replacing is None:
        return HttpResponse("shown_as is the number of the row on screen", status=400)
    if event is None:
        raise Http404("no such change")
    back = item.dashboard_url()
    with transaction.atomic():
        item = _locked(item)
        # What a revert of a replacement archives: its row on the page changes too.
        was_replaced = isinstance(item, Memory) and item.status == Memory.Status.SUPERSEDED
        replacement = item.live_replacement() if was_replaced else None
        if item.revert_plan(event) is None:
            # Offered only where it does something; a stale page must not change nothing
            # and answer success.
            return HttpResponse(
                "This change cannot be reverted: reverting it would change nothing now.",
                status=409,
            )
        item = item.revert(event, _actor(request))
    if item is None:  # the add was undone: the item is gone
        if not request.htmx:
            return redirect(back.split("#")[0])
        return trigger_client_event(HttpResponse(""), "memory-changed")
    item = _editable(kind).get(agent, item.pk)
    if not request.htmx:  # without JavaScript a revert is made from the history page
        return redirect("dashboard:item_history", agent.name, kind, item.pk)
    response = _row(request, role, agent, item, history=True)
    if replacing is not None and replacing != item.pk:
        # The row on screen showed the replacement: swap it for the restored memory.
        response["HX-Retarget"] = f"#item-{kind}-{replacing}"
        response["HX-Reswap"] = "outerHTML"
    elif replacement is not None and replacement.pk != item.pk:
        # The replacement, archived by bringing this one back, where the page shows it.
        replaced = _editable(kind).get(agent, replacement.pk)
        response.content += _row(request, role, agent, replaced, oob=True).content
    return trigger_client_event(response, "memory-changed")
