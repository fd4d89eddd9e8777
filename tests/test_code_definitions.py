"""memoryapp.lib.code: languages by file name, definitions named by tree-sitter, manifests.

The Python and Rust sources are what agents really read in the shipped transcripts (a
Claude Code Read with its `     1→` prefixes, a SWE-agent window of marshmallow's
fields.py that starts mid-function); the other languages are written the way real
projects write them. Every test asserts exact names, kinds, lines and order.
"""

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryapp.lib.code.definitions import (
    MAX_BYTES,
    Definition,
    definitions,
    summarize_definitions,
)
from memoryapp.lib.code.languages import LANGUAGES, display_name, language_of
from memoryapp.lib.code.manifests import (
    FRAMEWORKS,
    Manifest,
    frameworks_of,
    read_manifest,
    summarize_manifest,
)


def rows(defs: list[Definition]) -> list[tuple]:
    return [(d.name, d.kind, d.line, d.public, d.parent) for d in defs]


def names(defs: list[Definition]) -> list[str]:
    return [d.name for d in defs]


# --- languages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "language", "display"),
    [
        ("lib/spotter/transcripts.ex", "elixir", "Elixir"),
        ("test/spotter_test.exs", "elixir", "Elixir"),
        ("lib/spotter_web/components/layouts/root.html.heex", "heex", "HEEx"),
        ("src/app/page.tsx", "tsx", "TypeScript"),
        ("src/client.ts", "typescript", "TypeScript"),
        ("web/static/app.mjs", "javascript", "JavaScript"),
        ("memoryapp/lib/extraction.py", "python", "Python"),
        ("C:\\work\\tools\\build.PY", "python", "Python"),
        ("cmd/server/main.go", "go", "Go"),
        ("go.mod", "gomod", "Go module"),
        ("src/lib.rs", "rust", "Rust"),
        ("app/models/invoice.rb", "ruby", "Ruby"),
        ("Gemfile", "ruby", "Ruby"),
        ("src/main/java/com/example/SessionService.java", "java", "Java"),
        ("app/src/main/kotlin/Turn.kt", "kotlin", "Kotlin"),
        ("build.gradle.kts", "kotlin", "Kotlin"),
        ("include/memo/store.h", "c", "C"),
        ("src/store.cpp", "cpp", "C++"),
        ("Controllers/SessionController.cs", "csharp", "C#"),
        ("src/memo_store.erl", "erlang", "Erlang"),
        ("scripts/deploy.sh", "bash", "Shell"),
        ("Dockerfile", "dockerfile", "Dockerfile"),
        ("CMakeLists.txt", "cmake", "CMake"),
        ("requirements-dev.txt", "requirements", "pip requirements"),
        ("config/config.yaml", "yaml", "YAML"),
        ("Cargo.toml", "toml", "TOML"),
        ("package.json", "json", "JSON"),
        ("README.md", "markdown", "Markdown"),
    ],
)
def test_language_of_a_path(path, language, display):
    assert language_of(path) == language
    assert display_name(language) == display


@pytest.mark.parametrize("path", ["LICENSE", "notes.txt", "", "archive.tar.gz", "dir/"])
def test_names_that_say_nothing_have_no_language(path):
    assert language_of(path) is None


def test_each_extension_and_file_name_belongs_to_one_language():
    extensions = [e.lower() for row in LANGUAGES.values() for e in row.extensions]
    filenames = [f for row in LANGUAGES.values() for f in row.filenames]
    assert len(extensions) == len(set(extensions))
    assert len(filenames) == len(set(filenames))
    assert display_name("klingon") == "klingon"


# --- Python ------------------------------------------------------------------------------

# A Claude Code Read result from shared/data/transcripts/claude-code/coverage-test-fix.jsonl,
# prefixes and all.
MATH_UTILS_READ = (
    '     1→"""Math utility functions."""\n'
    "     2→\n"
    "     3→\n"
    "     4→def add_numbers(a: int, b: int) -> int:\n"
    '     5→    """Add two numbers together."""\n'
    "     6→    return a + b\n"
    "     7→\n"
)

# SWE-agent's `open src/marshmallow/fields.py 1474` window (lines 1459-1516 of 1997) from
# shared/data/transcripts/swe-agent: it starts inside a tuple inside TimeDelta.__init__.
FIELDS_WINDOW_START = 1459
FIELDS_WINDOW = '''\
            self.WEEKS,
        )

        if precision not in units:
            msg = 'The precision must be {} or "{}".'.format(
                ", ".join([f'"{each}"' for each in units[:-1]]), units[-1]
            )
            raise ValueError(msg)

        self.precision = precision
        super().__init__(**kwargs)

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None:
            return None
        base_unit = dt.timedelta(**{self.precision: 1})
        return int(value.total_seconds() / base_unit.total_seconds())

    def _deserialize(self, value, attr, data, **kwargs):
        try:
            value = int(value)
        except (TypeError, ValueError) as error:
            raise self.make_error("invalid") from error

        kwargs = {self.precision: value}

        try:
            return dt.timedelta(**kwargs)
        except OverflowError as error:
            raise self.make_error("invalid") from error


class Mapping(Field):
    """An abstract class for objects with key-value pairs.

    :param keys: A field class or instance for dict keys.
    :param values: A field class or instance for dict values.
    :param kwargs: The same keyword arguments that :class:`Field` receives.

    .. note::
        When the structure of nested data is not known, you may omit the
        `keys` and `values` arguments to prevent content validation.

    .. versionadded:: 3.0.0rc4
    """

    mapping_type = dict

    #: Default error messages.
    default_error_messages = {"invalid": "Not a valid mapping type."}

    def __init__(
        self,
        keys: typing.Optional[typing.Union[Field, type]] = None,
        values: typing.Optional[typing.Union[Field, type]] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
'''

PYTHON_MODULE = '''\
"""Session storage.

Example::

    def not_a_definition(x):  # inside a docstring
        return x
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memoryapp.core.models import Agent

DEFAULT_TTL = 3600
_CACHE_SIZE = 128
logger = None


class SessionStore:
    """Keeps sessions in memory."""

    backend_name = "memory"

    def __init__(self, ttl: int = DEFAULT_TTL) -> None:
        self._ttl = ttl

    @property
    def ttl(self) -> int:
        return self._ttl

    @ttl.setter
    def ttl(self, value: int) -> None:
        self._ttl = value

    async def fetch(self, key: str) -> dict | None:
        def normalise(raw: str) -> str:  # local helper: not a definition of the file
            return raw.strip()

        await asyncio.sleep(0)
        return {"key": normalise(key)}

    def _evict(self) -> None:
        pass

    class DoesNotExist(Exception):
        pass


@dataclass(frozen=True)
class _Entry:
    key: str


def open_store(agent: Agent) -> SessionStore:
    return SessionStore()


async def _warm(store: SessionStore) -> None:
    lambda_like = lambda x: x  # noqa: E731
    await store.fetch(lambda_like("k"))
'''


def test_python_read_with_claude_code_prefixes():
    defs = definitions("/tmp/src/math_utils.py", MATH_UTILS_READ)
    assert rows(defs) == [("add_numbers", "function", 4, True, "")]
    assert summarize_definitions(defs) == "add_numbers"


