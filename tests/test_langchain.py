"""agents.langchain: the LangChain chat message history kept in memoryapp, against a real
HTTP server (pytest-django's live server).

The contract tests run the same bodies over langchain_core's own
`InMemoryChatMessageHistory` and over the memoryapp history, each through its sync methods
and through its async ones: what LangChain's reference history does, this one does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import httpx
import pytest
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from agents.client import (
    AsyncMemoryClient,
    InvalidRequest,
    MemoryClient,
    NotFound,
    RetryPolicy,
    Unauthorized,
)
from agents.langchain import MemoryappChatMessageHistory
from memoryapp.core.models import Agent, ApiKey
from tests.conftest import TOOL_OUTPUTS

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # InMemoryChatMessageHistory and RunnableWithMessageHistory warn that LangChain
    # deprecates them (removal in langchain-core 2.0); they are what is tested against.
    pytest.mark.filterwarnings("ignore::langchain_core._api.LangChainDeprecationWarning"),
]


@pytest.fixture
def client(live_server, api_key) -> Iterator[MemoryClient]:
    with MemoryClient(live_server.url, api_key) as memory:
        yield memory


# --- the contract, over both histories, sync and async --------------------------------------


class SyncUse:
    """A history driven through its synchronous methods."""

    def __init__(self, history: BaseChatMessageHistory) -> None:
        self.history = history

    def add(self, messages: Sequence[BaseMessage]) -> None:
        self.history.add_messages(messages)

    def read(self) -> list[BaseMessage]:
        return self.history.messages

    def clear(self) -> None:
        self.history.clear()


class AsyncUse(SyncUse):
    """A history driven through its async methods, on one event loop for the test (an
    `asyncio.Runner`, asyncio.run's machinery kept open: an httpx async client belongs to
    the loop it first ran on)."""

    def __init__(self, history: BaseChatMessageHistory, runner: asyncio.Runner) -> None:
        super().__init__(history)
        self.runner = runner

    def add(self, messages: Sequence[BaseMessage]) -> None:
        self.runner.run(self.history.aadd_messages(messages))

    def read(self) -> list[BaseMessage]:
        return self.runner.run(self.history.aget_messages())

    def clear(self) -> None:
        self.runner.run(self.history.aclear())


@dataclass
class Histories:
    """Opens the history of a session key: `open(key)` twice gives two history objects
    over the same stored messages, as a `get_session_history` function does."""

    make: Callable[[str], BaseChatMessageHistory]
    runner: asyncio.Runner | None = None

    def open(self, key: str) -> SyncUse:
        history = self.make(key)
        return AsyncUse(history, self.runner) if self.runner else SyncUse(history)


@pytest.fixture(params=["in-memory-sync", "in-memory-async", "memoryapp-sync", "memoryapp-async"])
def histories(request) -> Iterator[Histories]:
    kind, mode = request.param.rsplit("-", 1)
    with asyncio.Runner() as runner:
        async_runner = runner if mode == "async" else None
        if kind == "in-memory":
            store: dict[str, InMemoryChatMessageHistory] = {}
            yield Histories(
                lambda key: store.setdefault(key, InMemoryChatMessageHistory()), async_runner
            )
            return
        live_server = request.getfixturevalue("live_server")
        key = request.getfixturevalue("api_key")
        if mode == "sync":
            with MemoryClient(live_server.url, key) as memory:
                yield Histories(lambda k: MemoryappChatMessageHistory(k, client=memory))
            return
        # Only the async client: the async methods cannot fall back to sync calls.
        memory = AsyncMemoryClient(live_server.url, key)
        yield Histories(lambda k: MemoryappChatMessageHistory(k, async_client=memory), runner)
        runner.run(memory.aclose())


def a_conversation() -> list[BaseMessage]:
    """Every kind of message the history stores, with the fields it keeps."""
    return [
        SystemMessage("You answer in one line.\nNo apologies."),
        HumanMessage("Qu'y a-t-il dans src/ ? 🗂", name="ann"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "ls", "args": {"path": "src/", "all": True}, "id": "call_1"},
                {"name": "grep", "args": {"pattern": "TODO", "paths": ["a", "b"]}, "id": "call_2"},
            ],
        ),
        ToolMessage("main.py util.py", tool_call_id="call_1", name="ls"),
        ToolMessage("", tool_call_id="call_2", name="grep"),
        AIMessage("Two files, no TODO.", name="helper"),
        HumanMessage(""),
    ]


def test_a_new_session_has_no_messages(histories):
    assert histories.open("never-used").read() == []


def test_what_is_added_is_what_is_read(histories):
    history = histories.open("s")
    history.add(a_conversation())
    assert history.read() == a_conversation()
    assert histories.open("s").read() == a_conversation()


def test_each_add_appends_in_order(histories):
    first, *rest = a_conversation()
    history = histories.open("s")
    history.add([first])
    history.add(rest[:2])
    history.add(rest[2:])
    assert history.read() == a_conversation()


def test_adding_no_messages_changes_nothing(histories):
    history = histories.open("s")
    history.add([])
    assert history.read() == []
    history.add([HumanMessage("hi")])
    history.add([])
    assert history.read() == [HumanMessage("hi")]


def test_clear_empties_the_history_and_it_goes_on(histories):
    history = histories.open("s")
    history.add(a_conversation())
    history.clear()
    assert history.read() == []
    assert histories.open("s").read() == []
    history.add([HumanMessage("again")])
    assert history.read() == [HumanMessage("again")]


def test_clearing_an_unknown_session_is_no_error(histories):
    history = histories.open("never-used")
    history.clear()
    assert history.read() == []


def test_sessions_are_separate(histories):
    histories.open("a").add([HumanMessage("for a")])
    histories.open("b").add([HumanMessage("for b")])
    histories.open("b").clear()
    assert histories.open("a").read() == [HumanMessage("for a")]
    assert histories.open("b").read() == []


@pytest.mark.parametrize("kind", ["in-memory", "memoryapp"])
def test_the_one_message_helpers(kind, request):
    if kind == "in-memory":
        history: BaseChatMessageHistory = InMemoryChatMessageHistory()
    else:
        history = MemoryappChatMessageHistory("s", client=request.getfixturevalue("client"))
    history.add_user_message("hi")
    history.add_ai_message("hello")
    history.add_user_message(HumanMessage("and you?", name="ann"))
    history.add_ai_message(AIMessage("fine"))
    history.add_message(SystemMessage("be brief"))
    assert history.messages == [
        HumanMessage("hi"),
        AIMessage("hello"),
        HumanMessage("and you?", name="ann"),
        AIMessage("fine"),
        SystemMessage("be brief"),
    ]
    assert str(history).splitlines()[0] == "Human: hi"


# --- in memoryapp ---------------------------------------------------------------------------


def test_each_add_is_a_turn_of_the_session(client):
    history = MemoryappChatMessageHistory("chat-1", client=client)
    answer = AIMessage(
        "hello",
        usage_metadata={"input_tokens": 120, "output_tokens": 7, "total_tokens": 127},
        response_metadata={"model_name": "gpt-test-1"},
    )
    history.add_messages([SystemMessage("s"), HumanMessage("hi"), answer])
    history.add_messages([HumanMessage("bye")])
    turns = list(client.turns("chat-1"))
    assert [(t["iteration"], t["message_count"]) for t in turns] == [(1, 3), (2, 1)]
    assert (turns[0]["input_tokens"], turns[0]["output_tokens"]) == (120, 7)
    assert (turns[0]["usage_source"], turns[0]["model"]) == ("reported", "gpt-test-1")
    assert turns[1]["usage_source"] == "counted"
    stored = client.history("chat-1")["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [
        ("system", "s"),
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", "bye"),
    ]
    assert client.session("chat-1")["totals"]["messages"] == 4


def test_tool_calls_are_stored_in_openai_shape_and_read_back(client):
    history = MemoryappChatMessageHistory("s", client=client)
    history.add_messages(a_conversation())
    stored = client.history("s")["messages"]
    assert stored[2]["tool_calls"][1] == {
        "id": "call_2",
        "type": "function",
        "function": {
            "name": "grep",
            "arguments": json.dumps({"pattern": "TODO", "paths": ["a", "b"]}),
        },
    }
    assert (stored[3]["tool_call_id"], stored[3]["name"]) == ("call_1", "ls")
    assert history.messages[2].tool_calls == a_conversation()[2].tool_calls


def test_tool_results_become_findings(client, in_process_tasks):
    """Stored in OpenAI's shape, a LangChain tool call and its result are what the server's
    extraction reads: the session learns from them as from any agent's."""
    call = TOOL_OUTPUTS["cc_pytest"]
    history = MemoryappChatMessageHistory("s", client=client)
    history.add_messages(
        [
            HumanMessage("Run the tests."),
            AIMessage(
                "", tool_calls=[{"name": "Bash", "args": json.loads(call["query"]), "id": "t1"}]
            ),
            ToolMessage(call["output"], tool_call_id="t1"),
        ]
    )
    (finding,) = client.findings("s")
    assert (finding["tool"], finding["fact"]) == (
        "Bash",
        "`python -m pytest tests/test_math_utils.py -v` ok: 2 passed",
    )
    assert finding["provenance"]["message_seq"] == 3  # the tool message


