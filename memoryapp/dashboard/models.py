"""Who may see and change which agent's memory: a role per user and agent.

- viewer: reads the agent's sessions and memory;
- editor: also edits memories, findings and working context;
- staff: also the agent's settings and API keys.
Django superusers act as staff on every agent; cleanup needs Django's `is_staff`.
"""

from django.conf import settings
from django.db import models

from memoryapp.core.models import Agent


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = "viewer"
        EDITOR = "editor"
        STAFF = "staff"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            # Every dashboard request looks up the user's role on one agent.
            models.UniqueConstraint(fields=["user", "agent"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.agent}"


RANK = {Membership.Role.VIEWER: 0, Membership.Role.EDITOR: 1, Membership.Role.STAFF: 2}