def test_python_module_classes_methods_constants_in_order():
    defs = definitions("memoryapp/core/sessions.py", PYTHON_MODULE)
    assert rows(defs) == [
        ("DEFAULT_TTL", "constant", 17, True, ""),
        ("_CACHE_SIZE", "constant", 18, False, ""),
        ("SessionStore", "class", 22, True, ""),
        ("__init__", "method", 27, True, "SessionStore"),  # dunder: public protocol
        ("ttl", "method", 31, True, "SessionStore"),  # getter and setter: once
        ("fetch", "method", 38, True, "SessionStore"),
        ("_evict", "method", 45, False, "SessionStore"),
        ("DoesNotExist", "class", 48, True, "SessionStore"),
        ("_Entry", "class", 53, False, ""),
        ("open_store", "function", 57, True, ""),
        ("_warm", "function", 61, False, ""),
    ]
    assert "not_a_definition" not in names(defs)
    assert "normalise" not in names(defs)
    assert summarize_definitions(defs) == (
        "SessionStore, DoesNotExist, _Entry; __init__, ttl, fetch, open_store, DEFAULT_TTL,"
        " _evict, _warm, _CACHE_SIZE"
    )


def test_python_window_that_starts_mid_function():
    """The window opens inside a tuple, in a method of a class whose header is not in it:
    the methods are found with no parent, the class after them with its own."""
    read = "".join(
        f"{FIELDS_WINDOW_START + i:6}→{line}\n" for i, line in enumerate(FIELDS_WINDOW.splitlines())
    )
    defs = definitions("/marshmallow/src/marshmallow/fields.py", read)
    assert rows(defs) == [
        ("_serialize", "method", 1471, False, ""),
        ("_deserialize", "method", 1477, False, ""),
        ("Mapping", "class", 1491, True, ""),
        ("__init__", "method", 1510, True, "Mapping"),
    ]
    # Without prefixes the lines count from the start of the text.
    plain = definitions("fields.py", FIELDS_WINDOW)
    assert [d.line for d in plain] == [13, 19, 33, 52]
    assert summarize_definitions(defs) == "Mapping; __init__, _serialize, _deserialize"


def test_python_with_syntax_errors_keeps_the_rest():
    """An unclosed bracket makes the rest of the file one ERROR node for tree-sitter's
    Python grammar; the definitions after it are still found (the broken ones are not)."""
    source = (
        "def first(a):\n"
        "    return a\n"
        "\n"
        "def broken(a, b:\n"
        "    return a +\n"
        "\n"
        "class After:\n"
        '    """Mentions def fake(): in a docstring."""\n'
        "    def method(self):\n"
        "        return 1\n"
        "\n"
        "    def bad(self:\n"
        "        pass\n"
        "\n"
        "    def good(self):\n"
        "        def local():\n"
        "            pass\n"
        "\n"
        "def last():\n"
        "    pass\n"
    )
    assert rows(definitions("app.py", source)) == [
        ("first", "function", 1, True, ""),
        ("After", "class", 7, True, ""),
        ("method", "method", 9, True, "After"),
        ("good", "method", 15, True, "After"),
        ("last", "function", 19, True, ""),
    ]


def test_cat_n_prefixes_are_stripped_and_give_file_lines():
    read = "".join(
        f"{n:6}\t{line}\n"
        for n, line in enumerate(["class Greeter:", "    def hello(self):", "        pass"], 40)
    )
    assert rows(definitions("greeter.py", read)) == [
        ("Greeter", "class", 40, True, ""),
        ("hello", "method", 41, True, "Greeter"),
    ]


# --- Rust --------------------------------------------------------------------------------

# Claude Code's Read of src/lib.rs in shared/data/transcripts/claude-code/python-to-rust-port.
LIB_RS_READ = (
    "     1→pub fn add(left: u64, right: u64) -> u64 {\n"
    "     2→    left + right\n"
    "     3→}\n"
    "     4→\n"
    "     5→#[cfg(test)]\n"
    "     6→mod tests {\n"
    "     7→    use super::*;\n"
    "     8→\n"
    "     9→    #[test]\n"
    "    10→    fn it_works() {\n"
    "    11→        let result = add(2, 2);\n"
    "    12→        assert_eq!(result, 4);\n"
    "    13→    }\n"
    "    14→}\n"
    "    15→\n"
)

RUST_SERVER = """\
use std::sync::Arc;

pub const MAX_TURNS: usize = 200;
static REQUESTS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
}

pub enum Role {
    User,
    Assistant,
}

pub trait Store: Send + Sync {
    fn get(&self, key: &str) -> Option<Session>;
    fn put(&self, session: Session);
}

impl AppState {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    fn touch(&self) {
        fn inner() {}
        inner();
    }
}

impl Store for MemoryStore {
    fn get(&self, key: &str) -> Option<Session> {
        self.map.get(key).cloned()
    }
    fn put(&self, session: Session) {}
}

impl<T: Clone> From<T> for Wrapper<T> {
    fn from(value: T) -> Self {
        Wrapper(value)
    }
}

pub type Result<T> = std::result::Result<T, AppError>;

macro_rules! json_response {
    ($status:expr, $body:expr) => {
        ($status, Json($body))
    };
}

pub(crate) async fn health() -> &'static str {
    "ok"
}

pub mod routes;
"""


def test_rust_read_with_prefixes():
    assert rows(definitions("/tmp/x/src/lib.rs", LIB_RS_READ)) == [
        ("add", "function", 1, True, ""),
        ("tests", "module", 6, False, ""),
        ("it_works", "function", 10, False, "tests"),
    ]


def test_rust_items_impls_and_trait_methods():
    defs = definitions("src/state.rs", RUST_SERVER)
    assert rows(defs) == [
        ("MAX_TURNS", "constant", 3, True, ""),
        ("REQUESTS", "constant", 4, False, ""),
        ("AppState", "struct", 7, True, ""),
        ("Role", "enum", 11, True, ""),
        ("Store", "trait", 16, True, ""),
        ("get", "method", 17, True, "Store"),
        ("put", "method", 18, True, "Store"),
        ("AppState", "impl", 21, True, ""),
        ("new", "method", 22, True, "AppState"),
        ("touch", "method", 26, False, "AppState"),
        ("Store for MemoryStore", "impl", 32, True, ""),
        ("get", "method", 33, True, "MemoryStore"),
        ("put", "method", 36, True, "MemoryStore"),
        ("From<T> for Wrapper<T>", "impl", 39, True, ""),
        ("from", "method", 40, True, "Wrapper"),
        ("Result", "type", 45, True, ""),
        ("json_response", "macro", 47, True, ""),
        ("health", "function", 53, False, ""),  # pub(crate) is not the crate's API
        ("routes", "module", 57, True, ""),
    ]


# --- Elixir ------------------------------------------------------------------------------

