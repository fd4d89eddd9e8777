"""Agent settings and API keys: the agent's staff role.

The settings form says things the way a person thinks of them: the TTL is a number and a
unit (stored in seconds), the labels are English, and the encoding is a choice among the
encodings this server can load (`tokens.loadable_encodings`), so a choice that would fail every
token count is never saved.
"""

from __future__ import annotations

import copy

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from memoryapp.core import retention
from memoryapp.core.limits import MAX_MESSAGES_SETTING, MAX_TOKEN_BUDGET, MAX_TTL_SECONDS
from memoryapp.core.models import Agent, ApiKey
from memoryapp.dashboard.access import _get_agent_for_user
from memoryapp.dashboard.templatetags.numbers import format_duration
from memoryapp.http import ratelimit
from memoryapp.lib import tokens

# The units a TTL is entered in, largest last; a stored TTL is shown in the largest unit
# that divides it exactly, so 7200 reads "2 hours" and 5400 "90 minutes".
TTL_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


class DurationWidget(forms.MultiWidget):
    """A number and a unit; the fieldset's legend names them both."""

    def __init__(self, attrs=None):
        widgets = {
            "amount": forms.NumberInput(
                attrs={"min": 1, "aria-label": "Number", "class": "amount"}
            ),
            "unit": forms.Select(
                choices=[(unit, unit) for unit in TTL_UNITS], attrs={"aria-label": "Unit"}
            ),
        }
        super().__init__(widgets, attrs)

    def decompress(self, value):
        if value in (None, ""):
            return [None, "hours"]
        seconds = int(value)
        for unit, size in reversed(TTL_UNITS.items()):
            if seconds % size == 0:
                return [seconds // size, unit]
        return [seconds, "seconds"]  # not reached: every whole number divides by 1


class DurationField(forms.MultiValueField):
    """Seconds, entered as a number and a unit."""

    widget = DurationWidget

    def __init__(self, *, max_seconds: int, **kwargs):
        fields = (
            forms.IntegerField(min_value=1),
            forms.ChoiceField(choices=[(unit, unit) for unit in TTL_UNITS]),
        )
        validators = [
            MinValueValidator(1),
            MaxValueValidator(max_seconds, f"At most {format_duration(max_seconds)}."),
        ]
        super().__init__(fields, validators=validators, **kwargs)

    def compress(self, data_list):
        if not data_list:
            return None
        amount, unit = data_list
        return amount * TTL_UNITS[unit]


def _section_budget(label: str, what: str) -> forms.IntegerField:
    return forms.IntegerField(
        label=label,
        required=False,
        min_value=0,
        max_value=MAX_TOKEN_BUDGET,
        help_text=f"Tokens for {what}. Empty: the default share of the token budget.",
    )


class AgentSettingsForm(forms.ModelForm):
    # Bounds as the API's (memoryapp/api/schemas.py), from memoryapp.core.limits.
    ttl_seconds = DurationField(
        label="TTL",
        max_seconds=MAX_TTL_SECONDS,
        help_text="How long a session is kept after its last activity (at most "
        f"{format_duration(MAX_TTL_SECONDS)}). A session may set its own.",
    )
    max_messages = forms.IntegerField(
        label="Max messages",
        min_value=1,
        max_value=MAX_MESSAGES_SETTING,
        help_text="The most messages a restored history keeps; older ones are pruned "
        "and summarised.",
    )
    token_budget = forms.IntegerField(
        label="Token budget",
        min_value=1,
        max_value=MAX_TOKEN_BUDGET,
        help_text="Tokens an assembled context may use in all.",
    )
    encoding = forms.ChoiceField(
        label="Encoding",
        help_text="The tokenizer that counts tokens; only those this server can load are offered.",
    )
    system_budget = _section_budget("System budget", "the system prompt and summary")
    conversation_budget = _section_budget("Conversation budget", "the restored conversation")
    working_budget = _section_budget("Working-context budget", "working context and findings")
    long_term_budget = _section_budget("Long-term memory budget", "long-term memories")

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

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")  # labels stand above their fields
        super().__init__(*args, **kwargs)
        choices = [(name, name) for name in tokens.loadable_encodings()]
        current = self.instance.encoding
        if current and current not in tokens.loadable_encodings():
            # Shown as it is, so the page does not pretend; saving it is refused below.
            choices.append((current, f"{current} (cannot be loaded here)"))
        self.fields["encoding"].choices = choices

    def clean_encoding(self):
        name = self.cleaned_data["encoding"]
        try:
            tokens.get_encoding(name)
        except tokens.EncodingUnavailable as exc:
            raise forms.ValidationError(str(exc)) from None
        return name


def _page_context(
    request: HttpRequest, agent: Agent, form=None, created_key=None, stored: Agent | None = None
) -> dict:
    """What the settings page and its fragments show: the form, the keys, a new key once,
    and the settings as stored (`stored`: the agent before a refused form touched it)."""
    keys = list(ApiKey.objects.filter(agent=agent))
    refused = ratelimit.recent_refusals([key.pk for key in keys])
    for key in keys:
        key.recent_429s = refused[key.pk]  # answered 429 this hour and the last
    return {
        "agent": agent,
        "stored": stored or agent,
        "role": "staff",  # only staff reach these pages
        "form": form if form is not None else AgentSettingsForm(instance=agent),
        "keys": keys,
        "created_key": created_key,
    }


@login_required
@require_http_methods(["GET", "POST"])
def agent_settings(request: HttpRequest, name: str) -> HttpResponse:
    agent = _get_agent_for_user(request, name, "staff")
    # Validating a ModelForm writes the cleaned values on its instance, saved or not.
    stored = copy.copy(agent)
    form = AgentSettingsForm(request.POST or None, instance=agent)
    posted = request.method == "POST"
    saved = posted and form.is_valid()
    if saved:
        with transaction.atomic():
            form.save()
            if "ttl_seconds" in form.changed_data:
                retention.apply_ttl(agent, timezone.now())
        stored = agent
        if not request.htmx:
            return redirect("dashboard:agent_settings", name=agent.name)
    context = {**_page_context(request, agent, form, stored=stored), "saved": saved}
    status = 422 if posted and not saved else 200
    if request.htmx:
        return render(
            request, "dashboard/agent_settings.html#settings-form", context, status=status
        )
    return render(request, "dashboard/agent_settings.html", context, status=status)


@login_required
@require_POST
def retention_preview(request: HttpRequest, name: str) -> HttpResponse:
    """What the TTL typed in the settings form would do to the live sessions, before it
    is saved (the form's fragment asks on every change)."""
    agent = _get_agent_for_user(request, name, "staff")
    field = AgentSettingsForm.base_fields["ttl_seconds"]
    try:
        ttl = field.clean(field.widget.value_from_datadict(request.POST, {}, "ttl_seconds"))
    except forms.ValidationError as exc:
        return HttpResponse(" ".join(exc.messages), status=422, content_type="text/plain")
    context = {
        "agent": agent,
        "preview": retention.preview(agent, ttl, timezone.now()),
        "same": ttl == agent.ttl_seconds,
    }
    return render(request, "dashboard/agent_settings.html#retention", context)


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
