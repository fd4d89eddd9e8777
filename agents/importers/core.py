"""The shared core of the transcript importers: what an imported session is, how a stream
of messages becomes turns, and the bounds every turn is brought within before it is sent.

Every format module turns a file into `ImportedSession`s whose turns are exactly the body
`POST /api/v1/sessions/{key}/turns` accepts (see `memoryapp/api/schemas.py`). The bounds
below repeat the API's (agents/ never imports the server): a turn that broke one would be
refused whole, so `finalize` cuts what is too long instead and says so in `problems`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Required, TypedDict

from agents.client import Message, ToolCall

ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_KEY_CHARS = 200
MAX_NAME_CHARS = 200  # a message's name and tool_call_id, a tool's name, a call id, a model
MAX_FILE_PATH_CHARS = 1000
MAX_GOAL_CHARS = 2000  # the API takes 10,000; a goal is a prompt's opening, not a document
MAX_MESSAGES_PER_TURN = 1000
MAX_TOOL_CALLS_PER_TURN = 500
MAX_DETAILS_CHARS = 8000  # the API refuses details over 8 KiB as JSON
MAX_TURN_BYTES = 1_500_000  # well under the API's default 2 MiB request limit
KEEP_WHEN_CUTTING = 2000  # a cut text keeps at least its first 2,000 characters
SCALAR_CHARS = 300  # a string kept in `details`

Problem = tuple[int, str]
"""`(line_number, reason)`; line 0 when the problem is not one line's (a JSON document)."""


class Usage(TypedDict):
    input_tokens: int
    output_tokens: int


class TurnBody(TypedDict, total=False):
    messages: Required[list[Message]]
    usage: Usage
    model: str
    timestamp: str
    tool_calls: list[ToolCall]


@dataclass
class ImportedSession:
    """One session read from a transcript, ready for `send`."""

    key: str
    turns: list[TurnBody] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    goal: str | None = None
    problems: list[Problem] = field(default_factory=list)


class TranscriptError(ValueError):
    """A file that could not be read at all, or is in no format the importers know."""


# --- keys, text and JSON -------------------------------------------------------------------

_KEY_FORBIDDEN = re.compile(r"[/\x00-\x1f\x7f]")


def session_key(text: str) -> str:
    """A valid session key from any text: 1-200 characters, no `/`, no control characters.
    A long text keeps its start and a hash of the whole, so different texts stay apart."""
    key = _KEY_FORBIDDEN.sub("_", text).strip()
    if key in ("", ".", ".."):  # empty, or a path segment a URL would resolve away
        key = f"session{key}".replace(".", "_")
    if len(key) > MAX_KEY_CHARS:
        key = key[: MAX_KEY_CHARS - 17] + "~" + digest(key)[:16]
    return key


def digest(value: Any) -> str:
    """A stable hex digest of a string or of JSON-able data."""
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def clean_text(text: str) -> str:
    """Text that can be sent and stored anywhere: no NUL characters (PostgreSQL refuses them)
    and no lone surrogates (they cannot be encoded as UTF-8)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def clean_data(value: Any) -> Any:
    """JSON-able data with every string cleaned (see `clean_text`)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_data(v) for v in value]
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    return clean_text(str(value))


