"""The memory tools (remember, recall, forget): their definitions for a model, and one
call at a time run on the server with a result formatted for the model."""

from __future__ import annotations

from typing import Any, Literal

from django.db import transaction
from django.db.models import F
from django.http import HttpRequest
from django.utils import timezone
from ninja import Router
from ninja.errors import ValidationError
from pydantic import ValidationError as PydanticValidationError

from memoryapp.api.memories import remember
from memoryapp.api.schemas import (
    ForgetArgs,
    MemoryIn,
    MemoryToolCallIn,
    RecallArgs,
    RememberArgs,
    ToolResultOut,
)
from memoryapp.core import recall
from memoryapp.core.context import memory_dict
from memoryapp.core.models import Memory
from memoryapp.http.common import READ, WRITE_ONE, actor, agent_of
from memoryapp.lib import memory_tools
from memoryapp.lib import prompt as fmt

router = Router(tags=["tools"])


@router.get("/tools", response={200: list[dict[str, Any]], **READ})
def list_tools(request: HttpRequest, format: Literal["openai", "anthropic"] = "openai"):
    """JSON-schema definitions of the memory tools, in OpenAI's or Anthropic's shape."""
    return memory_tools.definitions(format)


def _memory_ref(memory: Memory) -> str:
    line = fmt.memory_line(
        fmt.MemoryItem(memory.memory_type, memory.content, memory.confidence, memory.updated_at)
    )
    why = getattr(memory, "why", None)
    if why is None:
        return f"{line} [memory {memory.id}]"
    reasons = [f"words: {', '.join(why.terms)}"] if why.terms else []
    if why.similarity is not None:
        reasons.append(f"similarity {why.similarity:.2f}")
    return f"{line} [memory {memory.id}; {'; '.join(reasons) or 'matched'}]"


@router.post("/tools/call", response={200: ToolResultOut, **WRITE_ONE}, exclude_unset=True)
def call_tool(request: HttpRequest, payload: MemoryToolCallIn):
    """Run one memory tool call; `result` is text formatted for the model. A call the
    tool refuses (forgetting a memory that does not exist) is `ok: false` with a result
    the model can read, not an error."""
    schema = {"remember": RememberArgs, "recall": RecallArgs, "forget": ForgetArgs}[payload.name]
    try:
        args = schema.model_validate(payload.arguments)
    except PydanticValidationError as exc:
        # Each problem located as every other 422 locates it: in the body's `arguments`.
        raise ValidationError(
            [
                {
                    "type": error["type"],
                    "loc": ["body", "payload", "arguments", *error["loc"]],
                    "msg": f"{payload.name}: {error['msg']}",
                }
                for error in exc.errors(include_url=False)
            ]
        ) from None
    if payload.name == "remember":
        memory, created = remember(
            request,
            MemoryIn(
                content=args.content,
                memory_type=args.memory_type,
                confidence=args.confidence,
                session=payload.session,
            ),
        )
        verb = "Remembered" if created else "Already known; strengthened"
        return {
            "ok": True,
            "result": f"{verb}:\n{_memory_ref(memory)}",
            "memory": memory_dict(memory),
        }
    if payload.name == "recall":
        found, _ = recall.recall_memories(
            agent_of(request),
            query=args.query,
            memory_type=args.memory_type,
            status="active",
            limit=args.limit,
        )
        if found:
            Memory.objects.filter(id__in=[m.id for m in found]).update(
                access_count=F("access_count") + 1, last_accessed_at=timezone.now()
            )
            noun = "memory" if len(found) == 1 else "memories"
            text = f"{len(found)} {noun}:\n" + "\n".join(_memory_ref(m) for m in found)
        else:
            text = f"No memories match {fmt.escape_markdown(args.query)!r}."
        return {"ok": True, "result": text, "memories": [memory_dict(m) for m in found]}
    with transaction.atomic():
        memory = (
            Memory.objects.for_agent(agent_of(request))
            .select_for_update()
            .filter(pk=args.memory_id)
            .first()
        )
        if memory is None:
            return {"ok": False, "result": f"No memory with id {args.memory_id}."}
        if not memory.archive(actor(request)):
            return {"ok": False, "result": f"Memory {memory.id} is not active ({memory.status})."}
    return {"ok": True, "result": f"Forgot memory {memory.id} (archived; a person can restore it)."}