LIVE_VIEW = '''\
defmodule SpotterWeb.TranscriptLive.Show do
  @moduledoc """
  Shows one transcript, a page of turns at a time.

      def example(a), do: a
  """
  use SpotterWeb, :live_view

  alias Spotter.Transcripts
  alias Spotter.Transcripts.Transcript

  @type row :: %{id: integer(), text: String.t()}
  @typep page :: pos_integer()

  @impl true
  def mount(%{"id" => id}, _session, socket) do
    if connected?(socket), do: Transcripts.subscribe(id)
    {:ok, assign(socket, transcript: Transcripts.get!(id), page: 1)}
  end

  @impl true
  def handle_params(params, _url, socket) do
    {:noreply, apply_action(socket, socket.assigns.live_action, params)}
  end

  @impl true
  def handle_event("next_page", _params, socket) do
    {:noreply, update(socket, :page, &(&1 + 1))}
  end

  def handle_event("prev_page", _params, %{assigns: %{page: 1}} = socket) do
    {:noreply, socket}
  end

  def handle_event("prev_page", _params, socket) do
    {:noreply, update(socket, :page, &(&1 - 1))}
  end

  @impl true
  def handle_info({:turn_added, turn}, socket) do
    {:noreply, stream_insert(socket, :turns, turn)}
  end

  @doc "Renders the header of a transcript."
  attr :transcript, Transcript, required: true

  def render_header(assigns) do
    ~H"""
    <h1 class="text-lg font-semibold">{@transcript.title}</h1>
    """
  end

  def build_rows(turns, opts \\\\ []) do
    limit = Keyword.get(opts, :limit, 50)
    turns |> Enum.take(limit) |> Enum.map(&to_row/1)
  end

  def format_time(nil), do: "—"
  def format_time(%DateTime{} = at), do: Calendar.strftime(at, "%H:%M:%S")

  def page_size, do: 50

  defp apply_action(socket, :show, _params), do: assign(socket, :page_title, "Transcript")
  defp apply_action(socket, :edit, _params), do: assign(socket, :page_title, "Edit")

  defp to_row(%{id: id, text: text}) when is_binary(text) do
    %{id: id, text: String.slice(text, 0, 120)}
  end

  defmacro with_timing(label, do: block) do
    quote do
      def unquote(:"timed_#{label}")(), do: unquote(block)
      defp generated_helper(x), do: x
    end
  end

  defdelegate subscribe(id), to: Transcripts
end

defprotocol Spotter.Exportable do
  @doc "Exports the item as Markdown."
  def to_markdown(item)
end

defimpl Spotter.Exportable, for: Spotter.Transcripts.Transcript do
  def to_markdown(transcript), do: "# " <> transcript.title
end
'''

ELIXIR_STRUCTS = """\
defmodule Spotter.Transcripts.Turn do
  defstruct [:id, :role, :text, at: nil]

  defguard is_role(value) when value in [:user, :assistant]
  defguardp is_text(value) when is_binary(value)

  defmodule Error do
    defexception [:message]
  end

  defmacrop log(msg), do: quote(do: IO.puts(unquote(msg)))

  def left <~> right, do: {left, right}

  defimpl String.Chars do
    def to_string(turn), do: turn.text
  end
end
"""


def test_elixir_live_view_module():
    defs = definitions("lib/spotter_web/live/transcript_live/show.ex", LIVE_VIEW)
    module = "SpotterWeb.TranscriptLive.Show"
    assert rows(defs) == [
        (module, "module", 1, True, ""),
        ("row/0", "type", 12, True, module),
        ("page/0", "type", 13, False, module),
        ("mount/3", "function", 16, True, module),
        ("handle_params/3", "function", 22, True, module),
        ("handle_event/3", "function", 27, True, module),  # three clauses, once
        ("handle_info/2", "function", 40, True, module),
        ("render_header/1", "function", 47, True, module),
        ("build_rows/2", "function", 53, True, module),  # a default argument counts
        ("format_time/1", "function", 58, True, module),
        ("page_size/0", "function", 61, True, module),
        ("apply_action/3", "function", 63, False, module),
        ("to_row/1", "function", 66, False, module),  # a guard is not an argument
        ("with_timing/2", "macro", 70, True, module),
        ("subscribe/1", "function", 77, True, module),
        ("Spotter.Exportable", "protocol", 80, True, ""),
        ("to_markdown/1", "function", 82, True, "Spotter.Exportable"),
        ("Spotter.Exportable for Spotter.Transcripts.Transcript", "impl", 85, True, ""),
        (
            "to_markdown/1",
            "function",
            86,
            True,
            "Spotter.Exportable for Spotter.Transcripts.Transcript",
        ),
    ]
    # The heredoc's `def example` and the `def`s generated inside `quote` are not the
    # module's definitions.
    assert not {"example/1", "generated_helper/1"} & set(names(defs))
    assert summarize_definitions(defs) == (
        "SpotterWeb.TranscriptLive.Show, Spotter.Exportable, Spotter.Exportable for"
        " Spotter.Transcripts.Transcript; row/0, mount/3, handle_params/3, handle_event/3,"
        " handle_info/2, render_header/1, build_rows/2, format_time/1, page_size/0"
        " (+6 more)"
    )


def test_elixir_structs_guards_nested_modules_and_operators():
    defs = definitions("lib/spotter/transcripts/turn.ex", ELIXIR_STRUCTS)
    turn = "Spotter.Transcripts.Turn"
    assert rows(defs) == [
        (turn, "module", 1, True, ""),
        (f"%{turn}{{}}", "struct", 2, True, turn),
        ("is_role/1", "macro", 4, True, turn),
        ("is_text/1", "macro", 5, False, turn),
        (f"{turn}.Error", "module", 7, True, turn),
        (f"%{turn}.Error{{}}", "struct", 8, True, f"{turn}.Error"),
        ("log/1", "macro", 11, False, turn),
        ("<~>/2", "function", 13, True, turn),
        (f"String.Chars for {turn}", "impl", 15, True, turn),
        ("to_string/1", "function", 16, True, f"String.Chars for {turn}"),
    ]


def test_elixir_window_that_starts_inside_a_function():
    window = "\n".join(LIVE_VIEW.splitlines()[53:68])  # from inside build_rows/2
    defs = definitions("show.ex", window)
    assert rows(defs) == [
        ("format_time/1", "function", 5, True, ""),
        ("page_size/0", "function", 8, True, ""),
        ("apply_action/3", "function", 10, False, ""),
        ("to_row/1", "function", 13, False, ""),
    ]


def test_heex_templates_define_nothing():
    assert definitions("show.html.heex", "<div :for={row <- @rows}>{row.text}</div>\n") == []


# --- JavaScript / TypeScript -------------------------------------------------------------

TS_CLIENT = """\
import { z } from "zod";
import type { Session } from "./types";

export interface TurnPayload {
  role: "user" | "assistant";
  content: string;
}

export type SessionKey = string;
type RetryPolicy = { attempts: number; backoffMs: number };

export enum SessionStatus {
  Open = "open",
  Closed = "closed",
}

const DEFAULT_RETRY: RetryPolicy = { attempts: 3, backoffMs: 250 };

export const turnSchema = z.object({ role: z.string(), content: z.string() });

export const fetchSession = async (key: SessionKey): Promise<Session> => {
  const res = await fetch(`/api/sessions/${key}`);
  const parse = (body: unknown) => turnSchema.parse(body);
  return parse(await res.json());
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class MemoryClient {
  #token: string;

  constructor(private readonly baseUrl: string, token: string) {
    this.#token = token;
  }

  async postTurn(key: SessionKey, turn: TurnPayload): Promise<void> {
    await this.request(`/sessions/${key}/turns`, turn);
  }

  private async request(path: string, body: unknown): Promise<Response> {
    return fetch(this.baseUrl + path, { method: "POST", body: JSON.stringify(body) });
  }

  static fromEnv(): MemoryClient {
    return new MemoryClient(process.env.MEMORY_URL ?? "", process.env.MEMORY_TOKEN ?? "");
  }
}

function withRetry<T>(fn: () => Promise<T>, policy = DEFAULT_RETRY): Promise<T> {
  function attempt(n: number): Promise<T> {
    const retry = () => sleep(policy.backoffMs).then(() => attempt(n - 1));
    return fn().catch((e) => (n > 1 ? retry() : Promise.reject(e)));
  }
  return attempt(policy.attempts);
}

export default function createClient(baseUrl: string): MemoryClient {
  return new MemoryClient(baseUrl, "");
}

export { withRetry };
"""


