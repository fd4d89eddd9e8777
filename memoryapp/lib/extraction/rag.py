"""Retrieval (RAG) queries: the answer the knowledge base gave (its JSON `answer` field),
else the output summarised like any other tool's."""

from __future__ import annotations

import json

from memoryapp.lib.extraction import other
from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure
from memoryapp.lib.extraction.text import one_line


def extract(call: ToolCallData) -> Fact:
    if failed(call):
        return failure(call)
    try:
        answer = json.loads(call.clean).get("answer")
    except (ValueError, AttributeError):
        answer = None
    if isinstance(answer, str):
        return Fact(one_line(answer, 300), True)
    return other.extract(call)