def test_invalid_tool_calls_are_kept_without_their_error(client):
    history = MemoryappChatMessageHistory("s", client=client)
    broken = {"name": "ls", "args": '{"path": "sr', "id": "call_9", "error": "cut off"}
    history.add_messages([AIMessage("", invalid_tool_calls=[broken])])
    (read,) = history.messages
    assert read.tool_calls == []
    assert read.invalid_tool_calls == [{**broken, "error": None, "type": "invalid_tool_call"}]


def test_tool_calls_another_client_stored_are_read(client):
    client.append_turn(
        "s",
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "ls", "arguments": "[]"}},
                    {"id": "c", "name": "ls", "input": {}},
                ],
            }
        ],
    )
    (read,) = MemoryappChatMessageHistory("s", client=client).messages
    assert read.tool_calls == [{"name": "ls", "args": {}, "id": "a", "type": "tool_call"}]
    assert [(c["id"], c["name"]) for c in read.invalid_tool_calls] == [("b", "ls"), ("c", None)]
    assert json.loads(read.invalid_tool_calls[1]["args"]) == {"id": "c", "name": "ls", "input": {}}


def test_content_blocks_are_stored_as_their_text(client):
    history = MemoryappChatMessageHistory("s", client=client)
    call = {"name": "ls", "args": {"path": "."}, "id": "toolu_1"}
    history.add_messages(
        [
            HumanMessage(
                [{"type": "text", "text": "Look at "}, "this ", {"type": "text", "text": "."}]
            ),
            AIMessage(
                [
                    {"type": "thinking", "thinking": "list it", "signature": "sig"},
                    {"type": "text", "text": "Listing."},
                    {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}},
                ],
                tool_calls=[call],
            ),
            ToolMessage([{"type": "text", "text": "a.py"}], tool_call_id="toolu_1"),
        ]
    )
    assert history.messages == [
        HumanMessage("Look at this ."),
        AIMessage("Listing.", tool_calls=[call]),
        ToolMessage("a.py", tool_call_id="toolu_1"),
    ]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
        {"type": "file", "url": "https://example.com/report.pdf"},
    ],
)
def test_a_block_that_is_not_text_is_refused_and_nothing_is_stored(client, block):
    history = MemoryappChatMessageHistory("s", client=client)
    with pytest.raises(ValueError, match=f"'{block['type']}' content block"):
        history.add_messages(
            [HumanMessage("fine"), HumanMessage([{"type": "text", "text": "see"}, block])]
        )
    with pytest.raises(NotFound):
        client.session("s")