def test_typescript_exported_and_local_items():
    defs = definitions("src/lib/memory-client.ts", TS_CLIENT)
    assert rows(defs) == [
        ("TurnPayload", "interface", 4, True, ""),
        ("SessionKey", "type", 9, True, ""),
        ("RetryPolicy", "type", 10, False, ""),
        ("SessionStatus", "enum", 12, True, ""),
        ("turnSchema", "constant", 19, True, ""),
        ("fetchSession", "function", 21, True, ""),
        ("sleep", "function", 27, False, ""),
        ("MemoryClient", "class", 29, True, ""),
        ("constructor", "method", 32, True, "MemoryClient"),
        ("postTurn", "method", 36, True, "MemoryClient"),
        ("request", "method", 40, False, "MemoryClient"),
        ("fromEnv", "method", 44, True, "MemoryClient"),
        ("withRetry", "function", 49, True, ""),  # exported by `export { withRetry }`
        ("createClient", "function", 57, True, ""),
    ]
    assert not {"DEFAULT_RETRY", "parse", "attempt"} & set(names(defs))


def test_javascript_commonjs_exports_and_tsx_components():
    js = (
        "const express = require('express');\n"
        "function createApp(store) {\n"
        "  const app = express();\n"
        "  return app;\n"
        "}\n"
        "function internal() {}\n"
        "const handler = function (req, res) { res.end(); };\n"
        "module.exports = { createApp, handler: handler };\n"
    )
    assert rows(definitions("server.js", js)) == [
        ("createApp", "function", 2, True, ""),
        ("internal", "function", 6, False, ""),
        ("handler", "function", 7, True, ""),
    ]
    tsx = (
        "export function SessionList({ sessions }: Props) {\n"
        "  return <ul>{sessions.map((s) => <li key={s.key}>{s.key}</li>)}</ul>;\n"
        "}\n"
        "const Row = ({ turn }: { turn: Turn }) => <li>{turn.content}</li>;\n"
    )
    assert rows(definitions("app/sessions/page.tsx", tsx)) == [
        ("SessionList", "function", 1, True, ""),
        ("Row", "function", 4, False, ""),
    ]


# --- Go ----------------------------------------------------------------------------------

GO_STORE = """\
package store

import (
	"context"
	"database/sql"
	"errors"
)

const DefaultLimit = 50

var ErrNotFound = errors.New("store: session not found")

type Session struct {
	Key       string
	Turns     int
	UpdatedAt time.Time
}

type Store interface {
	Get(ctx context.Context, key string) (*Session, error)
	Put(ctx context.Context, s *Session) error
}

type PgStore struct {
	db *sql.DB
}

type sessionKey string

func NewPgStore(db *sql.DB) *PgStore {
	return &PgStore{db: db}
}

func (s *PgStore) Get(ctx context.Context, key string) (*Session, error) {
	row := s.db.QueryRowContext(ctx, "SELECT key FROM sessions WHERE key = $1", key)
	var out Session
	if err := row.Scan(&out.Key); errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return &out, nil
}

func (s *PgStore) Put(ctx context.Context, session *Session) error {
	return s.exec(ctx, session)
}

func (s PgStore) exec(ctx context.Context, session *Session) error {
	helper := func() error { return nil }
	return helper()
}

func Map[T, U any](xs []T, f func(T) U) []U {
	return nil
}
"""


def test_go_funcs_methods_with_receivers_and_types():
    assert rows(definitions("internal/store/store.go", GO_STORE)) == [
        ("DefaultLimit", "constant", 9, True, ""),
        ("ErrNotFound", "constant", 11, True, ""),
        ("Session", "struct", 13, True, ""),
        ("Store", "interface", 19, True, ""),
        ("Get", "method", 20, True, "Store"),
        ("Put", "method", 21, True, "Store"),
        ("PgStore", "struct", 24, True, ""),
        ("sessionKey", "type", 28, False, ""),
        ("NewPgStore", "function", 30, True, ""),
        ("Get", "method", 34, True, "PgStore"),
        ("Put", "method", 43, True, "PgStore"),
        ("exec", "method", 47, False, "PgStore"),
        ("Map", "function", 52, True, ""),
    ]


# --- Ruby --------------------------------------------------------------------------------

RUBY_MODEL = """\
# frozen_string_literal: true

module Billing
  class Invoice < ApplicationRecord
    include Comparable

    STATUSES = %w[draft open paid void].freeze

    belongs_to :account
    has_many :line_items, dependent: :destroy

    scope :unpaid, -> { where.not(status: "paid") }

    def self.for_account(account)
      where(account: account).order(created_at: :desc)
    end

    class << self
      def next_number
        maximum(:number).to_i + 1
      end
    end

    def total
      line_items.sum(&:amount)
    end

    def paid?
      status == "paid"
    end

    def <=>(other)
      number <=> other.number
    end

    protected

    def currency_code
      account.currency
    end

    private

    def recalculate!
      update!(total_cents: line_items.sum(:amount_cents))
    end

    public

    def void!
      update!(status: "void")
    end
  end
end
"""


def test_ruby_modules_classes_class_methods_and_visibility_sections():
    billing, invoice = "Billing", "Billing::Invoice"
    assert rows(definitions("app/models/billing/invoice.rb", RUBY_MODEL)) == [
        (billing, "module", 3, True, ""),
        (invoice, "class", 4, True, billing),
        ("STATUSES", "constant", 7, True, invoice),
        ("self.for_account", "method", 14, True, invoice),
        ("self.next_number", "method", 19, True, invoice),
        ("total", "method", 24, True, invoice),
        ("paid?", "method", 28, True, invoice),
        ("<=>", "method", 32, True, invoice),
        ("currency_code", "method", 38, False, invoice),
        ("recalculate!", "method", 44, False, invoice),
        ("void!", "method", 50, True, invoice),
    ]


# --- Java and Kotlin ---------------------------------------------------------------------

JAVA_SERVICE = """\
package com.example.memory.sessions;

import java.util.List;
import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Transactional;

@Service
public class SessionService implements AutoCloseable {
    private static final int MAX_TURNS = 200;
    private final SessionRepository repository;

    public SessionService(SessionRepository repository) {
        this.repository = repository;
    }

    @Transactional(readOnly = true)
    public List<Session> findActive(String agent) {
        Runnable audit = new Runnable() {
            public void run() {}
        };
        return repository.findByAgentAndClosedFalse(agent);
    }

    protected void evictExpired() {}

    private Session load(String key) {
        return repository.findById(key).orElseThrow();
    }

    @Override
    public void close() {}

    public interface Listener {
        void onTurn(Turn turn);
    }

    public record Turn(String role, String content) {}

    enum State { OPEN, CLOSED }
}
"""

KOTLIN_MODELS = """\
package com.example.memory

import kotlinx.coroutines.flow.Flow

data class Turn(val role: String, val content: String, val tokens: Int = 0)

sealed interface SessionEvent {
    data class TurnAdded(val turn: Turn) : SessionEvent
    object Cleared : SessionEvent
}

enum class Role { USER, ASSISTANT }

class SessionRepository(private val dao: SessionDao) {
    fun turns(key: String): Flow<List<Turn>> = dao.turns(key)

    suspend fun add(key: String, turn: Turn) {
        val normalized = turn.copy(content = turn.content.trim())
        dao.insert(key, normalized)
    }

    private fun cacheKey(key: String) = "session:$key"

    companion object {
        fun inMemory(): SessionRepository = SessionRepository(InMemoryDao())
    }
}

fun String.toSessionKey(): String = lowercase().replace(' ', '-')

private fun log(message: String) = println(message)

typealias Turns = List<Turn>
"""


def test_java_classes_methods_and_nested_types():
    service = "SessionService"
    assert rows(definitions("src/main/java/com/example/SessionService.java", JAVA_SERVICE)) == [
        (service, "class", 8, True, ""),  # the line of its name, not of @Service
        (service, "constructor", 12, True, service),
        ("findActive", "method", 17, True, service),  # below its @Transactional
        ("evictExpired", "method", 24, True, service),
        ("load", "method", 26, False, service),
        ("close", "method", 31, True, service),
        ("Listener", "interface", 33, True, service),
        ("onTurn", "method", 34, True, "Listener"),
        ("Turn", "record", 37, True, service),
        ("State", "enum", 39, False, service),
    ]


