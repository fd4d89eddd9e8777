"""A working memory, as Redis Agent Memory Server's client reads and writes it, on a
memoryapp session: the session of the key's agent whose key is the `session_id`.

- `messages` are the session's messages (in seq order) that the client has not removed,
  each with the client's id (a message stored through /api/v1 reads as
  `memoryapp-message-<seq>`);
- `data` is the session's working-context items named `data.<key>`, and `context` the
  item named `context` (each change is in the item's history on the dashboard);
- `memories` are the long-term memories (records.py) the working memory lists;
- `namespace`, `user_id` and the extraction strategy live in the session's metadata
  under `ams`; `ttl_seconds` is the session's TTL.

The client always sends the whole working memory (PUT). memoryapp stores the difference:
messages with new ids are appended as one turn (counted, extracted, on the dashboard like
any other); a known id whose role or content changed is an edit, its earlier version kept
in the message's `revisions`; a message left out is marked removed (kept, with the removal
in its `revisions`), and comes back if a later PUT names it again. Nothing else changes
what is stored, so the same PUT twice stores nothing the second time."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from ninja.errors import HttpError

from memoryapp.ams import records
from memoryapp.ams.models import MemoryRecord
from memoryapp.ams.schemas import (
    CONTEXT_ITEM,
    DATA_ITEM_PREFIX,
    MESSAGE_ID_PREFIX,
    MessageIn,
    PromptIn,
    SearchIn,
    TagFilterIn,
    WorkingMemoryIn,
)
from memoryapp.ams.windows import context_percentages, window_for
from memoryapp.core.conversation import MessageInput, TurnInput, append_turn, lock_session
from memoryapp.core.limits import MAX_MESSAGES_PER_TURN
from memoryapp.core.models import Agent, ContextItem, Message, Session
from memoryapp.core.summaries import summarize_pruned
from memoryapp.lib import tokens
from memoryapp.lib.prompt import escape_markdown
from memoryapp.lib.pruning import MessageCost, choose_run

DEFAULT_STRATEGY = {"strategy": "discrete", "config": {}}
# A message keeps at most this many earlier versions and removals.
MAX_REVISIONS = 50


def scope(session: Session) -> dict[str, Any]:
    """What the client keeps on the session: namespace, user_id, extraction strategy."""
    metadata = session.metadata if isinstance(session.metadata, dict) else {}
    found = metadata.get("ams")
    return found if isinstance(found, dict) else {}


def in_scope(session: Session, namespace: str | None, user_id: str | None) -> bool:
    """A namespace or user asked for that is not the session's: another working memory
    (absent here). One the session has none of does not exclude it."""
    stored = scope(session)
    return all(
        asked is None or stored.get(name) in (None, asked)
        for name, asked in (("namespace", namespace), ("user_id", user_id))
    )


def message_id(message: Message) -> str:
    return message.client_id or f"{MESSAGE_ID_PREFIX}{message.seq}"


def _live_messages(session: Session):
    return Message.objects.filter(session=session, removed_at__isnull=True).order_by("seq")


def _items(session: Session):
    return ContextItem.objects.filter(session=session).filter(
        Q(key__startswith=DATA_ITEM_PREFIX) | Q(key=CONTEXT_ITEM)
    )


def read(session: Session, *, window: int | None) -> dict[str, Any]:
    """The working memory as the client's WorkingMemoryResponse (four queries)."""
    messages = list(_live_messages(session))
    data, context = {}, None
    for item in _items(session):
        if item.key == CONTEXT_ITEM:
            context = item.value if isinstance(item.value, str) else json.dumps(item.value)
        else:
            data[item.key.removeprefix(DATA_ITEM_PREFIX)] = item.value
    stored = scope(session)
    used = sum(m.token_count for m in messages)
    total_used, until_summarization = context_percentages(used, window)
    return {
        "messages": [
            {
                "id": message_id(m),
                "role": m.role,
                "content": m.content,
                "created_at": m.created_at,
                "persisted_at": None,
                "discrete_memory_extracted": "f",
            }
            for m in messages
        ],
        "memories": [records.record_dict(m) for m in records.in_working_memory(session)],
        "data": data,
        "context": context,
        "user_id": stored.get("user_id"),
        "tokens": used,
        "session_id": session.key,
        "namespace": stored.get("namespace"),
        "long_term_memory_strategy": stored.get("long_term_memory_strategy", DEFAULT_STRATEGY),
        "ttl_seconds": session.ttl_seconds,
        "last_accessed": session.last_activity_at,
        "created_at": session.created_at,
        "updated_at": session.last_activity_at,
        "context_percentage_total_used": total_used,
        "context_percentage_until_summarization": until_summarization,
        "new_session": None,
        "unsaved": None,
    }


def _revised(message: Message, entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(message.revisions or []), entry][-MAX_REVISIONS:]