def test_chat_messages_are_stored_by_role_and_read_as_that_role(client):
    history = MemoryappChatMessageHistory("s", client=client)
    history.add_messages(
        [
            ChatMessage("rules", role="system"),
            ChatMessage("hi", role="user", name="ann"),
            ChatMessage("hello", role="assistant"),
        ]
    )
    assert history.messages == [
        SystemMessage("rules"),
        HumanMessage("hi", name="ann"),
        AIMessage("hello"),
    ]


@pytest.mark.parametrize(
    "message", [ChatMessage("x", role="critic"), FunctionMessage("x", name="legacy_function")]
)
def test_a_role_memoryapp_does_not_have_is_refused(client, message):
    history = MemoryappChatMessageHistory("s", client=client)
    with pytest.raises(ValueError, match="memoryapp"):
        history.add_messages([HumanMessage("fine"), message])
    assert history.messages == []


def test_what_the_server_refuses_is_a_typed_error(client):
    history = MemoryappChatMessageHistory("s", client=client)
    with pytest.raises(InvalidRequest):
        history.add_messages([HumanMessage("hi", name="n" * 201)])
    assert history.messages == []


def test_a_wrong_key_is_unauthorized_sync_and_async(live_server, client):
    MemoryappChatMessageHistory("s", client=client).add_messages([HumanMessage("hi")])
    with MemoryClient(live_server.url, "wrong-key") as stranger:
        history = MemoryappChatMessageHistory("s", client=stranger)
        for use in (lambda: history.messages, history.clear):
            with pytest.raises(Unauthorized):
                use()
        with pytest.raises(Unauthorized):
            history.add_messages([HumanMessage("intruding")])

    async def use_async(history: MemoryappChatMessageHistory) -> list[str]:
        refused = []
        for call in (
            history.aget_messages,
            history.aclear,
            lambda: history.aadd_messages([HumanMessage("intruding")]),
        ):
            try:
                await call()
            except Unauthorized:
                refused.append("refused")
        await history.aclose()
        return refused

    wrong = MemoryappChatMessageHistory("s", base_url=live_server.url, api_key="wrong-key")
    assert asyncio.run(use_async(wrong)) == ["refused"] * 3
    assert MemoryappChatMessageHistory("s", client=client).messages == [HumanMessage("hi")]


