"""The memory tools a model is offered (remember, recall, forget): their names,
descriptions and JSON schemas, in OpenAI's and Anthropic's shapes.

Pure data, the one place these definitions are written: the agent API serves them at
`GET /api/v1/tools` (memoryapp/api/tools.py) and runs calls at `POST /api/v1/tools/call`;
agents read them from there (agents/tools.py). `maxLength` 4000 is
memoryapp/core/limits.py's MAX_FACT_CHARS, repeated because lib imports nothing of core.
"""

from __future__ import annotations

from typing import Any

MEMORY_TYPES = ["fact", "decision", "preference", "convention", "lesson"]

TOOLS: list[dict[str, Any]] = [
    {
        "name": "remember",
        "description": (
            "Store a fact worth keeping beyond this conversation (a decision, a user "
            "preference, a project convention, a lesson learned). Saying the same fact "
            "again strengthens it instead of duplicating it."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "content": {
                    "type": "string",
                    "description": "The fact, in one or two sentences.",
                    "minLength": 1,
                    "maxLength": 4000,
                },
                "memory_type": {"type": "string", "enum": MEMORY_TYPES, "default": "fact"},
                "confidence": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "default": 0.8,
                    "description": "How sure you are, from 0 to 1.",
                },
            },
            "required": ["content"],
            "additionalProperties": False,
        },
    },
    {
        "name": "recall",
        "description": "Search long-term memory for facts relevant to a question or topic.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 1000},
                "memory_type": {"type": "string", "enum": MEMORY_TYPES},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    {
        "name": "forget",
        "description": (
            "Forget a memory that is wrong or no longer true, by the id recall gave. "
            "It is archived, so a person can restore it."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "memory_id": {"type": "integer", "minimum": 1},
                "reason": {"type": "string", "maxLength": 500},
            },
            "required": ["memory_id"],
            "additionalProperties": False,
        },
    },
]

TOOL_NAMES = [tool["name"] for tool in TOOLS]


def definitions(format: str = "openai") -> list[dict[str, Any]]:
    """The tools in OpenAI's function shape or Anthropic's `input_schema` shape."""
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["parameters"],
                },
            }
            for t in TOOLS
        ]
    if format == "anthropic":
        return [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in TOOLS
        ]
    raise ValueError(f"unknown tool format {format!r}: use 'openai' or 'anthropic'")
