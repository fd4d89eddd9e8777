"""OpenHands trajectories: event lists of actions and observations.

- OpenHands (V0) trajectories, a JSON list of events: an action (`action`: `run`, `edit`,
  `read`, `message`, `finish`, ...) from the agent carries `tool_call_metadata` with the
  function name, the `tool_call_id` and the `model_response` it came from (its id groups
  parallel calls into one model call; its usage and model are the turn's); an
  observation links back through `tool_call_metadata.tool_call_id` or `cause` (the
  action's id). Older histories have neither: an observation answers the action before
  it. Actions without metadata are named after OpenHands' functions (`run` is
  `execute_bash`, `run_ipython` `execute_ipython_cell`, `read`/`edit` `str_replace_editor`).
- The resolver and evaluation output, `output.jsonl`: each line has a `history` of those
  events (one session per line, keyed by `instance_id` or the issue).
- OpenHands SDK events (`events.jsonl`, one event a line, each with a `kind`):
  `MessageEvent`, `ActionEvent` (grouped by `llm_response_id`), `ObservationEvent`,
  `AgentErrorEvent`, `UserRejectObservation`, `SystemPromptEvent`; state updates skipped.

The tool is the function name, the query its arguments, the output the observation's
content; success comes from `exit_code` (or `metadata.exit_code`), error observations
and `is_error`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.client import Message, ToolCall
from agents.importers.core import (
    ImportedSession,
    Problem,
    TurnBody,
    TurnBuilder,
    Usage,
    arguments_text,
    cut,
    function_call,
    iso_timestamp,
    json_lines,
    openai_usage,
    session_key,
    text_of,
    tool_record,
    with_problems,
)

FORMAT = "openhands"
ACTION_FUNCTIONS = {
    "run": "execute_bash",
    "run_ipython": "execute_ipython_cell",
    "read": "str_replace_editor",
    "edit": "str_replace_editor",
    "write": "str_replace_editor",
    "browse": "browser",
    "browse_interactive": "browser",
    "finish": "finish",
    "think": "think",
    "delegate": "delegate",
}
# Events that are bookkeeping, not conversation.
SKIPPED_ACTIONS = frozenset({"change_agent_state", "recall", "null", "pause", "resume"})
SKIPPED_OBSERVATIONS = frozenset({"null", "agent_state_changed", "recall", "delegate"})
# Arguments OpenHands adds around the model's own (prompt bookkeeping, confirmation state).
NOISE_ARGUMENTS = frozenset(
    {
        "thought",
        "is_confirmed",
        "confirmation_state",
        "action_risk",
        "security_risk",
        "keep_prompt",
        "kernel_init_code",
        "hidden",
        "blocking",
        "impl_source",
        "translated_ipython_code",
        "images_urls",
        "image_urls",
        "wait_for_response",
        "is_input",
    }
)
SDK_SKIPPED = frozenset({"ConversationStateUpdateEvent", "PauseEvent", "CondensationRequest"})


def is_event(event: Any) -> bool:
    if not isinstance(event, dict):
        return False
    if isinstance(event.get("kind"), str) and event["kind"].endswith(("Event", "Observation")):
        return True
    return isinstance(event.get("action"), str) or isinstance(event.get("observation"), str)


def is_document(data: Any) -> bool:
    if isinstance(data, dict):
        history = data.get("history")
        return isinstance(history, list) and any(
            is_event(e) or (isinstance(e, list) and any(is_event(x) for x in e)) for e in history
        )
    return isinstance(data, list) and bool(data) and any(is_event(e) for e in data)


def _exit_code(extras: dict[str, Any]) -> int | None:
    metadata = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
    for value in (extras.get("exit_code"), metadata.get("exit_code")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class _Events:
    """Reads OpenHands events of either generation into turns."""

    def __init__(self, problems: list[Problem]) -> None:
        self.builder = TurnBuilder()
        self.problems = problems
        self.goal: str | None = None
        self.model: str | None = None
        self._by_response: dict[str, TurnBody] = {}
        self._by_event_id: dict[str, ToolCall] = {}
        self._actions = 0

    def read(self, events: list[tuple[int, Any]]) -> list[TurnBody]:
        for number, event in events:
            if isinstance(event, list):  # the oldest histories pair [action, observation]
                for part in event:
                    self._one(number, part)
            else:
                self._one(number, event)
        return self.builder.finish()

    def _one(self, number: int, event: Any) -> None:
        if not isinstance(event, dict):
            self.problems.append((number, "an event that is not an object; skipped"))
            return
        try:
            if isinstance(event.get("kind"), str):
                self._sdk(number, event)
            elif isinstance(event.get("action"), str):
                self._action(event)
            elif isinstance(event.get("observation"), str):
                self._observation(number, event)
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            self.problems.append((number, f"could not read this event ({exc}); skipped"))

    # --- shared -----------------------------------------------------------------------------

    def _user_text(self, text: str) -> None:
        self.builder.add_input({"role": "user", "content": text})
        if self.goal is None and text.strip():
            self.goal = text

    def _model_call(
        self,
        response_id: str | None,
        content: str,
        call: dict[str, Any] | None,
        record: ToolCall | None,
        usage: Usage | None,
        timestamp: str | None,
    ) -> None:
        turn = self._by_response.get(response_id) if response_id else None
        if turn is not None:  # another call from the same model response
            if call:
                turn["messages"][-1].setdefault("tool_calls", []).append(call)
            if record:
                self.builder.add_calls(turn, [record])
            return
        message: Message = {"role": "assistant", "content": content}
        if call:
            message["tool_calls"] = [call]
        turn = self.builder.add_model_call(
            message,
            calls=[record] if record else [],
            usage=usage,
            model=self.model,
            timestamp=timestamp,
        )
        if response_id:
            self._by_response[response_id] = turn

    def _answer(
        self,
        number: int,
        record: ToolCall | None,
        output: str,
        success: bool | None,
        details: dict[str, Any] | None,
    ) -> None:
        if record is None:
            self.problems.append((number, "an observation whose action is not in this log"))
            self.builder.add_input({"role": "user", "content": f"[observation]\n{output}"})
            return
        self.builder.set_result(record, output, success, details)
        message: Message = {"role": "tool", "content": output}
        if record.get("call_id"):
            message["tool_call_id"] = record["call_id"]
        self.builder.add_input(message)

    # --- OpenHands V0 -------------------------------------------------------------------------

    def _action(self, event: dict[str, Any]) -> None:
        kind = event["action"]
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if not args:  # the oldest histories put the arguments beside `action`
            args = {k: v for k, v in event.items() if k not in ("action", "id", "source")}
        source = event.get("source")
        timestamp = iso_timestamp(event.get("timestamp"))
        if kind in SKIPPED_ACTIONS:
            return
        if kind == "system":
            self.builder.add_input({"role": "system", "content": text_of(args.get("content"))})
            return
        metadata = event.get("tool_call_metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        response = metadata.get("model_response")
        response = response if isinstance(response, dict) else {}
        # The oldest histories name no source: their first message is the user's task.
        first = source is None and not self.builder.turns and self.goal is None
        if kind == "message" and (source == "user" or first):
            self._user_text(text_of(args.get("content") or event.get("message")))
            return
        reply = _reply(response)
        content = text_of(reply.get("content")) or text_of(args.get("thought"))
        if isinstance(response.get("model"), str):
            self.model = response["model"]
        usage = openai_usage(response.get("usage"))
        if kind == "message":
            content = content or text_of(args.get("content") or event.get("message"))
            self._model_call(response.get("id"), content, None, None, usage, timestamp)
            return
        call, record = self._action_call(event, kind, args, metadata, reply)
        self._model_call(response.get("id"), content, call, record, usage, timestamp)

    def _action_call(
        self,
        event: dict[str, Any],
        kind: str,
        args: dict[str, Any],
        metadata: dict[str, Any],
        reply: dict[str, Any],
    ) -> tuple[dict[str, Any], ToolCall]:
        """The function call an action is (named by its metadata, else after OpenHands'
        function for it), with its arguments as the model wrote them when the reply has
        them, and its record."""
        name = metadata.get("function_name") or ACTION_FUNCTIONS.get(kind, kind)
        if kind == "call_tool_mcp" and isinstance(args.get("name"), str):
            name = args["name"]
        self._actions += 1
        call_id = metadata.get("tool_call_id") or f"call_{event.get('id', self._actions)}"
        arguments: Any = {k: v for k, v in args.items() if k not in NOISE_ARGUMENTS}
        for call in reply.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id") == call_id:
                arguments = (call.get("function") or {}).get("arguments", arguments)
        record = tool_record(str(name), arguments, str(call_id), _path(arguments))
        if kind == "finish":
            record["output"] = text_of(args.get("final_thought") or args.get("thought"))
        if "id" in event:
            self._by_event_id[str(event["id"])] = record
        return function_call(str(call_id), str(name), arguments_text(arguments)), record

    def _observation(self, number: int, event: dict[str, Any]) -> None:
        kind = event["observation"]
        if kind in SKIPPED_OBSERVATIONS:
            return
        extras = event.get("extras") if isinstance(event.get("extras"), dict) else {}
        if not extras:
            extras = {k: v for k, v in event.items() if k not in ("observation", "content")}
        metadata = event.get("tool_call_metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        record = self.builder.call(str(metadata.get("tool_call_id") or ""))
        if record is None and event.get("cause") is not None:
            record = self._by_event_id.get(str(event["cause"]))
        if record is None and "cause" not in event and not metadata:
            record = self.builder.oldest_unanswered()
        output = text_of(event.get("content"))
        if not output and isinstance(event.get("message"), str):
            output = event["message"]
        if kind == "message":  # a user's reply recorded as an observation
            self._user_text(output)
            return
        exit_code = _exit_code(extras)
        success: bool | None = None
        if kind == "error":
            success = False
        elif exit_code is not None and exit_code >= 0:
            success = exit_code == 0
        details: dict[str, Any] = {"observation": kind}
        if exit_code is not None:
            details["exit_code"] = exit_code
        if isinstance(extras.get("path"), str):
            details["path"] = cut(extras["path"], 300)
        self._answer(number, record, output, success, details)

    # --- OpenHands SDK ------------------------------------------------------------------------

    def _sdk(self, number: int, event: dict[str, Any]) -> None:
        kind = event["kind"]
        timestamp = iso_timestamp(event.get("timestamp"))
        if kind in SDK_SKIPPED:
            if kind == "ConversationStateUpdateEvent" and event.get("key") == "stats":
                self._sdk_model(event.get("value"))
            return
        if kind == "SystemPromptEvent":
            prompt = event.get("system_prompt")
            self.builder.add_input({"role": "system", "content": text_of(prompt)})
        elif kind == "MessageEvent":
            self._sdk_message(event, timestamp)
        elif kind == "ActionEvent":
            self._sdk_action(number, event, timestamp)
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            self._sdk_observation(number, kind, event)

    def _sdk_message(self, event: dict[str, Any], timestamp: str | None) -> None:
        message = event.get("llm_message") if isinstance(event.get("llm_message"), dict) else {}
        text = text_of(message.get("content"))
        if event.get("source") == "user" or message.get("role") == "user":
            self._user_text(text)
        else:
            self._model_call(None, text, None, None, None, timestamp)

    def _sdk_action(self, number: int, event: dict[str, Any], timestamp: str | None) -> None:
        call = event.get("tool_call") if isinstance(event.get("tool_call"), dict) else {}
        name = str(call.get("name") or event.get("tool_name") or "unknown")
        call_id = str(call.get("id") or event.get("tool_call_id") or f"call_{number}")
        arguments = call.get("arguments")
        if arguments is None:
            arguments = event.get("action")
        record = tool_record(name, arguments, call_id, _path(arguments))
        response_id = event.get("llm_response_id")
        self._model_call(
            response_id if isinstance(response_id, str) else None,
            text_of(event.get("thought")),
            function_call(call_id, name, arguments),
            record,
            None,
            timestamp,
        )

    def _sdk_observation(self, number: int, kind: str, event: dict[str, Any]) -> None:
        """An observation, an agent error or a rejection: the answer to its action."""
        record = self.builder.call(str(event.get("tool_call_id") or ""))
        observation = event.get("observation")
        observation = observation if isinstance(observation, dict) else {}
        exit_code = _exit_code(observation)
        output, success = _sdk_outcome(kind, event, observation, exit_code)
        details: dict[str, Any] = {"observation": kind}
        if isinstance(observation.get("kind"), str):
            details["observation"] = observation["kind"]
        if kind == "ObservationEvent" and exit_code is not None:
            details["exit_code"] = exit_code
        self._answer(number, record, output, success, details)

    def _sdk_model(self, value: Any) -> None:
        metrics = value.get("usage_to_metrics") if isinstance(value, dict) else None
        default = metrics.get("default") if isinstance(metrics, dict) else None
        name = default.get("model_name") if isinstance(default, dict) else None
        if isinstance(name, str) and name:
            self.model = name


def _reply(response: dict[str, Any]) -> dict[str, Any]:
    """The assistant message of a model response's first choice ({} when it has none)."""
    choice = (response.get("choices") or [{}])[0]
    reply = choice.get("message") if isinstance(choice, dict) else None
    return reply if isinstance(reply, dict) else {}