def test_another_agents_session_of_the_same_key_is_not_seen(live_server, client):
    mine = MemoryappChatMessageHistory("shared-name", client=client)
    mine.add_messages([HumanMessage("mine")])
    other_key = ApiKey.issue(Agent.objects.create(name="other"))[1]
    with MemoryClient(live_server.url, other_key) as other_client:
        theirs = MemoryappChatMessageHistory("shared-name", client=other_client)
        assert theirs.messages == []
        theirs.clear()
        theirs.add_messages([HumanMessage("theirs")])
        assert theirs.messages == [HumanMessage("theirs")]
    assert mine.messages == [HumanMessage("mine")]


def test_clear_keeps_the_sessions_state(client):
    history = MemoryappChatMessageHistory("s", client=client)
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    client.put_session("s", goal="greet")
    client.set_context_item("s", "language", "French")
    history.clear()
    assert history.messages == []
    session = client.session("s")
    assert (session["goal"], session["totals"]["messages"]) == ("greet", 0)
    assert [item["value"] for item in client.context_items("s")] == ["French"]
    history.add_messages([HumanMessage("again")])
    assert [t["iteration"] for t in client.turns("s")] == [1]


class DropsTheFirstAnswer(httpx.HTTPTransport):
    """Sends every request; loses the server's answer to the first turn it sends, as a
    dropped connection would. Records the Idempotency-Key of each turn sent."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/turns"):
            self.keys.append(request.headers["Idempotency-Key"])
            if len(self.keys) == 1:
                response.close()
                raise httpx.ReadError("connection lost after the server answered", request=request)
        return response


def test_an_add_retried_after_a_lost_answer_is_stored_once(live_server, api_key):
    transport = DropsTheFirstAnswer()
    fast = RetryPolicy(retries=2, backoff=0.001, max_wait=0.01)
    with MemoryClient(live_server.url, api_key, retry=fast, transport=transport) as memory:
        history = MemoryappChatMessageHistory("s", client=memory)
        history.add_messages([HumanMessage("once")])
        history.add_messages([HumanMessage("twice")])
        assert history.messages == [HumanMessage("once"), HumanMessage("twice")]
    first, retried, second = transport.keys
    assert first == retried != second


def test_without_a_sync_client_the_sync_methods_say_so():
    history = MemoryappChatMessageHistory("s", async_client=AsyncMemoryClient("http://x", "k"))
    with pytest.raises(RuntimeError, match="aget_messages"):
        _ = history.messages
    with pytest.raises(RuntimeError, match="aadd_messages"):
        history.add_messages([HumanMessage("hi")])


def test_with_only_a_sync_client_the_async_methods_run_it_in_an_executor(client):
    history = MemoryappChatMessageHistory("s", client=client)

    async def use() -> list[BaseMessage]:
        await history.aadd_messages([HumanMessage("hi")])
        before = await history.aget_messages()
        await history.aclear()
        return [*before, *await history.aget_messages()]

    assert asyncio.run(use()) == [HumanMessage("hi")]


def test_a_history_made_from_a_url_and_key(live_server, api_key):
    history = MemoryappChatMessageHistory("s", base_url=live_server.url, api_key=api_key)
    history.add_messages([HumanMessage("sync")])

    async def use() -> list[BaseMessage]:
        await history.aadd_messages([AIMessage("async")])
        messages = await history.aget_messages()
        await history.aclose()
        return messages

    assert asyncio.run(use()) == [HumanMessage("sync"), AIMessage("async")]
    with pytest.raises(TypeError):
        MemoryappChatMessageHistory("s")
    with pytest.raises(TypeError):
        MemoryappChatMessageHistory("s", base_url=live_server.url)


def test_every_message_is_read_however_many(client):
    history = MemoryappChatMessageHistory("s", client=client)
    conversation = [ToolMessage("a result first", tool_call_id="call_0")]
    conversation += [HumanMessage(f"message {i}") for i in range(450)]
    history.add_messages(conversation)
    assert history.messages == conversation


# --- with RunnableWithMessageHistory --------------------------------------------------------


def counting_chain() -> RunnableWithMessageHistory:
    """A prompt with the history before the question, and a model that says how many
    messages it was given."""
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = RunnableLambda(lambda value: AIMessage(f"I was given {len(value.to_messages())}"))
    return prompt | model


def test_runnable_with_message_history(client):
    chain = RunnableWithMessageHistory(
        counting_chain(),
        lambda session_id: MemoryappChatMessageHistory(session_id, client=client),
        input_messages_key="question",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "chat-7"}}
    assert chain.invoke({"question": "hi"}, config).content == "I was given 2"
    assert chain.invoke({"question": "and now?"}, config).content == "I was given 4"
    assert MemoryappChatMessageHistory("chat-7", client=client).messages == [
        HumanMessage("hi"),
        AIMessage("I was given 2"),
        HumanMessage("and now?"),
        AIMessage("I was given 4"),
    ]
    assert [t["message_count"] for t in client.turns("chat-7")] == [2, 2]


def test_runnable_with_message_history_async(live_server, api_key, client):
    async def chat() -> list[str]:
        async with AsyncMemoryClient(live_server.url, api_key) as memory:
            chain = RunnableWithMessageHistory(
                counting_chain(),
                lambda session_id: MemoryappChatMessageHistory(session_id, async_client=memory),
                input_messages_key="question",
                history_messages_key="history",
            )
            config = {"configurable": {"session_id": "chat-8"}}
            return [(await chain.ainvoke({"question": q}, config)).content for q in ("hi", "again")]

    assert asyncio.run(chat()) == ["I was given 2", "I was given 4"]
    assert [t["message_count"] for t in client.turns("chat-8")] == [2, 2]
