"""Which language a file is written in, from its name alone.

One table, `LANGUAGES`, maps a language (the tree-sitter grammar name where one exists, so
the parser can be looked up by it) to its display name and to the file extensions and
well-known file names that mean it. Adding a language is one row. `language_of(path)` gives
the language of a path (or None when the name says nothing), `display_name(language)` the
name to show a person ("TypeScript", "Elixir").
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import NamedTuple


class Language(NamedTuple):
    display: str
    extensions: tuple[str, ...] = ()
    filenames: tuple[str, ...] = ()


# Keys are tree-sitter-language-pack grammar names where one exists.
LANGUAGES: dict[str, Language] = {
    "python": Language("Python", (".py", ".pyi", ".pyw"), ("SConstruct", "SConscript")),
    "javascript": Language("JavaScript", (".js", ".mjs", ".cjs", ".jsx")),
    "typescript": Language("TypeScript", (".ts", ".mts", ".cts")),
    "tsx": Language("TypeScript", (".tsx",)),
    "go": Language("Go", (".go",)),
    "gomod": Language("Go module", (), ("go.mod",)),
    "rust": Language("Rust", (".rs",)),
    "elixir": Language("Elixir", (".ex", ".exs")),
    "heex": Language("HEEx", (".heex", ".leex")),
    "erlang": Language("Erlang", (".erl", ".hrl"), ("rebar.config",)),
    "ruby": Language(
        "Ruby", (".rb", ".rake", ".gemspec"), ("Gemfile", "Rakefile", "Guardfile", "config.ru")
    ),
    "java": Language("Java", (".java",)),
    "kotlin": Language("Kotlin", (".kt", ".kts")),
    "scala": Language("Scala", (".scala", ".sc")),
    "groovy": Language("Groovy", (".groovy", ".gradle")),
    "swift": Language("Swift", (".swift",)),
    "objc": Language("Objective-C", (".m", ".mm")),
    "c": Language("C", (".c", ".h")),
    "cpp": Language("C++", (".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx", ".h++", ".ipp")),
    "csharp": Language("C#", (".cs", ".csx")),
    "fsharp": Language("F#", (".fs", ".fsx")),
    "php": Language("PHP", (".php", ".phtml")),
    "lua": Language("Lua", (".lua",)),
    "perl": Language("Perl", (".pl", ".pm")),
    "r": Language("R", (".r",)),
    "julia": Language("Julia", (".jl",)),
    "dart": Language("Dart", (".dart",)),
    "haskell": Language("Haskell", (".hs",)),
    "ocaml": Language("OCaml", (".ml", ".mli")),
    "clojure": Language("Clojure", (".clj", ".cljs", ".cljc", ".edn")),
    "gleam": Language("Gleam", (".gleam",)),
    "zig": Language("Zig", (".zig",)),
    "nim": Language("Nim", (".nim",)),
    "solidity": Language("Solidity", (".sol",)),
    "bash": Language(
        "Shell", (".sh", ".bash", ".zsh"), (".bashrc", ".zshrc", ".profile", ".bash_profile")
    ),
    "fish": Language("Fish", (".fish",)),
    "powershell": Language("PowerShell", (".ps1", ".psm1")),
    "sql": Language("SQL", (".sql",)),
    "graphql": Language("GraphQL", (".graphql", ".gql")),
    "proto": Language("Protocol Buffers", (".proto",)),
    "html": Language("HTML", (".html", ".htm")),
    "embeddedtemplate": Language("Embedded template", (".erb", ".ejs")),
    "vue": Language("Vue", (".vue",)),
    "svelte": Language("Svelte", (".svelte",)),
    "css": Language("CSS", (".css",)),
    "scss": Language("SCSS", (".scss", ".sass")),
    "markdown": Language("Markdown", (".md", ".markdown", ".mdx")),
    "rst": Language("reStructuredText", (".rst",)),
    "yaml": Language("YAML", (".yml", ".yaml")),
    "toml": Language("TOML", (".toml",), ("Cargo.lock", "poetry.lock", "uv.lock")),
    "json": Language("JSON", (".json", ".jsonc", ".json5"), (".prettierrc", ".eslintrc")),
    "xml": Language("XML", (".xml", ".xsd", ".xsl", ".svg", ".plist"), ("pom.xml",)),
    "ini": Language("INI", (".ini", ".cfg", ".conf"), (".editorconfig",)),
    "dockerfile": Language("Dockerfile", (".dockerfile",), ("Dockerfile", "Containerfile")),
    "make": Language("Makefile", (".mk",), ("Makefile", "makefile", "GNUmakefile")),
    "cmake": Language("CMake", (".cmake",), ("CMakeLists.txt",)),
    "hcl": Language("HCL", (".hcl", ".tf", ".tfvars")),
    "nix": Language("Nix", (".nix",)),
    "requirements": Language("pip requirements", (), ("requirements.txt",)),
}

_BY_FILENAME: dict[str, str] = {
    filename: language for language, row in LANGUAGES.items() for filename in row.filenames
}
# Extensions are matched case-insensitively (".R", ".H" and ".PY" are seen in the wild).
_BY_EXTENSION: dict[str, str] = {
    extension.lower(): language
    for language, row in LANGUAGES.items()
    for extension in row.extensions
}


def language_of(path: str) -> str | None:
    """The language of the file at `path`, or None when its name says nothing we know.

    Well-known file names win over extensions (`CMakeLists.txt` is CMake, not text), and
    `requirements-dev.txt` style names count as pip requirements.
    """
    name = PurePosixPath(path.replace("\\", "/")).name
    if not name:
        return None
    if name in _BY_FILENAME:
        return _BY_FILENAME[name]
    if name.startswith("requirements") and name.endswith((".txt", ".in")):
        return "requirements"
    if name.startswith("Dockerfile."):
        return "dockerfile"
    suffix = PurePosixPath(name).suffix.lower()
    return _BY_EXTENSION.get(suffix) if suffix else None


def display_name(language: str) -> str:
    """The name a person uses for `language` ("TypeScript"); unknown names are returned as
    they are, so a caller can pass anything."""
    row = LANGUAGES.get(language)
    return row.display if row else language
