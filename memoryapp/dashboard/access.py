"""Who may see what: every dashboard view fetches objects through these helpers, which
start from what the user may see. Another user's agent is a 404; a role too weak for the
action is a 403. Permission checks live here and in the views, never only in templates."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest

from memoryapp.core.models import Agent, Session
from memoryapp.dashboard.models import RANK, Membership


def agents_for(user):
    if user.is_superuser:
        return Agent.objects.all()
    return Agent.objects.filter(memberships__user=user)


def role_of(user, agent: Agent) -> str | None:
    if user.is_superuser:
        return Membership.Role.STAFF
    return Membership.objects.filter(user=user, agent=agent).values_list("role", flat=True).first()


def _get_agent_and_role(request: HttpRequest, name: str, need: str = "viewer") -> tuple[Agent, str]:
    """The agent the user may see, with the user's role on it (viewer, editor, staff)."""
    agent = Agent.objects.filter(name=name).first()
    role = role_of(request.user, agent) if agent is not None else None
    if role is None:
        raise Http404("no such agent")
    if RANK[role] < RANK[need]:
        raise PermissionDenied
    return agent, role


def _get_agent_for_user(request: HttpRequest, name: str, need: str = "viewer") -> Agent:
    return _get_agent_and_role(request, name, need)[0]


def _get_session_for_user(request: HttpRequest, agent: Agent, key: str) -> Session:
    # Expired sessions stay visible here until cleanup removes them: people clean up.
    session = Session.objects.filter(agent=agent, key=key).select_related("agent").first()
    if session is None:
        raise Http404("no such session")
    return session