def _sync_messages(
    agent: Agent, session: Session, wanted: list[MessageIn], *, actor: str, model: str
) -> None:
    """Make the session's live messages the client's list, changing as little as it
    takes. The session is locked by the caller."""
    now = timezone.now()
    stored = list(Message.objects.filter(session=session).order_by("seq"))
    by_id = {message_id(m): m for m in stored}
    encoding = tokens.get_encoding(agent.encoding)
    token_change = 0
    new: list[MessageIn] = []
    for incoming in wanted:
        message = by_id.get(incoming.id)
        if message is None:
            if incoming.id.startswith(MESSAGE_ID_PREFIX):
                raise HttpError(
                    422, f"{incoming.id!r}: ids starting with {MESSAGE_ID_PREFIX!r} are memoryapp's"
                )
            new.append(incoming)
            continue
        changed: list[str] = []
        stamp = {"at": now.isoformat(), "actor": actor}
        if message.removed_at is not None:
            message.revisions = _revised(message, {"action": "restore", **stamp})
            message.removed_at = None
            changed += ["removed_at", "revisions"]
        if (message.role, message.content) != (incoming.role, incoming.content):
            before = {"role": message.role, "content": message.content}
            message.revisions = _revised(message, {"action": "edit", **stamp, **before})
            count = tokens.count_message(
                encoding, incoming.role, incoming.content, message.name, message.tool_calls
            )
            token_change += count - message.token_count
            message.role, message.content, message.token_count = (
                incoming.role,
                incoming.content,
                count,
            )
            changed += ["role", "content", "token_count", "revisions"]
        if changed:
            message.save(update_fields=sorted(set(changed)))
    kept = {m.id for m in wanted}
    for message in stored:
        if message.removed_at is None and message_id(message) not in kept:
            message.removed_at = now
            message.revisions = _revised(
                message, {"action": "remove", "at": now.isoformat(), "actor": actor}
            )
            message.save(update_fields=["removed_at", "revisions"])
    if token_change:
        session.token_count += token_change
        session.save(update_fields=["token_count"])
    if len(new) > MAX_MESSAGES_PER_TURN:
        # They are appended as one turn, which the agent API bounds the same way.
        raise HttpError(
            422,
            f"{len(new)} new messages in one PUT; at most {MAX_MESSAGES_PER_TURN}: "
            "send the working memory in parts",
        )
    if new:
        answer, _ = append_turn(
            agent,
            session.key,
            TurnInput(
                messages=[MessageInput(role=m.role, content=m.content) for m in new],
                model=model,
            ),
        )
        rows = list(
            Message.objects.filter(
                session=session, seq__gte=answer["first_seq"], seq__lte=answer["last_seq"]
            ).order_by("seq")
        )
        for row, incoming in zip(rows, new, strict=True):
            row.client_id = incoming.id
            row.created_at = incoming.created_at or row.created_at
        Message.objects.bulk_update(rows, ["client_id", "created_at"])


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (1, 1.0 and true are three different values)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _sync_items(session: Session, data: dict[str, Any], context: str, *, actor: str) -> None:
    wanted = {DATA_ITEM_PREFIX + key: value for key, value in data.items()}
    if context:
        wanted[CONTEXT_ITEM] = context
    stored = {item.key: item for item in _items(session)}
    for name, value in wanted.items():
        item = stored.get(name)
        if item is None or not _same(item.value, value):
            ContextItem.put(
                session,
                name,
                value,
                source=ContextItem.Source.EXPLICIT,
                confidence=1.0,
                actor=actor,
            )
    for name, item in stored.items():
        if name not in wanted:
            item.remove(actor)


def put(
    agent: Agent,
    key: str,
    payload: WorkingMemoryIn,
    *,
    user_id: str | None,
    model: str,
    actor: str,
) -> Session:
    """Store a whole working memory as the smallest change (module docstring); answer
    the session. Creates it when absent. A 409 when the session belongs to another
    namespace or user: the transaction changes nothing."""
    user_id = user_id if user_id is not None else payload.user_id
    with transaction.atomic():
        now = timezone.now()
        session = lock_session(agent, key, create=True, now=now)
        stored = scope(session)
        for name, asked in (("namespace", payload.namespace), ("user_id", user_id)):
            if asked is not None and stored.get(name) not in (None, asked):
                raise HttpError(
                    409,
                    f"session {key!r} has {name} {stored[name]!r}, not {asked!r}: "
                    "a session id names one working memory of the agent",
                )
        _sync_messages(agent, session, payload.messages, actor=actor, model=model)
        session.refresh_from_db()
        _sync_items(session, payload.data or {}, payload.context or "", actor=actor)
        listed = records.save_records(agent, payload.memories, actor=actor, working_memory=session)
        MemoryRecord.objects.filter(working_memory=session).exclude(
            pk__in=[r.pk for r in listed]
        ).update(working_memory=None)
        wanted = dict(stored)
        if payload.namespace is not None:
            wanted["namespace"] = payload.namespace
        if user_id is not None:
            wanted["user_id"] = user_id
        if payload.long_term_memory_strategy is not None:
            wanted["long_term_memory_strategy"] = payload.long_term_memory_strategy.model_dump()
        fields = ["ttl_seconds", "last_activity_at", "expires_at"]
        if wanted != stored:
            metadata = session.metadata if isinstance(session.metadata, dict) else {}
            session.metadata = {**metadata, "ams": wanted}
            fields.append("metadata")
        # Honoured as memoryapp's session TTL; none: the agent's.
        session.ttl_seconds = payload.ttl_seconds
        session.slide_expiry(now)
        session.save(update_fields=fields)
    return session


