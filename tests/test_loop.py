"""The reference agent loop (agents/loop.py) against a live server, driven by a scripted
model: what is restored, stored, skipped and counted."""

import json

import pytest

from agents.client import MemoryClient
from agents.loop import AgentLoop, ModelReply, Tool, ToolRequest, known_result
from memoryapp.core.models import Agent, ApiKey, Finding, Memory, Message, ToolCall, Turn

pytestmark = pytest.mark.django_db(transaction=True)

README = "# demo\nRun `make test` to test.\n"


@pytest.fixture
def client(live_server, in_process_tasks):
    agent = Agent.objects.create(name="looper")
    with MemoryClient(live_server.url, ApiKey.issue(agent)[1]) as memory:
        yield memory


class Scripted:
    """A model that answers from a script and keeps every prompt it was given."""

    def __init__(self, *replies: ModelReply) -> None:
        self.replies = list(replies)
        self.prompts: list[list[dict]] = []
        self.tools: list[list[dict]] = []

    def __call__(self, messages, tools) -> ModelReply:
        self.prompts.append(messages)
        self.tools.append(tools)
        return self.replies.pop(0)


def read(path: str) -> ToolRequest:
    return ToolRequest("read_file", {"path": path})


class Files:
    def __init__(self) -> None:
        self.reads: list[str] = []

    def __call__(self, arguments: dict) -> str:
        self.reads.append(arguments["path"])
        if arguments["path"] != "README.md":
            raise FileNotFoundError(arguments["path"])
        return README


def test_a_known_result_is_not_fetched_again_and_the_skip_is_counted(client):
    files = Files()
    model = Scripted(
        ModelReply("", [read("README.md")], usage={"input_tokens": 50, "output_tokens": 5}),
        ModelReply("", [read("README.md")], usage={"input_tokens": 80, "output_tokens": 5}),
        ModelReply("Run `make test`.", usage={"input_tokens": 90, "output_tokens": 6}),
    )
    loop = AgentLoop(client, "run", model, tools={"read_file": Tool(files, "Read a file")})
    result = loop.run("How are the tests run?")

    assert result.answer == "Run `make test`."
    assert result.steps == 3 and result.finished
    assert files.reads == ["README.md"]  # the second read was skipped
    assert [s.tool for s in result.skipped] == ["read_file"]
    # The model was told what is known instead of the file again.
    told = [m for m in model.prompts[2] if m["role"] == "tool"][-1]
    assert told["content"] == known_result(result.skipped[0].fact)
    assert told["content"].startswith("Already known")
    # Stored: three turns, the task, the replies and both tool results, with usage.
    turns = list(Turn.objects.order_by("iteration"))
    assert [t.input_tokens for t in turns] == [50, 80, 90]
    roles = list(Message.objects.order_by("seq").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    skipped = ToolCall.objects.get(skipped=True)
    ran = ToolCall.objects.get(skipped=False)
    assert skipped.finding_id == ran.finding_id == result.skipped[0].finding_id
    assert Finding.objects.count() == 1
    assert client.stats("run")["redundant_tool_calls_avoided"] == 1


def test_the_prompt_is_built_from_the_assembled_context(client):
    client.put_session("run", goal="Fix the import")
    client.set_context_item("run", "branch", "fix-import")
    client.remember("The project uses make for everything", confidence=0.9)
    model = Scripted(ModelReply("ok"))
    AgentLoop(client, "run", model, system="Be brief.").run("make?")
    system = model.prompts[0][0]
    assert system["role"] == "system"
    assert system["content"].startswith("Be brief.")
    assert "## Session Context" in system["content"] and "fix-import" in system["content"]
    assert "## Remembered Information" in system["content"]
    assert model.prompts[0][-1] == {"role": "user", "content": "make?"}
    names = [t["function"]["name"] for t in model.tools[0]]
    assert names == ["remember", "recall", "forget"]


def test_history_is_restored_before_the_first_model_call(client):
    first = Scripted(ModelReply("", [read("README.md")]), ModelReply("It is make."))
    AgentLoop(client, "run", first, tools={"read_file": Files()}).run("How are tests run?")
    # A new process, the same session: the earlier conversation comes back.
    second = Scripted(ModelReply("As before: make."))
    loop = AgentLoop(client, "run", second, tools={"read_file": Files()})
    result = loop.run("Remind me?")
    assert result.restored == 4
    contents = [m["content"] for m in second.prompts[0][1:]]
    assert contents[0] == "How are tests run?"
    assert README in contents and "It is make." in contents
    assert contents[-1] == "Remind me?"


def test_memory_tools_run_on_the_server(client):
    model = Scripted(
        ModelReply("", [ToolRequest("remember", {"content": "Tests run with make test"})]),
        ModelReply("", [ToolRequest("recall", {"query": "make"})]),
        ModelReply("", [ToolRequest("forget", {"memory_id": 999_999})]),
        ModelReply("", [ToolRequest("recall", {"question": "make"})]),  # a bad argument
        ModelReply("done"),
    )
    result = AgentLoop(client, "run", model).run("Learn this")
    assert result.answer == "done"
    memory = Memory.objects.get()
    assert memory.content == "Tests run with make test" and memory.session.key == "run"
    tool_messages = list(Message.objects.filter(role="tool").order_by("seq"))
    assert "Tests run with make test" in tool_messages[1].content
    assert tool_messages[2].content == "No memory with id 999999."
    assert tool_messages[3].content.startswith("error:")
    assert "question" in tool_messages[3].content
    # The memory tools are the memory, not findings about the work.
    assert not Finding.objects.exclude(kind="bookkeeping").exists()


def test_a_failing_tool_and_an_unknown_tool_are_told_to_the_model(client):
    model = Scripted(
        ModelReply("", [read("missing.txt"), ToolRequest("deploy", {})]),
        ModelReply("gave up"),
    )
    AgentLoop(client, "run", model, tools={"read_file": Files()}).run("Read missing.txt")
    told = [m["content"] for m in model.prompts[1] if m["role"] == "tool"]
    assert told[0].startswith("error: FileNotFoundError")
    assert told[1] == "error: there is no tool named 'deploy'"
    calls = {c.tool: c.success for c in ToolCall.objects.all()}
    assert calls == {"read_file": False, "deploy": False}


def test_out_of_steps_the_tool_results_are_still_stored(client):
    model = Scripted(ModelReply("", [read("README.md")]))
    result = AgentLoop(client, "run", model, tools={"read_file": Files()}, max_steps=1).run("go")
    assert not result.finished and result.steps == 1
    assert Message.objects.filter(role="tool").get().content == README
    arguments = json.loads(ToolCall.objects.get().query)
    assert arguments == {"path": "README.md"}


def test_own_tools_cannot_shadow_memory_tools(client):
    with pytest.raises(ValueError, match="memory tools"):
        AgentLoop(client, "run", Scripted(), tools={"recall": Files()})
