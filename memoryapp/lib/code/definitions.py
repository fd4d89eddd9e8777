"""What a source file defines, named by a real parser: modules, classes, functions, macros.

`definitions(path, source)` parses the text an agent read with the tree-sitter grammar of
its language (through tree-sitter-language-pack, whose wheel carries every grammar, so it
works offline) and returns the definitions in source order, named the way a programmer
cites them: `render_header/1` in Elixir and Erlang, `Config` and `Store for Config` for Rust
impls, a Go method with its receiver type as parent. Each grammar is one `_Grammar` row
below: a query that finds candidate nodes, a function that names one (or says it is not a
definition), and the node types whose insides are local (a function's body), so that a
helper defined inside a function, a `def` inside an Elixir `quote`, or a "def x" in a
docstring is never reported. Text an agent read is often a window of a file (lines 193-252,
starting mid-function) or broken mid-edit: tree-sitter recovers from both, and a Python
window that starts indented is re-anchored at its first definition and wrapped so that its
indentation parses. Input is capped at `MAX_BYTES`; nothing here raises on bad input.
`summarize_definitions(defs)` is the short text a fact carries.

"public" means part of what the file offers to others: exported (JS/TS, Erlang), not
underscore-prefixed (Python; dunder methods are public protocol), capitalised (Go), `pub`
(Rust; `pub(crate)` is not), not `defp`/`defmacrop`/`@typep` (Elixir), not under
`private`/`protected` (Ruby, C++ sections), `public` or `protected` (Java; C# also
`internal`, and its types unless private), not `private` (Kotlin, Swift with `fileprivate`,
Scala and PHP also `protected`), not `static` (C/C++).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import NamedTuple

from tree_sitter import Node, Parser, Query, QueryCursor
from tree_sitter_language_pack import get_language

from memoryapp.lib.code.languages import language_of

logger = logging.getLogger(__name__)

# An agent's read is rarely larger; past this the head of a file names enough.
MAX_BYTES = 400_000

CONTAINER_KINDS = frozenset(
    {
        "module",
        "namespace",
        "class",
        "struct",
        "interface",
        "trait",
        "enum",
        "impl",
        "protocol",
        "object",
        "record",
        "extension",
    }
)


@dataclass(frozen=True)
class Definition:
    """One named definition. `line` is 1-based in the text given; when that text carried
    line-number prefixes (`   193→`), it is the number in the prefix, the line in the file.
    `parent` is the enclosing class, module, impl type or receiver, "" at top level or when
    the enclosing definition is outside the text read."""

    name: str
    kind: str
    line: int
    public: bool
    parent: str = ""


class _Named(NamedTuple):
    name: str
    kind: str
    public: bool
    # Overrides the enclosing definition as parent (a Go receiver, C++ `Store::get`).
    parent: str | None = None
    # What definitions inside this one give as their parent, when not `name`.
    scope: str | None = None


@dataclass
class _Context:
    """Per-call scratch shared by the namers of one parse."""

    sections: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    module: str = ""


_Namer = Callable[[Node, _Named | None, _Context], _Named | None]


@dataclass(frozen=True)
class _Grammar:
    # Node types captured as candidates (those the grammar lacks are left out) ...
    types: tuple[str, ...]
    namer: _Namer
    # ... plus hand-written patterns capturing @def.
    patterns: str = ""
    # Node types whose insides are local to them: nothing in there is reported.
    local: frozenset[str] = frozenset()
    # Finer test for the same (Elixir's `def` is a `call` like any other).
    is_local: Callable[[Node], bool] | None = None
    # Names exported elsewhere in the file (`export { a }`, `-export([f/1])`).
    exports: str = ""
    # Child types that carry the name where the grammar has no `name` field (the line
    # reported is the name's, not that of an annotation above it).
    anchors: tuple[str, ...] = ()


def _text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


def _field(node: Node, name: str) -> str:
    return _text(node.child_by_field_name(name))


def _child_of_type(node: Node, *types: str) -> Node | None:
    for child in node.children:
        if child.type in types:
            return child
    return None


def _words(node: Node | None) -> set[str]:
    """The keywords of a modifiers node ("public static final" → three words)."""
    return set(_text(node).split()) if node is not None else set()


def _strip_generics(text: str) -> str:
    return re.split(r"[<\[(]", text, maxsplit=1)[0].strip()


def _squash(text: str) -> str:
    return " ".join(text.split())


def _section(ctx: _Context, node: Node, marker: Callable[[Node], str | None]) -> str | None:
    """The last section marker (Ruby `private`, C++ `public:`) before `node` in its body."""
    body = node.parent
    if body is None:
        return None
    marks = ctx.sections.get(body.id)
    if marks is None:
        marks = []
        for child in body.named_children:
            word = marker(child)
            if word:
                marks.append((child.start_byte, word))
        ctx.sections[body.id] = marks
    current = None
    for start, word in marks:
        if start >= node.start_byte:
            break
        current = word
    return current


# --- Python -----------------------------------------------------------------------------

_PARTIAL = "__partial_window__"
_PY_DEFINITION_LINE = re.compile(r"^[ \t]*(?:@|def\s|async\s+def\s|class\s)")
_PY_CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


def _python_public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _python(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    if node.type == "class_definition":
        name = _field(node, "name")
        if name == _PARTIAL:
            return _Named(name, "class", False, scope="")
        return _Named(name, "class", _python_public(name)) if name else None
    if node.type == "function_definition":
        name = _field(node, "name")
        in_class = enclosing is not None and enclosing.kind == "class"
        return _Named(name, "method" if in_class else "function", _python_public(name))
    # A module-level constant: `DEFAULT_TIMEOUT = 30`.
    name = _field(node, "left")
    if not _PY_CONSTANT.match(name):
        return None
    return _Named(name, "constant", not name.startswith("_"))


def _python_window(text: str) -> tuple[str, int]:
    """Make a window that starts inside a function parse: start at its first definition and
    open one synthetic class per indentation level, so that `    def x` parses as a method
    and a later `class Y` dedents out. Returns the text and the line shift (lines added
    minus lines dropped)."""
    lines = text.split("\n")
    first = next((line for line in lines if line.strip() and not line.lstrip().startswith("#")), "")
    if not first or not (first[0] in " \t" or first.lstrip()[0] in ")]}"):
        return text, 0
    start = next((i for i, line in enumerate(lines) if _PY_DEFINITION_LINE.match(line)), None)
    if start is None:
        return text, 0
    rest = lines[start:]
    depth = len(rest[0]) - len(rest[0].lstrip())
    indents = sorted(
        {line[: len(line) - len(line.lstrip())] for line in rest if line.strip()},
        key=len,
    )
    outer = [indent for indent in indents if len(indent) < depth]
    if depth and "" not in outer:
        outer.insert(0, "")
    wrapper = [f"{indent}class {_PARTIAL}:" for indent in outer]
    return "\n".join(wrapper + rest), len(wrapper) - start


# --- JavaScript / TypeScript ------------------------------------------------------------

_JS_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function"}
)


def _js_exported(node: Node) -> bool:
    parent = node.parent
    if parent is not None and parent.type in ("lexical_declaration", "variable_declaration"):
        parent = parent.parent
    return parent is not None and parent.type == "export_statement"


def _javascript(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    kind = {
        "function_declaration": "function",
        "generator_function_declaration": "function",
        "function_signature": "function",
        "class_declaration": "class",
        "abstract_class_declaration": "class",
        "interface_declaration": "interface",
        "type_alias_declaration": "type",
        "enum_declaration": "enum",
        "module": "module",
        "internal_module": "module",
    }.get(node.type)
    if kind is not None:
        name = _field(node, "name")
        if kind == "module":
            name = name.strip("'\"")
        return _Named(name, kind, _js_exported(node)) if name else None
    if node.type in ("method_definition", "method_signature", "abstract_method_signature"):
        name = _field(node, "name")
        hidden = name.startswith("#") or _text(_child_of_type(node, "accessibility_modifier")) in (
            "private",
            "protected",
        )
        return _Named(name, "method", not hidden) if name else None
    # variable_declarator: `const fetchSession = async (key) => ...`, `export const X = 1`.
    name_node = node.child_by_field_name("name")
    value = node.child_by_field_name("value")
    if name_node is None or name_node.type != "identifier":
        return None
    exported = _js_exported(node)
    if value is not None and value.type in _JS_FUNCTION_VALUES:
        return _Named(_text(name_node), "function", exported)
    return _Named(_text(name_node), "constant", True) if exported else None


_JS_TYPES = (
    "function_declaration",
    "generator_function_declaration",
    "function_signature",
    "class_declaration",
    "abstract_class_declaration",
    "interface_declaration",
    "type_alias_declaration",
    "enum_declaration",
    "module",
    "internal_module",
    "method_definition",
    "method_signature",
    "abstract_method_signature",
)
_JS_PATTERNS = """
(program (lexical_declaration (variable_declarator) @def))
(program (variable_declaration (variable_declarator) @def))
(export_statement (lexical_declaration (variable_declarator) @def))
(export_statement (variable_declaration (variable_declarator) @def))
"""
_JS_EXPORTS = """
(export_clause (export_specifier name: (identifier) @name))
(assignment_expression
  left: (member_expression object: (identifier) @object property: (property_identifier) @prop)
  right: (object (shorthand_property_identifier) @name)
  (#eq? @object "module") (#eq? @prop "exports"))
(assignment_expression
  left: (member_expression object: (identifier) @object property: (property_identifier) @prop)
  right: (object (pair value: (identifier) @name))
  (#eq? @object "module") (#eq? @prop "exports"))
(assignment_expression
  left: (member_expression object: (identifier) @object property: (property_identifier) @prop)
  right: (identifier) @name
  (#eq? @object "module") (#eq? @prop "exports"))
"""
_JS_LOCAL = frozenset(
    {
        "function_declaration",
        "generator_function_declaration",
        "function_expression",
        "function",
        "generator_function",
        "arrow_function",
        "method_definition",
        "class_static_block",
    }
)


# --- Go ---------------------------------------------------------------------------------


def _go_public(name: str) -> bool:
    return name[:1].isupper()


def _go(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    name = _field(node, "name")
    if not name:
        return None
    if node.type == "function_declaration":
        return _Named(name, "function", _go_public(name))
    if node.type == "method_declaration":
        receiver = node.child_by_field_name("receiver")
        parameter = receiver.named_children[0] if receiver and receiver.named_children else None
        owner = _field(parameter, "type") if parameter is not None else ""
        owner = _strip_generics(owner.lstrip("*").strip())
        return _Named(name, "method", _go_public(name), parent=owner)
    if node.type == "method_elem":
        return _Named(name, "method", _go_public(name))
    if node.type in ("type_spec", "type_alias"):
        shape = node.child_by_field_name("type")
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(
            shape.type if shape is not None and node.type == "type_spec" else "", "type"
        )
        return _Named(name, kind, _go_public(name))
    return _Named(name, "constant", _go_public(name))  # const_spec, var_spec


_GO_PATTERNS = """
(source_file (const_declaration (const_spec) @def))
(source_file (var_declaration (var_spec) @def))
"""


# --- Rust -------------------------------------------------------------------------------

_RUST_KINDS = {
    "struct_item": "struct",
    "union_item": "struct",
    "enum_item": "enum",
    "trait_item": "trait",
    "mod_item": "module",
    "macro_definition": "macro",
    "const_item": "constant",
    "static_item": "constant",
    "type_item": "type",
}


def _rust_pub(node: Node) -> bool:
    return _text(_child_of_type(node, "visibility_modifier")) == "pub"


def _rust(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    if node.type == "impl_item":
        owner = _squash(_field(node, "type"))
        trait = _squash(_field(node, "trait"))
        name = f"{trait} for {owner}" if trait else owner
        return _Named(name, "impl", True, scope=_strip_generics(owner)) if owner else None
    name = _field(node, "name")
    if not name:
        return None
    if node.type in ("function_item", "function_signature_item"):
        if enclosing is not None and enclosing.kind == "impl":
            trait_impl = " for " in enclosing.name
            return _Named(name, "method", trait_impl or _rust_pub(node))
        if enclosing is not None and enclosing.kind == "trait":
            return _Named(name, "method", enclosing.public)
        return _Named(name, "function", _rust_pub(node))
    kind = _RUST_KINDS.get(node.type)
    if kind == "macro":
        return _Named(name, kind, True)  # visibility is #[macro_export], not `pub`
    return _Named(name, kind, _rust_pub(node)) if kind else None


# --- Elixir -----------------------------------------------------------------------------

_EX_FUNCTIONS = {
    "def": ("function", True),
    "defp": ("function", False),
    "defmacro": ("macro", True),
    "defmacrop": ("macro", False),
    "defguard": ("macro", True),
    "defguardp": ("macro", False),
    "defdelegate": ("function", True),
    "defn": ("function", True),
    "defnp": ("function", False),
}
_EX_CONTAINERS = ("defmodule", "defprotocol", "defimpl", "defstruct", "defexception")
_EX_TYPES = {
    "type": ("type", True),
    "opaque": ("type", True),
    "typep": ("type", False),
    "callback": ("callback", True),
    "macrocallback": ("callback", True),
}


def _elixir_keyword(node: Node) -> str:
    return _field(node, "target") if node.type == "call" else ""


def _elixir_is_local(node: Node) -> bool:
    return node.type == "call" and _elixir_keyword(node) in _EX_FUNCTIONS


def _elixir_arguments(call: Node) -> list[Node]:
    arguments = _child_of_type(call, "arguments")
    if arguments is None:
        return []
    return [child for child in arguments.named_children if child.type != "comment"]


def _elixir_head(head: Node) -> str | None:
    """`foo(a, b \\\\ 1) when is_list(a)` → `foo/2`; `zero` → `zero/0`; `a <~> b` → `<~>/2`."""
    if head.type == "binary_operator" and _field(head, "operator") == "when":
        head = head.child_by_field_name("left") or head
    if head.type == "identifier":
        return f"{_text(head)}/0"
    if head.type == "call":
        target = head.child_by_field_name("target")
        if target is None or target.type != "identifier":
            return None  # `def unquote(name)(x)`: the name is computed
        return f"{_text(target)}/{len(_elixir_arguments(head))}"
    if head.type == "binary_operator":
        return f"{_field(head, 'operator')}/2"
    if head.type == "unary_operator":
        return f"{_field(head, 'operator')}/1"
    return None


def _elixir(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    if node.type == "unary_operator":  # @type t :: ..., @callback render(t) :: iodata
        return _elixir_attribute(node)
    keyword = _elixir_keyword(node)
    arguments = _elixir_arguments(node)
    module = enclosing.name if enclosing is not None and enclosing.kind == "module" else ""
    if keyword in _EX_FUNCTIONS:
        kind, public = _EX_FUNCTIONS[keyword]
        name = _elixir_head(arguments[0]) if arguments else None
        return _Named(name, kind, public) if name else None
    if keyword in ("defstruct", "defexception"):
        return _Named(f"%{module}{{}}", "struct", True) if module else None
    if not arguments or arguments[0].type not in ("alias", "atom"):
        return None
    name = _text(arguments[0])
    if keyword == "defmodule":
        return _Named(f"{module}.{name}" if module else name, "module", True)
    if keyword == "defprotocol":
        return _Named(name, "protocol", True)
    return _elixir_impl(name, arguments, module)


def _elixir_attribute(node: Node) -> _Named | None:
    """`@type t :: ...`, `@callback render(t) :: iodata`: a type or a callback."""
    if _text(node.children[0]) != "@" or node.child_by_field_name("operand") is None:
        return None
    attribute = node.child_by_field_name("operand")
    kind, public = _EX_TYPES.get(_elixir_keyword(attribute), ("", False))
    arguments = _elixir_arguments(attribute)
    if not kind or not arguments:
        return None
    spec = arguments[0]
    if spec.type == "binary_operator":
        spec = spec.child_by_field_name("left") or spec
    name = _elixir_head(spec)
    return _Named(name, kind, public) if name else None


def _elixir_impl(name: str, arguments: list[Node], module: str) -> _Named:
    """`defimpl Proto, for: Type` (inside a module `for:` defaults to that module)."""
    target = module
    for argument in arguments[1:]:
        if argument.type == "keywords":
            for pair in argument.named_children:
                if _field(pair, "key").strip().rstrip(":") == "for":
                    target = _squash(_field(pair, "value"))
    return _Named(f"{name} for {target}" if target else name, "impl", True)


_EX_KEYWORDS = " ".join(f'"{word}"' for word in (*_EX_FUNCTIONS, *_EX_CONTAINERS))
_EX_ATTRIBUTES = " ".join(f'"{word}"' for word in _EX_TYPES)
_EX_PATTERNS = f"""
(call target: (identifier) @keyword (#any-of? @keyword {_EX_KEYWORDS})) @def
(unary_operator operand: (call target: (identifier) @attribute
  (#any-of? @attribute {_EX_ATTRIBUTES}))) @def
"""


# --- Ruby -------------------------------------------------------------------------------


def _ruby_marker(node: Node) -> str | None:
    text = _text(node) if node.type == "identifier" else ""
    return text if text in ("private", "protected", "public", "module_function") else None


def _ruby(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    namespace = enclosing.name if enclosing is not None else ""
    if node.type in ("module", "class"):
        name = _field(node, "name")
        full = f"{namespace}::{name}" if namespace else name
        return _Named(full, "module" if node.type == "module" else "class", True) if name else None
    if node.type == "assignment":
        name = _field(node, "left")
        return _Named(name, "constant", True) if name else None
    name = _field(node, "name")
    if not name:
        return None
    body = node.parent
    singleton = node.type == "singleton_method" or (
        body is not None and body.parent is not None and body.parent.type == "singleton_class"
    )
    if singleton:
        return _Named(f"self.{name}", "method", True)
    # `private def helper`
    call = body.parent if body is not None and body.type == "argument_list" else None
    if call is not None and _field(call, "method") in ("private", "protected"):
        return _Named(name, "method", False)
    section = _section(ctx, node, _ruby_marker) if body is not None else None
    return _Named(name, "method", section not in ("private", "protected"))


_RUBY_PATTERNS = """
(program (assignment left: (constant)) @def)
(body_statement (assignment left: (constant)) @def)
"""


# --- Java, Kotlin, Scala, C#, PHP, Swift ------------------------------------------------

_JAVA_KINDS = {
    "class_declaration": "class",
    "interface_declaration": "interface",
    "annotation_type_declaration": "interface",
    "enum_declaration": "enum",
    "record_declaration": "record",
    "method_declaration": "method",
    "constructor_declaration": "constructor",
    "compact_constructor_declaration": "constructor",
}


def _java(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    name = _field(node, "name")
    kind = _JAVA_KINDS.get(node.type)
    if not name or kind is None:
        return None
    words = _words(_child_of_type(node, "modifiers"))
    in_interface = enclosing is not None and enclosing.kind == "interface"
    public = bool(words & {"public", "protected"}) or (in_interface and "private" not in words)
    return _Named(name, kind, public)


def _kotlin(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    modifiers = _child_of_type(node, "modifiers")
    public = not (_words(modifiers) & {"private"})
    if node.type == "function_declaration":
        name = _text(_child_of_type(node, "simple_identifier"))
        receiver = node.child_by_field_name("receiver") or _child_of_type(node, "receiver_type")
        if receiver is not None:
            name = f"{_text(receiver)}.{name}"  # extension function: String.slugify
        in_type = enclosing is not None and enclosing.kind in CONTAINER_KINDS
        return _Named(name, "method" if in_type else "function", public) if name else None
    name = _text(_child_of_type(node, "type_identifier"))
    if not name:
        return None
    if node.type == "type_alias":
        return _Named(name, "type", public)
    if node.type == "object_declaration":
        return _Named(name, "object", public)
    keywords = {_text(child) for child in node.children if not child.is_named}
    keywords |= _words(modifiers)
    if "interface" in keywords:
        return _Named(name, "interface", public)
    return _Named(name, "enum" if "enum" in keywords else "class", public)


_SCALA_KINDS = {
    "class_definition": "class",
    "object_definition": "object",
    "trait_definition": "trait",
    "enum_definition": "enum",
    "type_definition": "type",
    "function_definition": "function",
    "function_declaration": "function",
}


def _scala(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    name = _field(node, "name")
    kind = _SCALA_KINDS.get(node.type)
    if not name or kind is None:
        return None
    if kind == "function" and enclosing is not None and enclosing.kind in CONTAINER_KINDS:
        kind = "method"
    public = not (_words(_child_of_type(node, "modifiers")) & {"private", "protected"})
    return _Named(name, kind, public)


_CSHARP_KINDS = {
    "class_declaration": "class",
    "struct_declaration": "struct",
    "interface_declaration": "interface",
    "record_declaration": "record",
    "enum_declaration": "enum",
    "delegate_declaration": "type",
    "namespace_declaration": "namespace",
    "file_scoped_namespace_declaration": "namespace",
    "method_declaration": "method",
    "constructor_declaration": "constructor",
}


def _csharp(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    name = _squash(_field(node, "name"))
    kind = _CSHARP_KINDS.get(node.type)
    if not name or kind is None:
        return None
    words = {_text(child) for child in node.children if child.type == "modifier"}
    if kind == "namespace":
        public = True
    elif enclosing is None or enclosing.kind == "namespace":
        public = "private" not in words  # a type's default is internal: the assembly sees it
    else:  # a member's default is private, except in an interface
        public = bool(words & {"public", "protected", "internal"}) or enclosing.kind == "interface"
    return _Named(name, kind, public)


_PHP_KINDS = {
    "class_declaration": "class",
    "interface_declaration": "interface",
    "trait_declaration": "trait",
    "enum_declaration": "enum",
    "namespace_definition": "namespace",
    "function_definition": "function",
    "method_declaration": "method",
}


def _php(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    name = _field(node, "name")
    kind = _PHP_KINDS.get(node.type)
    if not name or kind is None:
        return None
    visibility = _text(_child_of_type(node, "visibility_modifier"))
    return _Named(name, kind, visibility not in ("private", "protected"))


def _swift(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    modifiers = _child_of_type(node, "modifiers")
    public = not (_words(modifiers) & {"private", "fileprivate"})
    in_type = enclosing is not None and enclosing.kind in CONTAINER_KINDS
    if node.type == "init_declaration":
        return _Named("init", "method", public)
    if node.type in ("function_declaration", "protocol_function_declaration"):
        name = _field(node, "name")
        return _Named(name, "method" if in_type else "function", public) if name else None
    if node.type == "typealias_declaration":
        name = _field(node, "name")
        return _Named(name, "type", public) if name else None
    name = _squash(_field(node, "name"))
    if not name:
        return None
    if node.type == "protocol_declaration":
        return _Named(name, "protocol", public)
    declared = _field(node, "declaration_kind")
    kind = {"struct": "struct", "enum": "enum", "extension": "extension"}.get(declared, "class")
    return _Named(name, kind, public)


# --- C and C++ --------------------------------------------------------------------------

_DECLARATOR_WRAPPERS = frozenset(
    {"pointer_declarator", "reference_declarator", "attributed_declarator"}
)
_C_TYPE_KINDS = {
    "struct_specifier": "struct",
    "union_specifier": "struct",
    "class_specifier": "class",
    "enum_specifier": "enum",
}


def _function_declarator(node: Node) -> Node | None:
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type in _DECLARATOR_WRAPPERS:
        declarator = declarator.child_by_field_name("declarator")
    if declarator is None or declarator.type != "function_declarator":
        return None
    return declarator


def _typedef_name(node: Node) -> str:
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "type_identifier":
        inner = declarator.child_by_field_name("declarator")
        if inner is None:  # a parenthesized declarator keeps its inside unnamed
            inner = declarator.named_children[0] if declarator.named_children else None
        declarator = inner
    return _text(declarator)


def _cpp_marker(node: Node) -> str | None:
    return _text(node).rstrip(":").strip() if node.type == "access_specifier" else None


def _c_family(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    kind = _C_TYPE_KINDS.get(node.type)
    if kind is not None:
        name = _field(node, "name")
        return _Named(name, kind, True) if name else None
    if node.type == "namespace_definition":
        name = _field(node, "name")
        if enclosing is not None and enclosing.kind == "namespace":
            name = f"{enclosing.name}::{name}"
        return _Named(name, "namespace", True) if name else None
    if node.type == "preproc_function_def":
        return _Named(_field(node, "name"), "macro", True)
    if node.type in ("type_definition", "alias_declaration"):
        return _c_type_alias(node)
    # function_definition, declaration, field_declaration
    return _c_function(node, enclosing, ctx)


def _c_type_alias(node: Node) -> _Named | None:
    """`typedef ... name;` and C++'s `using name = ...;`: a type, or the struct, union or
    enum it names when it defines one without a name of its own."""
    if node.type == "alias_declaration":
        name = _field(node, "name")
    else:
        name = _typedef_name(node)
    if not name:
        return None
    shape = node.child_by_field_name("type")
    kind = "type"
    if (
        shape is not None
        and shape.type in _C_TYPE_KINDS
        and shape.child_by_field_name("name") is None
        and shape.child_by_field_name("body") is not None
    ):
        kind = _C_TYPE_KINDS[shape.type]  # typedef struct { ... } memo_entry;
    return _Named(name, kind, True)


def _c_function(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    """A function or method, defined or declared (a constructor by its class's name)."""
    declarator = _function_declarator(node)
    if declarator is None:
        return None
    target = declarator.child_by_field_name("declarator")
    if target is None or target.type == "parenthesized_declarator":
        return None  # int (*callback)(void *): a variable of function-pointer type
    parent = None
    if target.type == "qualified_identifier":  # bool Store::get(...) { ... }
        parent = _field(target, "scope")
        target = target.child_by_field_name("name") or target
    name = _text(target)
    if not name:
        return None
    storage = {_text(child) for child in node.children if child.type == "storage_class_specifier"}
    in_type = enclosing is not None and enclosing.kind in ("class", "struct")
    if parent is not None or in_type:
        public = True
        if in_type and parent is None:
            section = _section(ctx, node, _cpp_marker)
            default = "private" if enclosing is not None and enclosing.kind == "class" else "public"
            public = (section or default) == "public"
        owner = parent if parent is not None else enclosing.name if enclosing else ""
        kind = "constructor" if name in (owner, f"~{owner}") else "method"
        return _Named(name, kind, public, parent=parent)
    return _Named(name, "function", "static" not in storage)


_C_PATTERNS = """
(struct_specifier name: (_) body: (_)) @def
(union_specifier name: (_) body: (_)) @def
(enum_specifier name: (_) body: (_)) @def
"""
_CPP_PATTERNS = _C_PATTERNS + "(class_specifier name: (_) body: (_)) @def\n"


# --- Lua, Erlang, shell -----------------------------------------------------------------


def _lua(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    name = _field(node, "name")
    local = any(child.type == "local" for child in node.children)
    return _Named(name, "function", not local) if name else None


def _erlang(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    if node.type == "module_attribute":
        ctx.module = _field(node, "name")
        return _Named(ctx.module, "module", True, scope="") if ctx.module else None
    if node.type == "record_decl":
        name = _field(node, "name")
        return _Named(f"#{name}{{}}", "record", True, parent=ctx.module) if name else None
    clause = node.child_by_field_name("clause") or _child_of_type(node, "function_clause")
    if clause is None:
        return None
    name = _field(clause, "name")
    arguments = clause.child_by_field_name("args")
    arity = len(arguments.named_children) if arguments is not None else 0
    return _Named(f"{name}/{arity}", "function", False, parent=ctx.module) if name else None


_ERLANG_EXPORTS = """
(export_attribute funs: (fa fun: (atom) @name arity: (arity value: (integer) @arity)))
"""


def _bash(node: Node, enclosing: _Named | None, ctx: _Context) -> _Named | None:
    name = _field(node, "name")
    return _Named(name, "function", True) if name else None


# --- the table --------------------------------------------------------------------------

_C_TYPES = ("function_definition", "declaration", "type_definition", "preproc_function_def")
_CPP_TYPES = (*_C_TYPES, "field_declaration", "namespace_definition", "alias_declaration")

_JS_GRAMMAR = _Grammar(
    _JS_TYPES, _javascript, patterns=_JS_PATTERNS, local=_JS_LOCAL, exports=_JS_EXPORTS
)
_GRAMMARS: dict[str, _Grammar] = {
    "python": _Grammar(
        ("function_definition", "class_definition"),
        _python,
        patterns="(module (assignment left: (identifier)) @def)",
        local=frozenset({"function_definition", "lambda"}),
    ),
    # One row for the three grammars: the query keeps the node types each one has.
    "javascript": _JS_GRAMMAR,
    "typescript": _JS_GRAMMAR,
    "tsx": _JS_GRAMMAR,
    "go": _Grammar(
        ("function_declaration", "method_declaration", "type_spec", "type_alias", "method_elem"),
        _go,
        patterns=_GO_PATTERNS,
        local=frozenset({"function_declaration", "method_declaration", "func_literal"}),
    ),
    "rust": _Grammar(
        ("function_item", "function_signature_item", "impl_item", *_RUST_KINDS),
        _rust,
        local=frozenset({"function_item", "closure_expression"}),
    ),
    "elixir": _Grammar((), _elixir, patterns=_EX_PATTERNS, is_local=_elixir_is_local),
    "ruby": _Grammar(
        ("module", "class", "method", "singleton_method"),
        _ruby,
        patterns=_RUBY_PATTERNS,
        local=frozenset({"method", "singleton_method"}),
    ),
    "java": _Grammar(
        tuple(_JAVA_KINDS),
        _java,
        local=frozenset(
            {
                "method_declaration",
                "constructor_declaration",
                "lambda_expression",
                "object_creation_expression",
            }
        ),
    ),
    "kotlin": _Grammar(
        ("class_declaration", "object_declaration", "function_declaration", "type_alias"),
        _kotlin,
        local=frozenset({"function_declaration", "lambda_literal", "anonymous_function"}),
        anchors=("type_identifier", "simple_identifier"),
    ),
    "scala": _Grammar(
        tuple(_SCALA_KINDS),
        _scala,
        local=frozenset({"function_definition", "lambda_expression"}),
    ),
    "csharp": _Grammar(
        tuple(_CSHARP_KINDS),
        _csharp,
        local=frozenset(
            {
                "method_declaration",
                "constructor_declaration",
                "local_function_statement",
                "lambda_expression",
                "accessor_declaration",
            }
        ),
    ),
    "php": _Grammar(
        tuple(_PHP_KINDS),
        _php,
        local=frozenset(
            {"method_declaration", "function_definition", "anonymous_function", "arrow_function"}
        ),
    ),
    "swift": _Grammar(
        (
            "class_declaration",
            "protocol_declaration",
            "function_declaration",
            "protocol_function_declaration",
            "init_declaration",
            "typealias_declaration",
        ),
        _swift,
        local=frozenset({"function_declaration", "init_declaration", "lambda_literal"}),
    ),
    "c": _Grammar(
        _C_TYPES,
        _c_family,
        patterns=_C_PATTERNS,
        local=frozenset({"function_definition"}),
    ),
    "cpp": _Grammar(
        _CPP_TYPES,
        _c_family,
        patterns=_CPP_PATTERNS,
        local=frozenset({"function_definition", "lambda_expression"}),
    ),
    "lua": _Grammar(
        ("function_declaration",),
        _lua,
        local=frozenset({"function_declaration", "function_definition"}),
    ),
    "erlang": _Grammar(
        ("module_attribute", "record_decl", "fun_decl"),
        _erlang,
        local=frozenset({"fun_decl", "anonymous_fun"}),
        exports=_ERLANG_EXPORTS,
    ),
    "bash": _Grammar(("function_definition",), _bash, local=frozenset({"function_definition"})),
}
# A `.h` file is C unless it says otherwise; C++ headers are parsed with the C++ grammar.
_CPP_HEADER = re.compile(rb"^\s*(?:class|namespace|template\s*<)\b", re.MULTILINE)


# --- parsing ----------------------------------------------------------------------------

_LINE_PREFIX = re.compile(r"^\s*(\d+)(?:→|\t)")
_threads = threading.local()


def parser(language: str) -> Parser:
    """The tree-sitter parser of `language` (a grammar name from `languages.LANGUAGES`),
    made once per thread: a Parser is not safe to share between threads."""
    parsers: dict[str, Parser] = _threads.__dict__.setdefault("parsers", {})
    if language not in parsers:
        parsers[language] = Parser(get_language(language))
    return parsers[language]


@cache
def _queries(language: str) -> tuple[Query, Query | None]:
    grammar = _GRAMMARS[language]
    tree_language = get_language(language)
    known = [kind for kind in grammar.types if tree_language.id_for_node_kind(kind, True)]
    source = grammar.patterns
    if known:
        source = "[" + " ".join(f"({kind})" for kind in known) + "] @def\n" + source
    exports = Query(tree_language, grammar.exports) if grammar.exports else None
    return Query(tree_language, source), exports


def _strip_line_numbers(text: str) -> tuple[str, list[int] | None]:
    """Remove `   12→` (Claude Code) or `    12\\t` (cat -n) prefixes when every non-empty
    line has one; returns the text and the file line number of each line."""
    lines = text.split("\n")
    numbers: list[int] = []
    stripped: list[str] = []
    found = False
    for line in lines:
        match = _LINE_PREFIX.match(line)
        if match is None:
            if line.strip():
                return text, None
            numbers.append(numbers[-1] + 1 if numbers else 1)
            stripped.append(line)
            continue
        found = True
        numbers.append(int(match.group(1)))
        stripped.append(line[match.end() :])
    return ("\n".join(stripped), numbers) if found else (text, None)


def _encode(text: str) -> bytes:
    data = text.encode("utf-8", "replace")
    if len(data) > MAX_BYTES:
        cut = data.rfind(b"\n", 0, MAX_BYTES)
        data = data[: cut if cut > 0 else MAX_BYTES]
    return data


def definitions(path: str, source: str) -> list[Definition]:
    """What the file at `path` defines, in source order; [] for a language we cannot parse,
    for empty text and for anything unexpected (never raises)."""
    try:
        return _definitions(path, source)
    except Exception:  # an unforeseen grammar quirk must not fail an extraction
        logger.exception("naming the definitions of %s failed", path)
        return []


def _definitions(path: str, source: str) -> list[Definition]:
    language = language_of(path)
    if language not in _GRAMMARS or not source or not source.strip():
        return []
    text, file_lines = _strip_line_numbers(source)
    shift = 0
    if language == "python":
        text, shift = _python_window(text)
    data = _encode(text)
    if language == "c" and _CPP_HEADER.search(data):
        language = "cpp"
    found, root = _collect(language, data)
    if language == "python" and root.has_error:
        found = _python_recover(data, root, found)
    _, exports_query = _queries(language)
    if exports_query is not None:
        found = _apply_exports(found, exports_query, root)
    if not shift and file_lines is None:
        return found
    placed = []
    for definition in found:
        line = definition.line - shift
        if file_lines is not None and 1 <= line <= len(file_lines):
            line = file_lines[line - 1]
        placed.append(replace(definition, line=line))
    return placed


def _collect(language: str, data: bytes) -> tuple[list[Definition], Node]:
    """The definitions in `data`, each once, with lines counted in `data`; and the tree."""
    grammar = _GRAMMARS[language]
    query, _ = _queries(language)
    root = parser(language).parse(data).root_node
    nodes = QueryCursor(query).captures(root).get("def", [])
    nodes.sort(key=lambda node: (node.start_byte, -node.end_byte))

    context = _Context()
    containers: dict[int, _Named] = {}
    seen_nodes: set[int] = set()
    seen: set[tuple[str, str, str]] = set()
    found: list[Definition] = []
    for node in nodes:
        if node.id in seen_nodes:
            continue
        seen_nodes.add(node.id)
        local, enclosing = _surroundings(node, grammar, containers)
        if local:
            continue
        named = grammar.namer(node, enclosing, context)
        if named is None:
            continue
        if named.kind in CONTAINER_KINDS:
            containers[node.id] = named
        if named.name == _PARTIAL:
            continue
        if named.parent is not None:
            parent = named.parent
        elif enclosing is None:
            parent = ""
        else:
            parent = enclosing.scope if enclosing.scope is not None else enclosing.name
        key = (parent, named.name, named.kind)
        if key in seen:
            continue  # another clause, an overload, a property setter, a re-opened impl
        seen.add(key)
        anchor = node.child_by_field_name("name")
        if anchor is None and grammar.anchors:
            anchor = _child_of_type(node, *grammar.anchors)
        line = (anchor or node).start_point.row + 1
        if anchor is None and named.kind in ("function", "method", "constructor"):
            line += _name_row(node, named.name)
        found.append(Definition(named.name, named.kind, line, named.public, parent))
    return found, root


def _name_row(node, name: str) -> int:
    """Rows from the node's start to its name: a C++ function's name sits in its
    declarator, and error recovery in a cut window can start the node lines earlier."""
    words = re.findall(r"[A-Za-z_]\w*", name)
    text = node.text or b""
    if not words:
        return 0
    match = re.search(rb"(?<![\w])" + re.escape(words[-1].encode()) + rb"(?![\w])", text)
    return text[: match.start()].count(b"\n") if match else 0


_PY_HEADER = re.compile(rb"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)")


def _python_recover(data: bytes, root: Node, found: list[Definition]) -> list[Definition]:
    """Python's grammar does not recover from an unclosed bracket: everything after it is
    one ERROR node. Re-parse each definition that fell in an error on its own, under
    synthetic headers for the classes around it, and merge what that names."""
    errors = _error_ranges(root)
    lines = data.split(b"\n")
    covered = {definition.line for definition in found}
    headers = []  # (line index, byte offset, match)
    offset = 0
    for index, line in enumerate(lines):
        match = _PY_HEADER.match(line)
        if match:
            headers.append((index, offset, match))
        offset += len(line) + 1
    stack: list[tuple[int, bytes, bytes, bytes]] = []  # indent, kind, name, whitespace
    recovered: list[Definition] = []
    for position, (index, offset, match) in enumerate(headers):
        whitespace, kind, name = match.group(1), match.group(2), match.group(3)
        while stack and stack[-1][0] >= len(whitespace):
            stack.pop()
        around = list(stack)
        stack.append((len(whitespace), kind, name, whitespace))
        if index + 1 in covered or not any(start <= offset < end for start, end in errors):
            continue
        if any(outer_kind == b"def" for _, outer_kind, _, _ in around):
            continue  # local to a function
        end = headers[position + 1][0] if position + 1 < len(headers) else len(lines)
        prefix = [ws + b"class " + outer + b":" for _, _, outer, ws in around]
        body = lines[index:end]
        if sum(1 for line in body if line.strip()) < 2:
            body = [*body, whitespace + b"    pass"]
        chunk, _ = _collect("python", b"\n".join(prefix + body))
        for definition in chunk:
            if definition.line > len(prefix):
                line = definition.line - len(prefix) + index
                recovered.append(replace(definition, line=line))
    if not recovered:
        return found
    merged, seen = [], set()
    for definition in sorted(found + recovered, key=lambda d: d.line):
        key = (definition.parent, definition.name, definition.kind)
        if key not in seen:
            seen.add(key)
            merged.append(definition)
    return merged


def _error_ranges(root: Node) -> list[tuple[int, int]]:
    """The byte ranges of the ERROR nodes, walking only down the paths that hold one."""
    ranges = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error:
            ranges.append((node.start_byte, node.end_byte))
        else:
            stack.extend(child for child in node.children if child.has_error)
    return ranges


def _surroundings(
    node: Node, grammar: _Grammar, containers: dict[int, _Named]
) -> tuple[bool, _Named | None]:
    """Whether `node` sits inside a function (so is local), and its nearest container."""
    enclosing = None
    ancestor = node.parent
    while ancestor is not None:
        if ancestor.type in grammar.local or (grammar.is_local and grammar.is_local(ancestor)):
            return True, None
        if enclosing is None:
            enclosing = containers.get(ancestor.id)
        ancestor = ancestor.parent
    return False, enclosing


def _apply_exports(found: list[Definition], query: Query, root: Node) -> list[Definition]:
    """Mark top-level definitions public when an export list elsewhere names them."""
    exported: set[str] = set()
    for _, captures in QueryCursor(query).matches(root):
        names = [_text(node) for node in captures.get("name", [])]
        arities = [_text(node) for node in captures.get("arity", [])]
        if arities:  # Erlang: -export([get/1]).
            names = [f"{name}/{arity}" for name, arity in zip(names, arities, strict=False)]
        exported.update(names)
    return [
        Definition(d.name, d.kind, d.line, True, d.parent)
        if d.name in exported and d.kind != "method"
        else d
        for d in found
    ]


# --- the short text of a fact -----------------------------------------------------------


def summarize_definitions(defs: list[Definition], limit: int = 12) -> str:
    """`Spotter.Transcripts; render_header/1, build_rows/2 (+8 more)`: containers first,
    then public definitions (constants last), then private ones, each in source order; at
    most `limit` names; methods carry their parent when the file has methods of several
    parents."""
    containers = [d for d in defs if d.kind in CONTAINER_KINDS]
    # A constructor named after its class (Java, C#, C++) says nothing the class does not.
    members = [d for d in defs if d.kind not in CONTAINER_KINDS and d.kind != "constructor"]
    members.sort(key=lambda d: (not d.public, d.kind == "constant"))  # stable: source order
    method_parents = {d.parent for d in members if d.kind == "method" and d.parent}

    def label(d: Definition) -> str:
        if d.kind != "method" or len(method_parents) < 2 or not d.parent:
            return d.name
        return f"{d.parent}.{d.name.removeprefix('self.')}"

    heads = list(dict.fromkeys(d.name for d in containers))
    tails = list(dict.fromkeys(label(d) for d in members))
    total = len(heads) + len(tails)
    heads, tails = heads[:limit], tails[: max(0, limit - len(heads))]
    text = ", ".join(heads)
    if tails:
        text = f"{text}; {', '.join(tails)}" if text else ", ".join(tails)
    hidden = total - len(heads) - len(tails)
    return f"{text} (+{hidden} more)" if hidden > 0 else text