def delete(agent: Agent, key: str, *, namespace: str | None, user_id: str | None) -> None:
    """Delete the session and everything under it (its long-term memories stay)."""
    with transaction.atomic():
        session = lock_session(agent, key, create=False, now=timezone.now())
        if session is not None and in_scope(session, namespace, user_id):
            MemoryRecord.objects.filter(working_memory=session).update(working_memory=None)
            session.delete()


# --- the memory prompt ----------------------------------------------------------------


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": {"type": "text", "text": text}}


# The prompt's roles: a tool result without its call reads as the assistant's.
_PROMPT_ROLE = {"system": "system", "user": "user", "assistant": "assistant", "tool": "assistant"}


def _conversation(session: Session, window: int | None) -> tuple[list[Message], int]:
    """The live messages the prompt keeps (every system one, then the newest run within
    the window and the agent's max_messages: memoryapp's pruning rule) and the last seq
    it pruned (0: none)."""
    agent = session.agent
    max_tokens = window if window is not None else agent.default_conversation_budget()
    live = _live_messages(session)
    system = list(live.filter(role=Message.Role.SYSTEM).values_list("seq", "token_count"))
    newest = list(
        live.exclude(role=Message.Role.SYSTEM)
        .order_by("-seq")
        .values_list("seq", "role", "token_count")[: agent.max_messages + 1]
    )
    run = choose_run(
        (MessageCost(*row) for row in newest),
        system_count=len(system),
        system_tokens=sum(count for _, count in system),
        max_messages=agent.max_messages,
        max_tokens=max_tokens,
    )
    kept = list(live.filter(seq__in=[seq for seq, _ in system] + list(run.seqs)))
    if len(newest) <= len(run.seqs):
        return kept, 0
    return kept, (run.seqs[0] - 1) if run.seqs else newest[0][0]


def prompt(agent: Agent, payload: PromptIn) -> dict[str, Any]:
    """Messages for a model: a summary of the conversation so far (the client's
    `context`, and memoryapp's summary of what the window pruned), the recent messages
    within the window, the long-term memories relevant to the query, then the query."""
    messages: list[dict[str, Any]] = []
    asked = payload.session
    user_id = asked.user_id if asked else None
    if asked is not None:
        try:
            window = window_for(asked.model_name, asked.context_window_max)
        except ValueError as exc:
            raise HttpError(422, str(exc)) from None
        session = (
            Session.objects.for_agent(agent)
            .active()
            .select_related("agent")
            .filter(key=asked.session_id)
            .first()
        )
        if session is not None and in_scope(session, asked.namespace, asked.user_id):
            user_id = user_id or scope(session).get("user_id")
            kept, pruned_through = _conversation(session, window)
            summary = [item.value for item in _items(session).filter(key=CONTEXT_ITEM)]
            removed_in_span = Message.objects.filter(
                session=session, removed_at__isnull=False, seq__lte=pruned_through
            ).exists()
            if pruned_through and not removed_in_span:
                pruned = summarize_pruned(session, pruned_through)
                if pruned and pruned["text"]:
                    summary.append(pruned["text"])
            if summary:
                text = "\n\n".join(str(part) for part in summary)
                messages.append(
                    _text("system", f"## A summary of the conversation so far:\n{text}")
                )
            messages += [_text(_PROMPT_ROLE[m.role], m.content) for m in kept]
    found = None
    if payload.long_term_search:
        if isinstance(payload.long_term_search, SearchIn):
            search = payload.long_term_search.model_copy(update={"text": payload.query})
        else:
            # `true`: the agent's memories, those of this session left out (its messages
            # are in the prompt already), as Redis's server does.
            search = SearchIn(
                text=payload.query,
                limit=20,
                session_id=TagFilterIn(ne=asked.session_id) if asked else None,
            )
        if user_id and search.user_id is None:
            search = search.model_copy(update={"user_id": TagFilterIn(eq=user_id)})
        found = records.search(agent, search)["memories"]
        lines = "\n".join(f"- {escape_markdown(m['text'])} (ID: {m['id']})" for m in found)
        messages.append(
            _text(
                "system",
                "## Long term memories related to the user's query\n"
                + (lines or "No relevant long-term memories found."),
            )
        )
    messages.append(_text("user", payload.query))
    return {"messages": messages, "long_term_memories": found or None}