def test_kotlin_data_classes_objects_and_extension_functions():
    assert rows(definitions("src/main/kotlin/com/example/memory/Models.kt", KOTLIN_MODELS)) == [
        ("Turn", "class", 5, True, ""),
        ("SessionEvent", "interface", 7, True, ""),
        ("TurnAdded", "class", 8, True, "SessionEvent"),
        ("Cleared", "object", 9, True, "SessionEvent"),
        ("Role", "enum", 12, True, ""),
        ("SessionRepository", "class", 14, True, ""),
        ("turns", "method", 15, True, "SessionRepository"),
        ("add", "method", 17, True, "SessionRepository"),
        ("cacheKey", "method", 22, False, "SessionRepository"),
        ("inMemory", "method", 25, True, "SessionRepository"),
        ("String.toSessionKey", "function", 29, True, ""),
        ("log", "function", 31, False, ""),
        ("Turns", "type", 33, True, ""),
    ]


# --- C and C++ ---------------------------------------------------------------------------

C_HEADER = """\
#ifndef MEMO_STORE_H
#define MEMO_STORE_H

#include <stddef.h>

#define MEMO_MAX_KEY 64
#define MEMO_MIN(a, b) ((a) < (b) ? (a) : (b))

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memo_store memo_store;

typedef struct {
    const char *key;
    size_t len;
} memo_entry;

struct memo_config {
    int ttl_seconds;
    int (*on_evict)(const memo_entry *entry);
};

enum memo_status { MEMO_OK = 0, MEMO_NOT_FOUND, MEMO_IO_ERROR };

typedef void (*memo_log_fn)(void *ctx, const char *message);

memo_store *memo_open(const char *path, const struct memo_config *config);
int memo_get(memo_store *store, const char *key, memo_entry *out);
void memo_close(memo_store *store);
extern const char *memo_version;

static inline int memo_ok(int rc) { return rc == MEMO_OK; }

#ifdef __cplusplus
}
#endif

#endif /* MEMO_STORE_H */
"""

CPP_SOURCE = """\
#include "memo/store.hpp"

#include <string>

namespace memo {
namespace detail {
std::size_t hash(const std::string& key);
}  // namespace detail

class Store : public Closeable {
public:
    explicit Store(std::string path);
    ~Store() override;
    bool get(const std::string& key, std::string* out) const;
    static Store open(const char* path) { return Store(path); }

private:
    void evict();
    std::string path_;
};

struct Entry {
    std::string key;
    std::size_t size() const { return key.size(); }
};

template <typename T>
T clamp(T value, T lo, T hi) {
    return value < lo ? lo : (hi < value ? hi : value);
}

Store::Store(std::string path) : path_(std::move(path)) {}

bool Store::get(const std::string& key, std::string* out) const {
    auto lookup = [&](const std::string& k) { return k.empty(); };
    return !lookup(key) && out != nullptr;
}

enum class Mode { Fast, Safe };
using Key = std::string;
}  // namespace memo

int main(int argc, char** argv) { return 0; }
"""


def test_c_header_declarations_structs_typedefs_and_macros():
    assert rows(definitions("include/memo/store.h", C_HEADER)) == [
        ("MEMO_MIN", "macro", 7, True, ""),
        ("memo_store", "type", 13, True, ""),
        ("memo_entry", "struct", 15, True, ""),
        ("memo_config", "struct", 20, True, ""),
        ("memo_status", "enum", 25, True, ""),
        ("memo_log_fn", "type", 27, True, ""),
        ("memo_open", "function", 29, True, ""),
        ("memo_get", "function", 30, True, ""),
        ("memo_close", "function", 31, True, ""),
        ("memo_ok", "function", 34, False, ""),
    ]


def test_cpp_namespaces_classes_access_sections_and_out_of_line_methods():
    assert rows(definitions("src/store.cpp", CPP_SOURCE)) == [
        ("memo", "namespace", 5, True, ""),
        ("memo::detail", "namespace", 6, True, "memo"),
        ("hash", "function", 7, True, "memo::detail"),
        ("Store", "class", 10, True, "memo"),
        ("Store", "constructor", 12, True, "Store"),
        ("~Store", "constructor", 13, True, "Store"),
        ("get", "method", 14, True, "Store"),
        ("open", "method", 15, True, "Store"),
        ("evict", "method", 18, False, "Store"),
        ("Entry", "struct", 22, True, "memo"),
        ("size", "method", 24, True, "Entry"),
        ("clamp", "function", 28, True, "memo"),
        ("Mode", "enum", 39, True, "memo"),
        ("Key", "type", 40, True, "memo"),
        ("main", "function", 43, True, ""),
    ]


def test_a_cpp_header_with_h_extension_is_read_as_cpp():
    header = "#pragma once\nnamespace memo {\nclass Cache {\npublic:\n  void clear();\n};\n}\n"
    assert rows(definitions("include/memo/cache.h", header)) == [
        ("memo", "namespace", 2, True, ""),
        ("Cache", "class", 3, True, "memo"),
        ("clear", "method", 5, True, "Cache"),
    ]


