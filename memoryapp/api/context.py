"""What the agent gets back before a model call (the assembled context), and the
session's working context (key/value items)."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest
from ninja import Query, Router, Status
from ninja.errors import HttpError

from memoryapp.api import answers
from memoryapp.api.schemas import (
    ContextItemIn,
    ContextItemList,
    ContextItemOut,
    ContextOut,
    HistoryMessageOut,
)
from memoryapp.core.context import assemble_context, context_item_dict
from memoryapp.core.limits import MAX_TOKEN_BUDGET
from memoryapp.core.models import ContextItem
from memoryapp.http.common import CONFLICTING_WRITE, READ_ONE, actor, item_name, live_session
from memoryapp.http.schemas import ItemNameInPath, SessionKeyInPath
from memoryapp.lib import tokens

router = Router()


@router.get("/sessions/{key}/context", response={200: ContextOut, **READ_ONE}, tags=["context"])
def get_context(
    request: HttpRequest,
    key: SessionKeyInPath,
    query_hint: str = Query("", max_length=1000),
    token_budget: int | None = Query(None, ge=0, le=MAX_TOKEN_BUDGET),
):
    """What the agent gets back before a model call: the pruned conversation, working
    context, findings, long-term memories and the summary, each within its share of the
    token budget, with exact counts and a markdown prompt to inject."""
    session = live_session(request, key)
    try:
        context = assemble_context(
            session,
            token_budget=token_budget,
            query_hint=query_hint,
            write=answers.history_message,
        )
    except tokens.EncodingUnavailable as exc:
        raise HttpError(422, f"the agent's encoding cannot be used: {exc}") from None
    context["conversation"] = answers.Written(HistoryMessageOut, context["conversation"])
    return answers.answer(ContextOut, context)


@router.get(
    "/sessions/{key}/context-items",
    response={200: ContextItemList, **READ_ONE},
    tags=["working context"],
)
def list_context_items(request: HttpRequest, key: SessionKeyInPath):
    """The session's working context, most confident first (a session holds at most a
    few hundred items, so this is one page)."""
    session = live_session(request, key)
    items = ContextItem.objects.filter(session=session).order_by("-confidence", "key")
    return {"items": [context_item_dict(i) for i in items]}


@router.put(
    "/sessions/{key}/context-items/{name}",
    response={200: ContextItemOut, **CONFLICTING_WRITE},
    tags=["working context"],
)
def put_context_item(
    request: HttpRequest, key: SessionKeyInPath, name: ItemNameInPath, payload: ContextItemIn
):
    """Set a working-context item. An inferred value never overwrites an explicit or
    manual one: that is a 409 and nothing changes."""
    name = item_name(name)
    if "value" not in payload.model_fields_set:
        raise HttpError(422, "value is required")
    with transaction.atomic():
        session = live_session(request, key, lock=True)
        item, applied = ContextItem.put(
            session,
            name,
            payload.value,
            source=payload.source,
            confidence=payload.confidence,
            actor=actor(request),
        )
        if applied:
            session.slide_expiry()
            session.save(update_fields=["last_activity_at", "expires_at"])
    if not applied:
        raise HttpError(
            409,
            f"kept the {item.source} value of confidence {item.confidence}: an inferred "
            "value never overwrites an explicit or manual one",
        )
    return context_item_dict(item)


@router.delete(
    "/sessions/{key}/context-items/{name}",
    response={204: None, **READ_ONE},
    tags=["working context"],
)
def delete_context_item(request: HttpRequest, key: SessionKeyInPath, name: ItemNameInPath):
    name = item_name(name)
    with transaction.atomic():
        session = live_session(request, key, lock=True)
        item = ContextItem.objects.filter(session=session, key=name).first()
        if item is None:
            raise HttpError(404, "context item not found")
        item.remove(actor(request))
    return Status(204, None)