def image_placeholder(block: dict) -> str:
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    media = source.get("media_type") or block.get("media_type") or block.get("mime_type")
    return f"[image: {media}]" if isinstance(media, str) and media else "[image]"


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or content blocks (text kept, images as a
    short placeholder, thinking dropped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
                continue
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind in ("thinking", "redacted_thinking", "reasoning"):
                continue
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif kind in ("image", "image_url", "input_image") or "image_url" in block:
                parts.append(image_placeholder(block))
            elif isinstance(block.get("content"), str | list):
                parts.append(text_of(block["content"]))
            elif isinstance(kind, str) and kind:
                parts.append(f"[{kind}]")
        return "\n".join(p for p in parts if p)
    if isinstance(content, bool | int | float):
        return str(content)
    return json.dumps(content, ensure_ascii=False, default=str)


def parse_structured(value: Any) -> Any:
    """A JSON string or a Python literal (`"[{'id': ...}]"`, as some trajectories store tool
    calls) parsed; anything else, or text that parses as neither, unchanged."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text or text[0] not in "[{":
        return value
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def parse_list(value: Any) -> list:
    parsed = parse_structured(value)
    return parsed if isinstance(parsed, list) else []


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON string OpenAI messages carry."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return json.dumps(arguments, ensure_ascii=False, default=str)


def arguments_query(arguments: Any) -> str | dict[str, Any]:
    """A tool call's `query`: its own arguments as a dict when they are a JSON object, else
    the text as given."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
        return parsed if isinstance(parsed, dict) else arguments
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False, default=str)


def function_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An assistant message's tool call, OpenAI style."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments_text(arguments)},
    }


def tool_record(
    name: str, query: Any, call_id: str | None = None, file_path: str | None = None
) -> ToolCall:
    """A turn's tool call record, before its output is known."""
    record: ToolCall = {"tool": name or "unknown", "query": arguments_query(query), "output": ""}
    record["success"] = None
    if call_id:
        record["call_id"] = call_id
    if file_path:
        record["file_path"] = file_path
    return record


def json_lines(path: Path, problems: list[Problem]) -> Iterator[tuple[int, Any]]:
    """Each line of a JSON-lines file that parses, with its number; the others go to
    `problems` (a half-written last line, bytes that are not UTF-8, anything else)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            text = raw.decode("utf-8", "replace").strip().lstrip("\ufeff")
            if not text:
                continue
            try:
                item = json.loads(text)
            except RecursionError:
                problems.append((number, "JSON nested too deeply; line skipped"))
                continue
            except ValueError as exc:
                problems.append((number, f"not JSON ({getattr(exc, 'msg', exc)}); line skipped"))
                continue
            yield number, item


def with_problems(
    sessions: list[ImportedSession], key: str, problems: list[Problem]
) -> list[ImportedSession]:
    """A file's sessions, its unreadable lines reported on the first (or on an empty
    session when none could be read)."""
    if not sessions:
        return [ImportedSession(key=key, problems=problems)]
    sessions[0].problems.extend(problems)
    return sessions


def openai_usage(raw: Any) -> Usage | None:
    """Usage as OpenAI-compatible APIs report it (`prompt_tokens`, `completion_tokens`)."""
    if not isinstance(raw, dict):
        return None
    prompt = non_negative_int(raw.get("prompt_tokens"))
    completion = non_negative_int(raw.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    return {"input_tokens": prompt, "output_tokens": completion}


def iso_timestamp(value: Any) -> str | None:
    """An ISO 8601 timestamp from ISO text or epoch seconds (or milliseconds); None for
    anything unreadable or more than a day ahead (the API refuses those)."""
    moment: datetime | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 1e11 else value
        try:
            moment = datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if moment > datetime.now(UTC) + timedelta(days=1) or moment.year < 1971:
        return None
    return moment.isoformat()


def non_negative_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value < 0 or value == float("inf"):
        return None
    return int(value)


def goal_text(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    text = clean_text(text).strip()
    return cut(text, MAX_GOAL_CHARS) if text else None


def bounded_details(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """`details` within the API's 8 KiB: the largest values go first until it fits."""
    if not details:
        return None
    details = clean_data(details)

    def size(value: Any) -> int:
        return len(json.dumps(value, ensure_ascii=False, default=str))

    while details and size(details) > MAX_DETAILS_CHARS:
        largest = max(details, key=lambda k: size(details[k]))
        del details[largest]
    return details or None


