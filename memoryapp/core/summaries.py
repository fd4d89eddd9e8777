"""The stored rolling summary of a session's pruned history.

When a restore prunes messages the summary does not cover yet, it is rolled forward over
the newly pruned messages (at most `WINDOW` of them are read, so the work is bounded) and
stored on the session. The default summarizer is extractive and needs no model
(memoryapp.lib.summarize); `MEMORYAPP_SUMMARIZER_URL` points at an OpenAI-compatible
endpoint instead. A failing summarizer never drops or hides messages: pruning does not
depend on it, the last good summary is returned, and the answer says it is stale.
"""

from __future__ import annotations

import logging

import httpx
from django.conf import settings
from django.utils import timezone

from memoryapp.core.models import Message, Session
from memoryapp.lib import summarize

logger = logging.getLogger(__name__)


class SummarizerError(Exception):
    pass


def _task(session: Session) -> str:
    first_user = (
        Message.objects.filter(session=session, role=Message.Role.USER)
        .order_by("seq")
        .values_list("content", flat=True)
        .first()
    )
    return session.goal or first_user or ""


def _model_summary(previous: list[str], task: str, pruned: list[summarize.Pruned]) -> list[str]:
    """Ask an OpenAI-compatible chat endpoint for the rolled-forward summary."""
    transcript = "\n".join(f"{m.role}: {m.content[:2000]}" for m in pruned)
    prompt = (
        "Update the running summary of an agent's conversation. Keep it under 20 short "
        "lines: the task, decisions, facts learned, files touched, open problems.\n\n"
        f"Task: {task[:1000]}\n\nSummary so far:\n"
        + "\n".join(previous)
        + "\n\nNew messages:\n"
        + transcript
    )
    headers = {}
    if settings.MEMORYAPP_SUMMARIZER_API_KEY:
        headers["Authorization"] = f"Bearer {settings.MEMORYAPP_SUMMARIZER_API_KEY}"
    try:
        response = httpx.post(
            settings.MEMORYAPP_SUMMARIZER_URL.rstrip("/") + "/chat/completions",
            json={
                "model": settings.MEMORYAPP_SUMMARIZER_MODEL,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0,
            },
            headers=headers,
            timeout=settings.MEMORYAPP_SUMMARIZER_TIMEOUT,
        )
        response.raise_for_status()
        text = response.json()["choices"][0]["message"]["content"]
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise SummarizerError(f"summarizer endpoint failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(text, str) or not text.strip():
        raise SummarizerError("summarizer endpoint returned no text")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[: summarize.MAX_LINES]


def summarize_pruned(session: Session, pruned_through: int) -> dict | None:
    """The summary of messages up to `pruned_through` (the last pruned seq), rolled
    forward when needed. None when nothing was pruned."""
    if pruned_through <= 0:
        return None
    covered = session.summary_through_seq
    if covered < pruned_through:
        start = max(covered + 1, pruned_through - summarize.WINDOW + 1)
        rows = list(
            Message.objects.filter(session=session, seq__gte=start, seq__lte=pruned_through)
            .exclude(role=Message.Role.SYSTEM)
            .order_by("seq")
            .values_list("seq", "role", "content", "name")
        )
        pruned = [summarize.Pruned(seq, role, content, name) for seq, role, content, name in rows]
        previous = session.summary.splitlines() if session.summary else []
        try:
            if settings.MEMORYAPP_SUMMARIZER_URL:
                lines = _model_summary(previous, _task(session), pruned)
            else:
                lines = summarize.roll(
                    previous, _task(session), pruned, skipped=start - (covered + 1)
                )
        except Exception as exc:  # any failure: keep the last good summary, say stale
            logger.warning("summary of session %s failed: %s", session.pk, exc)
            error = str(exc)[:500]
            Session.objects.filter(pk=session.pk).update(summary_error=error)
            return {
                "text": session.summary,
                "covers_through_seq": covered,
                "stale": True,
                "error": error,
            }
        text = "\n".join(lines)
        # Conditional: of two concurrent restores, the first to finish stores its summary.
        Session.objects.filter(pk=session.pk, summary_through_seq=covered).update(
            summary=text,
            summary_through_seq=pruned_through,
            summary_updated_at=timezone.now(),
            summary_error="",
        )
        session.summary, session.summary_through_seq = text, pruned_through
    return {
        "text": session.summary,
        "covers_through_seq": session.summary_through_seq,
        "stale": False,
        "error": None,
    }
