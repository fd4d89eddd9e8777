"""The agent a key belongs to: its settings (TTL, pruning limits, token budgets), in the
one shape its export writes too (`core.export.agent_settings`). A new TTL applies to the
agent's live sessions at once (memoryapp/core/retention.py)."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from ninja import Router

from memoryapp.api.schemas import AgentOut, AgentPatch
from memoryapp.core import retention
from memoryapp.core.export import agent_settings
from memoryapp.http.common import READ, WRITE, agent_of

router = Router(tags=["agent"])


@router.get("/agent", response={200: AgentOut, **READ})
def get_agent(request: HttpRequest):
    return agent_settings(agent_of(request))


@router.patch("/agent", response={200: AgentOut, **WRITE})
def patch_agent(request: HttpRequest, payload: AgentPatch):
    changes = payload.model_dump(exclude_unset=True)  # an encoding is one this server loads
    agent = agent_of(request)
    for name, value in changes.items():
        setattr(agent, name, value)
    if changes:
        with transaction.atomic():
            agent.save(update_fields=[*changes, "updated_at"])
            if "ttl_seconds" in changes:
                retention.apply_ttl(agent, timezone.now())
    return agent_settings(agent)
