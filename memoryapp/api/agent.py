"""The agent a key belongs to: its settings (TTL, pruning limits, token budgets)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router
from ninja.errors import HttpError

from memoryapp.api.common import READ, WRITE, agent_of
from memoryapp.api.schemas import AgentOut, AgentPatch
from memoryapp.core.models import Agent
from memoryapp.lib import tokens

router = Router(tags=["agent"])


def _agent_out(agent: Agent) -> dict:
    return {
        "name": agent.name,
        "ttl_seconds": agent.ttl_seconds,
        "max_messages": agent.max_messages,
        "token_budget": agent.token_budget,
        "encoding": agent.encoding,
        "system_budget": agent.system_budget,
        "conversation_budget": agent.conversation_budget,
        "working_budget": agent.working_budget,
        "long_term_budget": agent.long_term_budget,
        "default_conversation_budget": agent.default_conversation_budget(),
    }


@router.get("/agent", response={200: AgentOut, **READ})
def get_agent(request: HttpRequest):
    return _agent_out(agent_of(request))


@router.patch("/agent", response={200: AgentOut, **WRITE})
def patch_agent(request: HttpRequest, payload: AgentPatch):
    changes = payload.model_dump(exclude_unset=True)
    if "encoding" in changes:
        try:
            tokens.get_encoding(changes["encoding"])
        except tokens.EncodingUnavailable as exc:
            raise HttpError(422, str(exc)) from None
    agent = agent_of(request)
    for name, value in changes.items():
        setattr(agent, name, value)
    if changes:
        agent.save(update_fields=[*changes, "updated_at"])
    return _agent_out(agent)