# --- the languages covered more cheaply ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        (
            "Controllers/SessionController.cs",
            "namespace Memo.Api;\n"
            "public class SessionController : ControllerBase {\n"
            "    private readonly IStore _store;\n"
            "    public SessionController(IStore store) { _store = store; }\n"
            '    [HttpGet("{key}")]\n'
            "    public async Task<IActionResult> Get(string key) => Ok(await _store.Find(key));\n"
            "    void Audit() {}\n"
            "}\n"
            "public interface IStore { Task<Session> Find(string key); }\n"
            "internal record Turn(string Role, string Content);\n",
            [
                ("Memo.Api", "namespace", 1, True, ""),
                ("SessionController", "class", 2, True, ""),
                ("SessionController", "constructor", 4, True, "SessionController"),
                ("Get", "method", 6, True, "SessionController"),
                ("Audit", "method", 7, False, "SessionController"),
                ("IStore", "interface", 9, True, ""),
                ("Find", "method", 9, True, "IStore"),
                ("Turn", "record", 10, True, ""),
            ],
        ),
        (
            "app/Http/Controllers/SessionController.php",
            "<?php\n"
            "namespace App\\Http\\Controllers;\n"
            "class SessionController extends Controller\n"
            "{\n"
            "    public function index(Request $request) { return view('sessions'); }\n"
            "    private function authorizeAgent(Agent $agent): void {}\n"
            "}\n"
            "function session_key(string $raw): string { return trim($raw); }\n",
            [
                ("App\\Http\\Controllers", "namespace", 2, True, ""),
                ("SessionController", "class", 3, True, ""),
                ("index", "method", 5, True, "SessionController"),
                ("authorizeAgent", "method", 6, False, "SessionController"),
                ("session_key", "function", 8, True, ""),
            ],
        ),
        (
            "Sources/Memo/Store.swift",
            "import Foundation\n"
            "public struct Turn: Codable {\n"
            "    let role: String\n"
            "    func render() -> String { role }\n"
            "}\n"
            "protocol SessionStore { func find(key: String) -> Turn? }\n"
            "final class MemoryStore: SessionStore {\n"
            "    init() {}\n"
            "    func find(key: String) -> Turn? { nil }\n"
            "    private func evict() {}\n"
            "}\n",
            [
                ("Turn", "struct", 2, True, ""),
                ("render", "method", 4, True, "Turn"),
                ("SessionStore", "protocol", 6, True, ""),
                ("find", "method", 6, True, "SessionStore"),
                ("MemoryStore", "class", 7, True, ""),
                ("init", "method", 8, True, "MemoryStore"),
                ("find", "method", 9, True, "MemoryStore"),
                ("evict", "method", 10, False, "MemoryStore"),
            ],
        ),
        (
            "src/main/scala/memo/Store.scala",
            "package memo\n"
            "case class Turn(role: String, content: String)\n"
            "trait Store { def get(key: String): Option[Turn] }\n"
            "object MemoryStore extends Store {\n"
            "  def get(key: String): Option[Turn] = None\n"
            "  private def evict(): Unit = ()\n"
            "}\n",
            [
                ("Turn", "class", 2, True, ""),
                ("Store", "trait", 3, True, ""),
                ("get", "method", 3, True, "Store"),
                ("MemoryStore", "object", 4, True, ""),
                ("get", "method", 5, True, "MemoryStore"),
                ("evict", "method", 6, False, "MemoryStore"),
            ],
        ),
        (
            "lua/memo/init.lua",
            "local M = {}\n"
            "function M.setup(opts) M.opts = opts end\n"
            "function M:render() return self.opts end\n"
            "local function helper() end\n"
            "return M\n",
            [
                ("M.setup", "function", 2, True, ""),
                ("M:render", "function", 3, True, ""),
                ("helper", "function", 4, False, ""),
            ],
        ),
        (
            "src/memo_store.erl",
            "-module(memo_store).\n"
            "-behaviour(gen_server).\n"
            "-export([start_link/0, get/1]).\n"
            "-record(state, {table}).\n"
            "start_link() -> gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).\n"
            "get(Key) -> gen_server:call(?MODULE, {get, Key}).\n"
            "handle_call({get, Key}, _From, State) -> {reply, lookup(Key, State), State};\n"
            "handle_call(_Other, _From, State) -> {reply, error, State}.\n",
            [
                ("memo_store", "module", 1, True, ""),
                ("#state{}", "record", 4, True, "memo_store"),
                ("start_link/0", "function", 5, True, "memo_store"),
                ("get/1", "function", 6, True, "memo_store"),
                ("handle_call/3", "function", 7, False, "memo_store"),
            ],
        ),
        (
            "scripts/deploy.sh",
            "#!/usr/bin/env bash\nset -euo pipefail\nbuild() {\n  make release\n}\n"
            "function deploy {\n  build && rsync -a _build/ host:/srv/\n}\ndeploy\n",
            [("build", "function", 3, True, ""), ("deploy", "function", 6, True, "")],
        ),
    ],
)
def test_more_languages(path, source, expected):
    assert rows(definitions(path, source)) == expected


# --- robustness --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("app.py", ""),
        ("app.py", "   \n\n\t\n"),
        ("lib/a.ex", "# just a comment\n"),
        ("notes.txt", "def looks_like_python(): pass\n"),
        ("LICENSE", "class NotCode:\n    pass\n"),
        ("data.bin", "\x00\x01\x02def x"),
        ("config.yaml", "def: 1\nclass: 2\n"),
        ("README.md", "# defmodule Foo do\n"),
    ],
)
def test_nothing_to_name(path, source):
    assert definitions(path, source) == []


def test_garbage_and_broken_text_never_raise():
    broken = [
        "def (((:\n  ]]]} end end end\n",
        "defmodule do def do end\n",
        "\x00" * 100 + "fn main() {",
        "}}}}}}}}}{{{{{{ class",
        "\ud800 lone surrogate def x(): pass",
        "    \n" * 50 + "        return x\n",
    ]
    for source in broken:
        for path in ("a.py", "a.ex", "a.rs", "a.ts", "a.go", "a.rb", "a.c", "a.cpp", "a.kt"):
            result = definitions(path, source)
            assert isinstance(result, list)


@settings(max_examples=60, deadline=None)
@given(
    source=st.text(max_size=300),
    path=st.sampled_from(["a.py", "a.ex", "a.ts", "a.rs", "a.go", "a.rb", "a.java", "a.erl"]),
)
def test_any_text_gives_a_list_of_definitions(source, path):
    result = definitions(path, source)
    assert all(isinstance(d, Definition) and d.name and d.line >= 1 for d in result)


WINDOW_SOURCES = {
    "show.ex": LIVE_VIEW,
    "turn.ex": ELIXIR_STRUCTS,
    "sessions.py": PYTHON_MODULE,
    "fields.py": FIELDS_WINDOW,
    "client.ts": TS_CLIENT,
    "store.go": GO_STORE,
    "state.rs": RUST_SERVER,
    "invoice.rb": RUBY_MODEL,
    "SessionService.java": JAVA_SERVICE,
    "Models.kt": KOTLIN_MODELS,
    "store.h": C_HEADER,
    "store.cpp": CPP_SOURCE,
}


@settings(max_examples=150, deadline=None)
@given(
    path=st.sampled_from(sorted(WINDOW_SOURCES)),
    start=st.integers(min_value=0, max_value=90),
    length=st.integers(min_value=1, max_value=60),
)
def test_any_window_of_a_real_file_names_what_is_on_its_lines(path, start, length):
    """What an agent reads is a window of lines: whatever is named must be written on the
    line it is reported at (the window's own numbering), however the window cuts."""
    lines = WINDOW_SOURCES[path].splitlines()[start : start + length]
    for definition in definitions(path, "\n".join(lines)):
        assert 1 <= definition.line <= len(lines)
        words = re.findall(r"[A-Za-z_][\w?!=]*", definition.name.removeprefix("self."))
        if definition.name.startswith(("%", "#")) or not words:
            continue  # an Elixir struct is named after its module; an operator has no word
        line = lines[definition.line - 1]
        if definition.kind == "struct" and line.strip() == "typedef struct {":
            line = "\n".join(lines[definition.line - 1 :])  # named at its closing brace
        assert words[0] in line or words[-1] in line, (definition, line)


def test_huge_input_is_capped():
    block = "".join(f"def handler_{i}(request):\n    return {i}\n\n\n" for i in range(40_000))
    assert len(block.encode()) > 2 * MAX_BYTES
    started = time.perf_counter()
    defs = definitions("generated.py", block)
    elapsed = time.perf_counter() - started
    assert defs[0] == Definition("handler_0", "function", 1, True)
    # Only the head is parsed: everything named comes from the first MAX_BYTES.
    per_handler = len(b"def handler_10000(request):\n    return 10000\n\n\n")
    assert MAX_BYTES // per_handler // 2 < len(defs) < MAX_BYTES // 30
    assert defs[-1].name != "handler_39999"
    assert elapsed < 5  # generous: a runaway parse of the whole text would also pass


def test_parsers_are_per_thread_and_give_the_same_answer():
    expected = rows(definitions("show.ex", LIVE_VIEW))
    barrier = threading.Barrier(4)

    def run(_):
        barrier.wait()
        return [rows(definitions("show.ex", LIVE_VIEW)) for _ in range(5)]

    with ThreadPoolExecutor(4) as pool:
        for results in pool.map(run, range(4)):
            assert all(result == expected for result in results)


# --- summaries ---------------------------------------------------------------------------


def test_summary_lists_containers_then_public_then_private_with_a_count_of_the_rest():
    defs = [
        Definition("Spotter.Transcripts", "module", 1, True),
        Definition("format_time/1", "function", 5, False, "Spotter.Transcripts"),
        Definition("render_header/1", "function", 9, True, "Spotter.Transcripts"),
        Definition("build_rows/2", "function", 20, True, "Spotter.Transcripts"),
        *(Definition(f"helper_{i}/0", "function", 30 + i, False) for i in range(8)),
    ]
    assert summarize_definitions(defs, limit=4) == (
        "Spotter.Transcripts; render_header/1, build_rows/2, format_time/1 (+8 more)"
    )
    assert summarize_definitions(defs, limit=1) == "Spotter.Transcripts (+11 more)"
    assert summarize_definitions([]) == ""


