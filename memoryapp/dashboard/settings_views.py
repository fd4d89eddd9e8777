"""Agent settings and API keys: the agent's staff role."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from memoryapp.core.limits import MAX_MESSAGES_SETTING
from memoryapp.core.models import Agent, ApiKey
from memoryapp.dashboard.access import _get_agent_for_user
from memoryapp.lib import tokens

CHART_DAYS = 30


class AgentSettingsForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = [
            "ttl_seconds",
            "max_messages",
            "token_budget",
            "encoding",
            "system_budget",
            "conversation_budget",
            "working_budget",
            "long_term_budget",
        ]

    def clean_encoding(self):
        name = self.cleaned_data["encoding"]
        try:
            tokens.get_encoding(name)
        except tokens.EncodingUnavailable as exc:
            raise forms.ValidationError(str(exc)) from None
        return name

    def clean(self):
        data = super().clean()
        for name in ("ttl_seconds", "max_messages", "token_budget"):
            if data.get(name) is not None and data[name] < 1:
                self.add_error(name, "must be at least 1")
        if data.get("max_messages") and data["max_messages"] > MAX_MESSAGES_SETTING:
            self.add_error("max_messages", f"at most {MAX_MESSAGES_SETTING:,}")
        return data


def _page_context(request: HttpRequest, agent: Agent, form=None, created_key=None) -> dict:
    """What the settings page and its fragments show: the form, the keys, a new key once."""
    return {
        "agent": agent,
        "role": "staff",  # only staff reach these pages
        "form": form if form is not None else AgentSettingsForm(instance=agent),
        "keys": ApiKey.objects.filter(agent=agent),
        "created_key": created_key,
    }


@login_required
@require_http_methods(["GET", "POST"])
def agent_settings(request: HttpRequest, name: str) -> HttpResponse:
    agent = _get_agent_for_user(request, name, "staff")
    form = AgentSettingsForm(request.POST or None, instance=agent)
    posted = request.method == "POST"
    saved = posted and form.is_valid()
    if saved:
        form.save()
        if not request.htmx:
            return redirect("dashboard:agent_settings", name=agent.name)
    context = {**_page_context(request, agent, form), "saved": saved}
    status = 422 if posted and not saved else 200
    if request.htmx:
        return render(
            request, "dashboard/agent_settings.html#settings-form", context, status=status
        )
    return render(request, "dashboard/agent_settings.html", context, status=status)


@login_required
@require_POST
def create_key(request: HttpRequest, name: str) -> HttpResponse:
    """A new key, shown once on the page that answers this request and never again."""
    agent = _get_agent_for_user(request, name, "staff")
    label = request.POST.get("name", "")[:100]
    _, raw = ApiKey.issue(agent, name=label or f"dashboard:{request.user.get_username()}")
    template = (
        "dashboard/agent_settings.html#keys" if request.htmx else "dashboard/agent_settings.html"
    )
    return render(request, template, _page_context(request, agent, created_key=raw))


@login_required
@require_POST
def revoke_key(request: HttpRequest, name: str, key_id: int) -> HttpResponse:
    agent = _get_agent_for_user(request, name, "staff")
    key = ApiKey.objects.filter(agent=agent, pk=key_id).first()
    if key is None:
        raise Http404("no such key")
    key.revoke()
    if not request.htmx:
        return redirect("dashboard:agent_settings", name=agent.name)
    return render(request, "dashboard/agent_settings.html#keys", _page_context(request, agent))