def scalars(data: dict[str, Any], *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The scalar fields of a dict, strings cut to 300 characters."""
    kept: dict[str, Any] = {}
    for name, value in data.items():
        if name in skip or not isinstance(name, str):
            continue
        if isinstance(value, str):
            kept[name] = cut(value, SCALAR_CHARS)
        elif value is None or isinstance(value, bool | int | float):
            kept[name] = value
    return kept


# --- turns ---------------------------------------------------------------------------------


class TurnBuilder:
    """Groups a stream of messages into turns, one per model call: the inputs since the
    previous model call, then the assistant message. A model call's tool call records stay
    reachable by call id, so results read later in the stream fill in their output."""

    def __init__(self) -> None:
        self.turns: list[TurnBody] = []
        self._pending: list[Message] = []
        self._calls: dict[str, ToolCall] = {}
        self._unanswered: list[ToolCall] = []

    def add_input(self, message: Message) -> None:
        self._pending.append(message)

    def add_model_call(
        self,
        message: Message,
        *,
        calls: Sequence[ToolCall] = (),
        usage: Usage | None = None,
        model: str | None = None,
        timestamp: str | None = None,
    ) -> TurnBody:
        turn: TurnBody = {"messages": [*self._pending, message]}
        self._pending = []
        if usage is not None:
            turn["usage"] = usage
        if model:
            turn["model"] = model
        if timestamp:
            turn["timestamp"] = timestamp
        self.turns.append(turn)
        self.add_calls(turn, calls)
        return turn

    def add_calls(self, turn: TurnBody, calls: Sequence[ToolCall]) -> None:
        for record in calls:
            turn.setdefault("tool_calls", []).append(record)
            call_id = record.get("call_id")
            if call_id:
                self._calls.setdefault(call_id, record)
            self._unanswered.append(record)

    def call(self, call_id: str | None) -> ToolCall | None:
        return self._calls.get(call_id) if call_id else None

    def oldest_unanswered(self) -> ToolCall | None:
        return self._unanswered[0] if self._unanswered else None

    def set_result(
        self,
        record: ToolCall,
        output: str,
        success: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        record["output"] = output
        record["success"] = success
        if details:
            record["details"] = details
        self._unanswered = [r for r in self._unanswered if r is not record]

    def finish(self) -> list[TurnBody]:
        """The turns; inputs after the last model call make a last turn of their own."""
        if self._pending:
            self.turns.append({"messages": self._pending})
            self._pending = []
        return self.turns


def _cut_marker(removed: int) -> str:
    return f"\n[… {removed} characters cut by the importer to fit the API's request limit …]"


def _body_bytes(turn: TurnBody) -> int:
    return len(json.dumps(turn, ensure_ascii=False, separators=(",", ":"), default=str).encode())


def _shrink(turn: TurnBody, limit: int) -> int:
    """Cut the longest texts of a turn until its body fits `limit` bytes; the number of
    characters cut."""
    removed_total = 0
    for _ in range(50):
        excess = _body_bytes(turn) - limit
        if excess <= 0:
            break
        holders: list[tuple[int, dict, str]] = []
        for message in turn["messages"]:
            if isinstance(message.get("content"), str):
                holders.append((len(message["content"]), message, "content"))  # type: ignore[arg-type]
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    holders.append((len(function["arguments"]), function, "arguments"))
        for record in turn.get("tool_calls") or []:
            holders.append((len(record.get("output") or ""), record, "output"))  # type: ignore[arg-type]
            if isinstance(record.get("query"), str):
                holders.append((len(record["query"]), record, "query"))  # type: ignore[arg-type]
        holders.sort(key=lambda h: h[0], reverse=True)
        if not holders or holders[0][0] <= KEEP_WHEN_CUTTING:
            break
        length, holder, name = holders[0]
        keep = max(KEEP_WHEN_CUTTING, length - excess - 200, length // 2)
        holder[name] = holder[name][:keep] + _cut_marker(length - keep)
        removed_total += length - keep
    return removed_total


def _clean_message(raw: dict[str, Any]) -> Message | None:
    role = raw.get("role")
    if not isinstance(role, str) or role not in ROLES:
        return None
    content = raw.get("content")
    message: Message = {"role": role, "content": clean_text(text_of(content))}
    name = raw.get("name")
    if isinstance(name, str) and name:
        message["name"] = cut(clean_text(name), MAX_NAME_CHARS)
    call_id = raw.get("tool_call_id")
    if isinstance(call_id, str) and call_id:
        message["tool_call_id"] = _bounded_id(clean_text(call_id))
    calls = raw.get("tool_calls")
    if isinstance(calls, list) and calls:
        message["tool_calls"] = clean_data(
            [{**c, "id": _bounded_id(str(c.get("id", "")))} for c in calls if isinstance(c, dict)]
        )
    return message


def _bounded_id(call_id: str) -> str:
    return call_id if len(call_id) <= MAX_NAME_CHARS else call_id[:150] + "~" + digest(call_id)[:16]


def _clean_record(raw: ToolCall) -> ToolCall:
    tool = cut(clean_text(str(raw.get("tool") or "")).strip(), MAX_NAME_CHARS)
    record: ToolCall = {"tool": tool or "unknown"}
    query = raw.get("query")
    record["query"] = clean_data(query) if isinstance(query, dict) else clean_text(str(query or ""))
    output = raw.get("output")
    record["output"] = clean_text(output if isinstance(output, str) else text_of(output))
    success = raw.get("success")
    record["success"] = success if isinstance(success, bool) else None
    call_id = raw.get("call_id")
    if isinstance(call_id, str) and call_id:
        record["call_id"] = _bounded_id(clean_text(call_id))
    file_path = raw.get("file_path")
    if isinstance(file_path, str) and file_path and len(file_path) <= MAX_FILE_PATH_CHARS:
        record["file_path"] = clean_text(file_path)
    details = bounded_details(raw.get("details"))
    if details:
        record["details"] = details
    return record


def finalize(session: ImportedSession) -> ImportedSession:
    """Bring every turn within the API's bounds: roles, lengths, counts and body size. What
    had to be cut is reported in `problems` (line 0, naming the turn)."""
    turns: list[TurnBody] = []
    for raw in session.turns:
        messages = [m for m in (_clean_message(m) for m in raw.get("messages", [])) if m]
        if not messages:
            continue
        records = [_clean_record(r) for r in raw.get("tool_calls") or []]
        if len(records) > MAX_TOOL_CALLS_PER_TURN:
            session.problems.append(
                (0, f"turn {len(turns) + 1}: {len(records)} tool calls; the first 500 are kept")
            )
            records = records[:MAX_TOOL_CALLS_PER_TURN]
        # A turn with more messages than the API takes: its earliest inputs go first, alone.
        while len(messages) > MAX_MESSAGES_PER_TURN:
            turns.append({"messages": messages[:MAX_MESSAGES_PER_TURN]})
            messages = messages[MAX_MESSAGES_PER_TURN:]
        turn: TurnBody = {"messages": messages}
        if records:
            turn["tool_calls"] = records
        usage = raw.get("usage")
        if isinstance(usage, dict):
            tokens_in = non_negative_int(usage.get("input_tokens"))
            tokens_out = non_negative_int(usage.get("output_tokens"))
            if tokens_in is not None and tokens_out is not None:
                turn["usage"] = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        model = raw.get("model")
        if isinstance(model, str) and model.strip():
            turn["model"] = cut(clean_text(model.strip()), MAX_NAME_CHARS)
        timestamp = iso_timestamp(raw.get("timestamp"))
        if timestamp:
            turn["timestamp"] = timestamp
        removed = _shrink(turn, MAX_TURN_BYTES)
        if removed:
            session.problems.append(
                (0, f"turn {len(turns) + 1}: {removed} characters cut to fit the request limit")
            )
        turns.append(turn)
    session.turns = turns
    if not turns and not session.problems:
        session.problems.append((0, "no conversation found: nothing to import"))
    session.problems.sort(key=lambda problem: problem[0])
    session.key = session_key(session.key)
    session.goal = goal_text(session.goal)
    session.metadata = clean_data(session.metadata)
    return session