def test_summary_names_the_parent_of_methods_when_there_are_several():
    defs = definitions("src/state.rs", RUST_SERVER)
    assert summarize_definitions(defs, limit=10) == (
        "AppState, Role, Store, Store for MemoryStore, From<T> for Wrapper<T>, routes;"
        " Store.get, Store.put, AppState.new, MemoryStore.get (+8 more)"
    )


# --- manifests ---------------------------------------------------------------------------

MIX_EXS = """\
defmodule Spotter.MixProject do
  use Mix.Project

  @version "0.1.0"

  def project do
    [
      app: :spotter,
      version: @version,
      elixir: "~> 1.15",
      elixirc_paths: elixirc_paths(Mix.env()),
      start_permanent: Mix.env() == :prod,
      aliases: aliases(),
      deps: deps()
    ]
  end

  def application do
    [mod: {Spotter.Application, []}, extra_applications: [:logger, :runtime_tools]]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  defp deps do
    [
      {:phoenix, "~> 1.7.14"},
      {:phoenix_ecto, "~> 4.5"},
      {:ecto_sql, "~> 3.10"},
      {:postgrex, ">= 0.0.0"},
      {:phoenix_html, "~> 4.1"},
      {:phoenix_live_reload, "~> 1.2", only: :dev},
      # {:phoenix_live_dashboard, "~> 0.8.3"},
      {:phoenix_live_view, "~> 1.0.0"},
      {:floki, ">= 0.30.0", only: :test},
      {:esbuild, "~> 0.8", runtime: Mix.env() == :dev},
      {:heroicons,
       github: "tailwindlabs/heroicons",
       tag: "v2.1.1",
       sparse: "optimized",
       app: false,
       compile: false,
       depth: 1},
      {:jason, "~> 1.2"},
      {:bandit, "~> 1.5"},
      {:credo, "~> 1.7", only: [:dev, :test], runtime: false}
    ]
  end

  defp aliases do
    [
      setup: ["deps.get", "ecto.setup"],
      test: ["ecto.create --quiet", "ecto.migrate --quiet", "test"]
    ]
  end
end
"""
MIX_DEPS = [
    "phoenix",
    "phoenix_ecto",
    "ecto_sql",
    "postgrex",
    "phoenix_html",
    "phoenix_live_reload",
    "phoenix_live_view",
    "floki",
    "esbuild",
    "heroicons",
    "jason",
    "bandit",
    "credo",
]

PACKAGE_JSON = """\
{
  "name": "memory-dashboard",
  "version": "0.3.2",
  "private": true,
  "packageManager": "pnpm@9.12.0",
  "scripts": {
    "dev": "next dev --turbopack",
    "build": "next build",
    "lint": "next lint",
    "test": "vitest run"
  },
  "dependencies": {
    "next": "15.0.3",
    "react": "19.0.0-rc-66855b96-20241106",
    "react-dom": "19.0.0-rc-66855b96-20241106",
    "@tanstack/react-query": "^5.59.20",
    "zod": "^3.23.8"
  },
  "devDependencies": {
    "@types/node": "^20",
    "@types/react": "^18",
    "eslint-config-next": "15.0.3",
    "typescript": "^5",
    "vitest": "^2.1.4"
  },
  "engines": { "node": ">=20" }
}
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "ledger"
version = "2.4.0"
requires-python = ">=3.12"
dependencies = [
    "Django>=5.1,<5.2",
    "djangorestframework>=3.15",
    "celery[redis]>=5.4",
    "psycopg[binary]>=3.2",
    "django-environ",
]

[project.optional-dependencies]
test = ["pytest>=8", "pytest-django>=4.9", "factory-boy"]

[tool.pytest.ini_options]
DJANGO_SETTINGS_MODULE = "ledger.settings"
"""

POETRY = """\
[tool.poetry]
name = "scraper"
version = "0.9.1"

[tool.poetry.dependencies]
python = "^3.11"
fastapi = "^0.115"
SQLAlchemy = {version = "^2.0", extras = ["asyncio"]}

[tool.poetry.group.dev.dependencies]
pytest = "^8.3"
"""

CARGO_TOML = """\
[package]
name = "memo-server"
version = "0.2.0"
edition = "2021"

[dependencies]
axum = { version = "0.7", features = ["macros"] }
tokio = { version = "1", features = ["full"] }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
tracing = "0.1"

[dev-dependencies]
tower = { version = "0.5", features = ["util"] }

[[bin]]
name = "memo"
path = "src/main.rs"
"""

GO_MOD = """\
module github.com/example/memo

go 1.22

require (
	github.com/gin-gonic/gin v1.10.0
	github.com/jackc/pgx/v5 v5.7.1
	golang.org/x/sync v0.8.0 // indirect
)

require github.com/labstack/echo/v4 v4.12.0
"""

GEMFILE = """\
source "https://rubygems.org"

ruby "3.3.4"

gem "rails", "~> 7.2.1"
gem "pg", "~> 1.5"
gem "puma", ">= 5.0"
# gem "redis", ">= 4.0.1"

group :development, :test do
  gem "rspec-rails", "~> 7.0"
  gem "debug", platforms: %i[mri windows]
end
"""

BUILD_GRADLE_KTS = """\
plugins {
    id("org.springframework.boot") version "3.3.4"
    id("io.spring.dependency-management") version "1.1.6"
    kotlin("jvm") version "1.9.25"
}

version = "0.0.1-SNAPSHOT"

dependencies {
    implementation("org.springframework.boot:spring-boot-starter-web")
    implementation("com.fasterxml.jackson.module:jackson-module-kotlin")
    runtimeOnly("org.postgresql:postgresql")
    testImplementation("org.springframework.boot:spring-boot-starter-test")
}
"""

POM_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <parent>
    <groupId>org.springframework.boot</groupId>
    <artifactId>spring-boot-starter-parent</artifactId>
    <version>3.3.4</version>
  </parent>
  <groupId>com.example</groupId>
  <artifactId>memory-service</artifactId>
  <version>1.2.0</version>
  <properties>
    <java.version>21</java.version>
  </properties>
  <dependencies>
    <dependency>
      <groupId>org.springframework.boot</groupId>
      <artifactId>spring-boot-starter-data-jpa</artifactId>
    </dependency>
    <dependency>
      <groupId>org.postgresql</groupId>
      <artifactId>postgresql</artifactId>
    </dependency>
  </dependencies>