def _sdk_outcome(
    kind: str, event: dict[str, Any], observation: dict[str, Any], exit_code: int | None
) -> tuple[str, bool | None]:
    """(the output, whether the call succeeded) of an SDK observation event."""
    if kind == "AgentErrorEvent":
        return text_of(event.get("error")), False
    if kind == "UserRejectObservation":
        return text_of(event.get("rejection_reason") or "rejected"), False
    output = text_of(observation.get("content"))
    if observation.get("is_error") is True:
        return output, False
    if exit_code is not None and exit_code >= 0:
        return output, exit_code == 0
    if observation.get("is_error") is False:
        return output, True
    return output, None


def _path(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    path = arguments.get("path") if isinstance(arguments, dict) else None
    return path if isinstance(path, str) and path and "\n" not in path else None


def _session(
    key: str, events: list[tuple[int, Any]], problems: list[Problem], metadata: dict[str, Any]
) -> ImportedSession:
    reader = _Events(problems)
    turns = reader.read(events)
    if reader.model:
        metadata["model"] = reader.model
    return ImportedSession(
        key=key, turns=turns, metadata=metadata, goal=reader.goal, problems=problems
    )


def _run_key(key: str, run: dict[str, Any], number: int) -> str:
    instance = run.get("instance_id")
    issue = run.get("issue") if isinstance(run.get("issue"), dict) else {}
    if isinstance(instance, str | int) and str(instance):
        return f"{key}:{session_key(str(instance))}"
    if issue.get("number") is not None:
        repo = f"{issue.get('owner', '')}_{issue.get('repo', '')}".strip("_")
        prefix = f"{key}:{session_key(repo)}" if repo else key
        return f"{prefix}:issue-{issue['number']}"
    return f"{key}:{number}"


def _run_session(key: str, run: dict[str, Any], number: int, path: Path) -> ImportedSession:
    metadata: dict[str, Any] = {"format": FORMAT, "file": path.name}
    for name in ("instance_id", "success", "error", "issue_type"):
        value = run.get(name)
        if isinstance(value, str | bool | int):
            metadata[name] = cut(value, 300) if isinstance(value, str) else value
    history = [(number, e) for e in run.get("history") or []]
    session = _session(_run_key(key, run, number), history, [], metadata)
    instruction = run.get("instruction")
    if isinstance(instruction, str) and instruction.strip():
        session.goal = instruction
    return session


def load_document(data: Any, key: str, path: Path) -> list[ImportedSession]:
    """A JSON list of events, or one run (`{"history": [...]}`)."""
    if isinstance(data, dict):
        session = _run_session(key, data, 0, path)
        session.key = key  # one run, one file: the file names it
        return [session]
    events = [(0, e) for e in data]
    return [_session(key, events, [], {"format": FORMAT, "file": path.name})]


def load_lines(path: Path, key: str) -> list[ImportedSession]:
    """`output.jsonl` (one run a line) or SDK `events.jsonl` (one event a line)."""
    runs: list[ImportedSession] = []
    events: list[tuple[int, Any]] = []
    problems: list[Problem] = []
    for number, item in json_lines(path, problems):
        if isinstance(item, dict) and isinstance(item.get("history"), list):
            runs.append(_run_session(key, item, number, path))
        else:
            events.append((number, item))
    if events:
        return [*runs, _session(key, events, problems, {"format": FORMAT, "file": path.name})]
    return with_problems(runs, key, problems)