</project>
"""

COMPOSER_JSON = """\
{
    "name": "acme/memory",
    "require": {
        "php": "^8.2",
        "ext-json": "*",
        "laravel/framework": "^11.0",
        "guzzlehttp/guzzle": "^7.8"
    },
    "require-dev": {
        "phpunit/phpunit": "^11.0"
    }
}
"""


def test_mix_exs_of_a_phoenix_app():
    manifest = read_manifest("/work/spotter/mix.exs", MIX_EXS)
    assert manifest == Manifest(
        file="mix.exs",
        language="Elixir",
        name="spotter",
        version="0.1.0",  # through @version
        dependencies=MIX_DEPS,  # the commented-out dashboard is not a dependency
        test_command="mix test",
        frameworks=["Phoenix", "Ecto", "Phoenix LiveView"],
        language_version="~> 1.15",
    )
    assert summarize_manifest(manifest) == (
        "Elixir project spotter 0.1.0 (Phoenix, Ecto, Phoenix LiveView); deps: phoenix,"
        " phoenix_ecto, ecto_sql, postgrex, phoenix_html, phoenix_live_reload,"
        " phoenix_live_view, floki (+5 more); tests: mix test"
    )


def test_mix_exs_window_without_the_project_header():
    window = MIX_EXS[MIX_EXS.index("      {:phoenix,") :]
    manifest = read_manifest("mix.exs", window)
    assert manifest is not None
    assert (manifest.name, manifest.dependencies) == (None, MIX_DEPS)


def test_package_json_of_a_next_app():
    manifest = read_manifest("web/package.json", PACKAGE_JSON)
    assert manifest == Manifest(
        file="package.json",
        language="TypeScript",
        name="memory-dashboard",
        version="0.3.2",
        dependencies=[
            "next",
            "react",
            "react-dom",
            "@tanstack/react-query",
            "zod",
            "@types/node",
            "@types/react",
            "eslint-config-next",
            "typescript",
            "vitest",
        ],
        test_command="pnpm test",
        frameworks=["Next.js", "React"],
        language_version=">=20",
    )


def test_package_json_cut_short_and_without_tests():
    cut = read_manifest("package.json", PACKAGE_JSON[: PACKAGE_JSON.index('"zod"')])
    assert cut is not None
    assert (cut.name, cut.dependencies, cut.test_command) == (
        "memory-dashboard",
        ["next", "react", "react-dom", "@tanstack/react-query"],
        "pnpm test",
    )
    placeholder = '{"name": "x", "scripts": {"test": "echo \\"Error: no test specified\\""}}'
    assert read_manifest("package.json", placeholder).test_command is None


def test_pyproject_of_a_django_app_and_a_poetry_project():
    manifest = read_manifest("pyproject.toml", PYPROJECT)
    assert manifest == Manifest(
        file="pyproject.toml",
        language="Python",
        name="ledger",
        version="2.4.0",
        dependencies=[
            "Django",
            "djangorestframework",
            "celery",
            "psycopg",
            "django-environ",
            "pytest",
            "pytest-django",
            "factory-boy",
        ],
        test_command="pytest",
        frameworks=["Django", "Django REST framework", "Celery"],
        language_version=">=3.12",
    )
    poetry = read_manifest("pyproject.toml", POETRY)
    assert (poetry.name, poetry.version, poetry.dependencies) == (
        "scraper",
        "0.9.1",
        ["fastapi", "SQLAlchemy", "pytest"],
    )
    assert (poetry.frameworks, poetry.test_command, poetry.language_version) == (
        ["FastAPI", "SQLAlchemy"],
        "pytest",
        "^3.11",
    )


def test_cargo_toml_with_tokio_and_axum_and_when_cut_short():
    manifest = read_manifest("Cargo.toml", CARGO_TOML)
    assert manifest == Manifest(
        file="Cargo.toml",
        language="Rust",
        name="memo-server",
        version="0.2.0",
        dependencies=["axum", "tokio", "serde", "serde_json", "tracing", "tower"],
        test_command="cargo test",
        frameworks=["Axum", "Tokio"],
        language_version="edition 2021",
    )
    cut = CARGO_TOML[: CARGO_TOML.index("serde_json")] + 'serde_json = { version = "1'
    partial = read_manifest("Cargo.toml", cut)
    assert (partial.name, partial.dependencies) == ("memo-server", ["axum", "tokio", "serde"])


def test_go_mod_gemfile_gradle_pom_composer_and_requirements():
    go = read_manifest("go.mod", GO_MOD)
    assert (go.name, go.language_version, go.test_command) == (
        "github.com/example/memo",
        "1.22",
        "go test ./...",
    )
    assert go.dependencies == [
        "github.com/gin-gonic/gin",
        "github.com/jackc/pgx/v5",
        "github.com/labstack/echo/v4",
    ]
    assert go.frameworks == ["Gin", "Echo"]

    gems = read_manifest("Gemfile", GEMFILE)
    assert gems.dependencies == ["rails", "pg", "puma", "rspec-rails", "debug"]
    assert (gems.frameworks, gems.test_command, gems.language_version) == (
        ["Rails"],
        "bundle exec rspec",
        "3.3.4",
    )

    gradle = read_manifest("build.gradle.kts", BUILD_GRADLE_KTS)
    assert (gradle.language, gradle.version, gradle.test_command) == (
        "Kotlin",
        "0.0.1-SNAPSHOT",
        "./gradlew test",
    )
    assert gradle.dependencies == [
        "spring-boot-starter-web",
        "jackson-module-kotlin",
        "postgresql",
        "spring-boot-starter-test",
    ]
    assert gradle.frameworks == ["Spring Boot"]

    pom = read_manifest("pom.xml", POM_XML)
    assert (pom.name, pom.version, pom.language_version, pom.test_command) == (
        "memory-service",
        "1.2.0",
        "21",
        "mvn test",
    )
    assert pom.dependencies == ["spring-boot-starter-data-jpa", "postgresql"]
    assert pom.frameworks == ["Spring Boot"]

    composer = read_manifest("composer.json", COMPOSER_JSON)
    assert composer.dependencies == ["laravel/framework", "guzzlehttp/guzzle", "phpunit/phpunit"]
    assert (composer.frameworks, composer.test_command, composer.language_version) == (
        ["Laravel"],
        "vendor/bin/phpunit",
        "^8.2",
    )

    requirements = read_manifest(
        "requirements-dev.txt",
        "-r requirements.txt\n# tools\nFlask==3.0.3\npytest>=8  # runner\n"
        "--hash=sha256:abc\ngunicorn[gevent]; python_version > '3.8'\n",
    )
    assert requirements.dependencies == ["Flask", "pytest", "gunicorn"]
    assert (requirements.frameworks, requirements.test_command) == (["Flask"], "pytest")


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("src/main.py", "import os\n"),
        ("package.json", ""),
        ("package.json", "not json at all"),
        ("pyproject.toml", "[tool.ruff]\nline-length = 100\n"),
        ("Cargo.toml", "[[[[ broken"),
        ("go.mod", "// nothing here\n"),
        ("mix.exs", "defmodule Broken do\n  def project do\n"),
        ("Gemfile", "source 'https://rubygems.org'\n"),
    ],
)
def test_manifests_with_nothing_to_say(path, text):
    assert read_manifest(path, text) is None


@settings(max_examples=40, deadline=None)
@given(
    text=st.text(max_size=300),
    path=st.sampled_from(
        ["mix.exs", "package.json", "pyproject.toml", "Cargo.toml", "go.mod", "Gemfile", "pom.xml"]
    ),
)
def test_any_manifest_text_gives_a_manifest_or_none(text, path):
    result = read_manifest(path, text)
    assert result is None or isinstance(result, Manifest)


def test_framework_table():
    assert frameworks_of(
        [
            "phoenix_live_view",
            "phoenix",
            "ecto_sql",
            "Django",
            "django_ninja",
            "flask",
            "@sveltejs/kit",
            "svelte",
            "express",
            "@nestjs/core",
            "actix-web",
            "rocket",
            "github.com/gofiber/fiber/v2",
            "spring-boot-starter-webflux",
            "laravel/framework",
            "left-pad",
            "react",
            "react",
        ]
    ) == [
        "Phoenix LiveView",
        "Phoenix",
        "Ecto",
        "Django",
        "Django Ninja",
        "Flask",
        "SvelteKit",
        "Svelte",
        "Express",
        "NestJS",
        "Actix Web",
        "Rocket",
        "Fiber",
        "Spring Boot",
        "Laravel",
        "React",
    ]
    assert all(name == name.lower() for name in FRAMEWORKS)  # looked up in lower case
