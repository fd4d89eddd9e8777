"""What a project manifest says: the project's name, version, dependencies, test command
and the frameworks it is built on.

`read_manifest(path, text)` reads the manifests an agent commonly opens (mix.exs,
package.json, pyproject.toml, Cargo.toml, go.mod, Gemfile, requirements*.txt,
composer.json, build.gradle(.kts), pom.xml) with the parser each format has (tomllib,
json, the Elixir grammar for mix.exs) and careful line patterns where a format is a
program (Gemfile, Gradle) or line-based (go.mod, requirements). A read that is only part of
the file, or broken mid-edit, gives what can be read, or None; nothing here raises.
Frameworks come from one table, `FRAMEWORKS`, of dependency names. `summarize_manifest(m)`
is the short text a fact carries.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import PurePosixPath
from typing import Any

from tree_sitter import Node, Query, QueryCursor
from tree_sitter_language_pack import get_language

from memoryapp.lib.code.definitions import parser

logger = logging.getLogger(__name__)


@dataclass
class Manifest:
    """`language` is a display name ("Elixir"); `dependencies` are names only, in file
    order, runtime before development ones; `language_version` is the requirement on the
    language or toolchain (`~> 1.15`, `>=3.12`, `1.22`) when the file states one."""

    file: str
    language: str
    name: str | None = None
    version: str | None = None
    dependencies: list[str] = field(default_factory=list)
    test_command: str | None = None
    frameworks: list[str] = field(default_factory=list)
    language_version: str | None = None


# Dependency name → framework, one row each. Python names are compared normalised
# (lower case, runs of "-_." as "-"); Go module paths without their /vN suffix.
FRAMEWORKS: dict[str, str] = {
    # Elixir
    "phoenix": "Phoenix",
    "phoenix_live_view": "Phoenix LiveView",
    "ecto": "Ecto",
    "ecto_sql": "Ecto",
    "absinthe": "Absinthe",
    "oban": "Oban",
    "ash": "Ash",
    "nerves": "Nerves",
    "broadway": "Broadway",
    # Python
    "django": "Django",
    "djangorestframework": "Django REST framework",
    "django-ninja": "Django Ninja",
    "flask": "Flask",
    "fastapi": "FastAPI",
    "starlette": "Starlette",
    "litestar": "Litestar",
    "tornado": "Tornado",
    "aiohttp": "aiohttp",
    "pyramid": "Pyramid",
    "celery": "Celery",
    "sqlalchemy": "SQLAlchemy",
    "streamlit": "Streamlit",
    "torch": "PyTorch",
    "tensorflow": "TensorFlow",
    # Ruby
    "rails": "Rails",
    "sinatra": "Sinatra",
    "hanami": "Hanami",
    # JavaScript / TypeScript
    "next": "Next.js",
    "react": "React",
    "react-native": "React Native",
    "vue": "Vue",
    "nuxt": "Nuxt",
    "svelte": "Svelte",
    "@sveltejs/kit": "SvelteKit",
    "@angular/core": "Angular",
    "solid-js": "Solid",
    "astro": "Astro",
    "@remix-run/react": "Remix",
    "express": "Express",
    "fastify": "Fastify",
    "koa": "Koa",
    "hono": "Hono",
    "@nestjs/core": "NestJS",
    "electron": "Electron",
    "@prisma/client": "Prisma",
    # Rust
    "axum": "Axum",
    "actix-web": "Actix Web",
    "rocket": "Rocket",
    "warp": "Warp",
    "tokio": "Tokio",
    "tauri": "Tauri",
    "leptos": "Leptos",
    "bevy": "Bevy",
    "diesel": "Diesel",
    "sqlx": "SQLx",
    # Go
    "github.com/gin-gonic/gin": "Gin",
    "github.com/labstack/echo": "Echo",
    "github.com/gofiber/fiber": "Fiber",
    "github.com/go-chi/chi": "chi",
    "github.com/gorilla/mux": "Gorilla mux",
    "gorm.io/gorm": "GORM",
    "github.com/spf13/cobra": "Cobra",
    # Java / Kotlin (Maven artifact names)
    "spring-boot": "Spring Boot",
    "ktor-server-core": "Ktor",
    "quarkus-core": "Quarkus",
    "micronaut-runtime": "Micronaut",
    # PHP
    "laravel/framework": "Laravel",
    "symfony/framework-bundle": "Symfony",
    "slim/slim": "Slim",
}

# What a project uses beside its framework (a job queue, an ORM, a runtime): named by a
# manifest, but weak evidence of what the project is built on (a Phoenix app with Oban
# is a Phoenix app).
LIBRARIES = frozenset(
    {"Ecto", "Oban", "Broadway", "Absinthe", "Celery", "SQLAlchemy", "Prisma", "Tokio",
     "Diesel", "SQLx", "GORM"}
)  # fmt: skip


def _framework(dependency: str) -> str | None:
    name = dependency.lower()
    if name in FRAMEWORKS:
        return FRAMEWORKS[name]
    if name.startswith("spring-boot-starter"):
        return "Spring Boot"
    normalised = re.sub(r"[-_.]+", "-", name)
    if normalised in FRAMEWORKS:
        return FRAMEWORKS[normalised]
    return FRAMEWORKS.get(re.sub(r"/v\d+$", "", name))


def frameworks_of(dependencies: Iterable[str]) -> list[str]:
    """The frameworks named by `dependencies`, each once, in dependency order."""
    found = (_framework(dependency) for dependency in dependencies)
    return list(dict.fromkeys(name for name in found if name))


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(name for name in names if name))


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- TOML and JSON that may be cut short ------------------------------------------------

_TOML_ERROR_LINE = re.compile(r"at line (\d+)")


def _lenient_toml(text: str) -> dict[str, Any] | None:
    """tomllib, dropping the lines it chokes on (a read cut mid-table, an edit half done),
    a bounded number of times."""
    lines = text.split("\n")
    for _ in range(50):
        try:
            return tomllib.loads("\n".join(lines))
        except tomllib.TOMLDecodeError as error:
            if not lines:
                return None
            match = _TOML_ERROR_LINE.search(str(error))
            if match is None and "end of document" not in str(error):
                return None
            index = min(int(match.group(1)), len(lines)) - 1 if match else len(lines) - 1
            del lines[max(index, 0)]
    return None


def _lenient_json(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _json_keys(text: str, key: str) -> list[str]:
    """The keys of the object `"key": { ... }` in JSON that would not load."""
    match = re.search(rf'"{re.escape(key)}"\s*:\s*\{{([^}}]*)', text)
    return re.findall(r'"([^"]+)"\s*:', match.group(1)) if match else []


def _json_string(text: str, key: str) -> str | None:
    match = re.search(rf'^\s*"{re.escape(key)}"\s*:\s*"([^"]*)"', text, re.MULTILINE)
    return match.group(1) if match else None


# --- one reader per format ---------------------------------------------------------------


def _package_json(text: str) -> Manifest | None:
    data = _lenient_json(text)
    if data is None:  # part of the file: read what the lines say
        name, version = _json_string(text, "name"), _json_string(text, "version")
        dependencies = _json_keys(text, "dependencies") + _json_keys(text, "devDependencies")
        scripts = {key: "" for key in _json_keys(text, "scripts")}
        engines, manager = None, _json_string(text, "packageManager") or ""
    else:
        name, version = _string(data.get("name")), _string(data.get("version"))
        dependencies = []
        for key in ("dependencies", "devDependencies"):
            section = data.get(key)
            if isinstance(section, dict):
                dependencies += list(section)
        scripts = data.get("scripts") if isinstance(data.get("scripts"), dict) else {}
        engines = data.get("engines") if isinstance(data.get("engines"), dict) else {}
        engines = _string(engines.get("node"))
        manager = str(data.get("packageManager") or "")
    dependencies = _unique(dependencies)
    if not (name or dependencies):
        return None
    test = None
    script = scripts.get("test")
    if isinstance(script, str) and "no test specified" not in script:
        runner = manager.split("@")[0] if manager.split("@")[0] in ("pnpm", "yarn", "bun") else ""
        test = f"{runner or 'npm'} test"
    language = "TypeScript" if "typescript" in dependencies else "JavaScript"
    return Manifest(
        "package.json",
        language,
        name,
        version,
        dependencies,
        test,
        frameworks_of(dependencies),
        engines,
    )


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return match.group(1) if match else ""


def _python_test(dependencies: list[str], data: dict[str, Any]) -> str | None:
    tools = data.get("tool") if isinstance(data.get("tool"), dict) else {}
    if "pytest" in tools or any(d.lower() in ("pytest", "pytest-django") for d in dependencies):
        return "pytest"
    return None


def _pyproject(text: str) -> Manifest | None:
    data = _lenient_toml(text)
    if data is None:
        return None
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
    poetry = tool.get("poetry") if isinstance(tool.get("poetry"), dict) else {}
    names = [_requirement_name(requirement) for requirement in _pep_requirements(project, data)]
    names += _poetry_dependencies(poetry)
    dependencies = _unique(names)
    python = _string(project.get("requires-python"))
    if python is None and isinstance(poetry.get("dependencies"), dict):
        python = _string(poetry["dependencies"].get("python"))
    name = _string(project.get("name")) or _string(poetry.get("name"))
    version = _string(project.get("version")) or _string(poetry.get("version"))
    if not (name or dependencies):
        return None
    return Manifest(
        "pyproject.toml",
        "Python",
        name,
        version,
        dependencies,
        _python_test(dependencies, data),
        frameworks_of(dependencies),
        python,
    )


def _pep_requirements(project: dict, data: dict) -> list[str]:
    """The requirement strings of `[project]` (dependencies, optional ones) and of
    `[dependency-groups]`."""
    requirements: list[str] = []
    for key in ("dependencies",):
        if isinstance(project.get(key), list):
            requirements += [str(item) for item in project[key]]
    for extra in (project.get("optional-dependencies") or {}).values():
        requirements += [str(item) for item in extra] if isinstance(extra, list) else []
    for group in (data.get("dependency-groups") or {}).values():
        requirements += [item for item in group if isinstance(item, str)]
    return requirements


def _poetry_dependencies(poetry: dict) -> list[str]:
    """The package names of `[tool.poetry]`'s dependencies, dev ones and groups (not python)."""
    names: list[str] = []
    poetry_groups = [poetry.get("dependencies"), poetry.get("dev-dependencies")]
    poetry_groups += [g.get("dependencies") for g in (poetry.get("group") or {}).values()]
    for group in poetry_groups:
        if isinstance(group, dict):
            names += [name for name in group if name.lower() != "python"]
    return names


def _requirements(text: str, file: str) -> Manifest | None:
    names = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue  # -r other.txt, -e ., --hash=...
        names.append(_requirement_name(line))
    dependencies = _unique(names)
    if not dependencies:
        return None
    test = "pytest" if "pytest" in (d.lower() for d in dependencies) else None
    return Manifest(file, "Python", None, None, dependencies, test, frameworks_of(dependencies))


def _cargo(text: str) -> Manifest | None:
    data = _lenient_toml(text)
    if data is None:
        return None
    package = data.get("package") if isinstance(data.get("package"), dict) else {}
    workspace = data.get("workspace") if isinstance(data.get("workspace"), dict) else {}
    names: list[str] = []
    for table in (data, workspace):
        for key in ("dependencies", "dev-dependencies", "build-dependencies"):
            if isinstance(table.get(key), dict):
                names += list(table[key])
    dependencies = _unique(names)
    name = _string(package.get("name"))
    if not (name or dependencies or workspace):
        return None
    version = package.get("version")
    rust = _string(package.get("rust-version")) or _string(package.get("edition"))
    return Manifest(
        "Cargo.toml",
        "Rust",
        name,
        _string(version),
        dependencies,
        "cargo test",
        frameworks_of(dependencies),
        f"edition {rust}" if rust and rust.isdigit() and len(rust) == 4 else rust,
    )


def _go_mod(text: str) -> Manifest | None:
    module = re.search(r"^module\s+(\S+)", text, re.MULTILINE)
    go = re.search(r"^go\s+(\S+)", text, re.MULTILINE)
    names = []
    in_block = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("require ("):
            in_block = True
            continue
        if in_block and line.startswith(")"):
            in_block = False
            continue
        if "// indirect" in line:
            continue  # pulled in by a dependency, not chosen by the project
        if in_block and line and not line.startswith("//"):
            names.append(line.split()[0])
        elif line.startswith("require ") and not line.startswith("require ("):
            names.append(line.split()[1])
    dependencies = _unique(names)
    if module is None and not dependencies:
        return None
    return Manifest(
        "go.mod",
        "Go",
        module.group(1) if module else None,
        None,
        dependencies,
        "go test ./...",
        frameworks_of(dependencies),
        go.group(1) if go else None,
    )


def _gemfile(text: str) -> Manifest | None:
    names = re.findall(r"""^\s*gem\s*\(?\s*["']([^"']+)["']""", text, re.MULTILINE)
    ruby = re.search(r"""^\s*ruby\s+["']([^"']+)["']""", text, re.MULTILINE)
    dependencies = _unique(names)
    if not dependencies:
        return None
    if any(name in ("rspec", "rspec-rails") for name in dependencies):
        test = "bundle exec rspec"
    elif "rails" in dependencies:
        test = "bin/rails test"
    else:
        test = "bundle exec rake test"
    return Manifest(
        "Gemfile",
        "Ruby",
        None,
        None,
        dependencies,
        test,
        frameworks_of(dependencies),
        ruby.group(1) if ruby else None,
    )


def _composer(text: str) -> Manifest | None:
    data = _lenient_json(text)
    if data is None:
        names = _json_keys(text, "require") + _json_keys(text, "require-dev")
        name, version, scripts, php = _json_string(text, "name"), None, {}, None
    else:
        names = []
        for key in ("require", "require-dev"):
            if isinstance(data.get(key), dict):
                names += list(data[key])
        name, version = _string(data.get("name")), _string(data.get("version"))
        scripts = data.get("scripts") if isinstance(data.get("scripts"), dict) else {}
        require = data.get("require") if isinstance(data.get("require"), dict) else {}
        php = _string(require.get("php"))
    dependencies = _unique(n for n in names if n != "php" and not n.startswith("ext-"))
    if not (name or dependencies):
        return None
    if "test" in scripts:
        test = "composer test"
    elif "phpunit/phpunit" in dependencies:
        test = "vendor/bin/phpunit"
    else:
        test = None
    return Manifest(
        "composer.json", "PHP", name, version, dependencies, test, frameworks_of(dependencies), php
    )


_GRADLE_DEPENDENCY = re.compile(
    r"""^\s*(?:implementation|api|compileOnly|runtimeOnly|testImplementation|"""
    r"""testRuntimeOnly|kapt|ksp|annotationProcessor|developmentOnly)\s*\(?\s*"""
    r"""["']([^"':]+):([^"':]+)""",
    re.MULTILINE,
)


def _gradle(text: str, file: str) -> Manifest | None:
    dependencies = _unique(artifact for _, artifact in _GRADLE_DEPENDENCY.findall(text))
    plugins = re.findall(r"""id\s*\(?\s*["']([^"']+)["']""", text)
    if not (dependencies or plugins):
        return None
    kotlin = file.endswith(".kts") or any("kotlin" in plugin for plugin in plugins)
    frameworks = frameworks_of(dependencies)
    if "org.springframework.boot" in plugins and "Spring Boot" not in frameworks:
        frameworks.insert(0, "Spring Boot")
    version = re.search(r"""^version\s*=\s*["']([^"']+)["']""", text, re.MULTILINE)
    return Manifest(
        file,
        "Kotlin" if kotlin else "Java",
        None,
        version.group(1) if version else None,
        dependencies,
        "./gradlew test",
        frameworks,
    )


def _pom(text: str) -> Manifest | None:
    dependencies = _unique(
        re.findall(r"<dependency>.*?<artifactId>\s*([^<\s]+)\s*</artifactId>", text, re.DOTALL)
    )
    parent = re.search(r"<parent>.*?<artifactId>\s*([^<\s]+)", text, re.DOTALL)
    # The project's own coordinates are the ones outside <parent>, <dependencies>, <build>.
    outside = r"<(parent|dependencies|dependencyManagement|build|plugins)>.*?</\1>"
    own = re.sub(outside, "", text, flags=re.DOTALL)
    name = re.search(r"<artifactId>\s*([^<\s]+)", own)
    version = re.search(r"<version>\s*([^<\s]+)", own)
    java = re.search(r"<(?:java\.version|maven\.compiler\.release)>\s*([^<\s]+)", text)
    if not (name or dependencies):
        return None
    frameworks = frameworks_of([parent.group(1)] if parent else []) + frameworks_of(dependencies)
    kotlin = any(d.startswith("kotlin-stdlib") for d in dependencies)
    return Manifest(
        "pom.xml",
        "Kotlin" if kotlin else "Java",
        name.group(1) if name else None,
        version.group(1) if version else None,
        dependencies,
        "mvn test",
        _unique(frameworks),
        java.group(1) if java else None,
    )


# --- mix.exs, read with the Elixir grammar ----------------------------------------------

_MIX_QUERY = """
(pair key: (keyword) @key value: (_) @value)
(unary_operator operand: (call target: (identifier) @attribute
  (arguments . (string (quoted_content) @attribute_value))))
(call target: (identifier) @def (#any-of? @def "def" "defp")
  (arguments (identifier) @head (#eq? @head "deps"))) @deps
"""


def _mix_text(node: Node) -> str:
    return node.text.decode("utf-8", "replace") if node.text is not None else ""


def _mix_tuples(node: Node, strict: bool = False) -> list[str]:
    """`{:phoenix, "~> 1.7"}` → phoenix, for every dependency tuple under `node`; `strict`
    asks for a requirement string or options after the name (outside `deps`, where
    `{:ok, value}` is just a tuple)."""
    names = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "tuple":
            items = current.named_children
            if items and items[0].type == "atom":
                shaped = len(items) > 1 and items[1].type in ("string", "keywords")
                if shaped or not strict:
                    names.append((current.start_byte, _mix_text(items[0]).lstrip(":")))
            continue
        if current.type != "comment":
            stack.extend(current.named_children)
    return [name for _, name in sorted(names)]


def _mix(text: str) -> Manifest | None:
    data = text.encode("utf-8", "replace")
    root = parser("elixir").parse(data).root_node
    query = _mix_query()
    keys: dict[str, Node] = {}
    attributes: dict[str, str] = {}
    deps_nodes: list[Node] = []
    for _, captures in QueryCursor(query).matches(root):
        if "key" in captures:
            key = _mix_text(captures["key"][0]).strip().rstrip(":")
            keys.setdefault(key, captures["value"][0])
        elif "attribute" in captures:
            name = _mix_text(captures["attribute"][0])
            attributes.setdefault(name, _mix_text(captures["attribute_value"][0]))
        elif "deps" in captures:
            deps_nodes.append(captures["deps"][0])

    def value(key: str) -> str | None:
        node = keys.get(key)
        if node is None:
            return None
        if node.type == "string":
            return _mix_text(node).strip('"') or None
        if node.type == "atom":
            return _mix_text(node).lstrip(":")
        if node.type == "unary_operator":  # version: @version
            return attributes.get(_mix_text(node).lstrip("@").strip())
        return None

    names: list[str] = []
    for node in deps_nodes:
        names += _mix_tuples(node)
    if not deps_nodes:  # a read that starts below `defp deps do`
        names = _mix_tuples(root, strict=True)
    dependencies = _unique(names)
    app = value("app")
    if not (app or dependencies):
        return None
    return Manifest(
        "mix.exs",
        "Elixir",
        app,
        value("version"),
        dependencies,
        "mix test",
        frameworks_of(dependencies),
        value("elixir"),
    )


@cache
def _mix_query() -> Query:
    return Query(get_language("elixir"), _MIX_QUERY)


# --- entry points ----------------------------------------------------------------------

_READERS: dict[str, Callable[[str], Manifest | None]] = {
    "mix.exs": _mix,
    "package.json": _package_json,
    "pyproject.toml": _pyproject,
    "Cargo.toml": _cargo,
    "go.mod": _go_mod,
    "Gemfile": _gemfile,
    "composer.json": _composer,
    "pom.xml": _pom,
}


def is_manifest(path: str) -> bool:
    """Whether `read_manifest` knows the file at `path`."""
    name = PurePosixPath(path.replace("\\", "/")).name
    return (
        name in _READERS
        or name in ("build.gradle", "build.gradle.kts")
        or (name.startswith("requirements") and name.endswith((".txt", ".in")))
    )


def read_manifest(path: str, text: str) -> Manifest | None:
    """The manifest at `path` read from `text`, or None when the file is not a manifest we
    know or says nothing we can use."""
    name = PurePosixPath(path.replace("\\", "/")).name
    if not is_manifest(path) or not text or not text.strip():
        return None
    try:
        if name in _READERS:
            return _READERS[name](text)
        if name.startswith("build.gradle"):
            return _gradle(text, name)
        return _requirements(text, name)
    except Exception:  # a manifest we misread must not fail an extraction
        logger.exception("reading the manifest %s failed", path)
        return None


def summarize_manifest(manifest: Manifest, limit: int = 8) -> str:
    """`Elixir project spotter 0.1.0 (Phoenix, Ecto); deps: phoenix, ecto_sql (+12 more);
    tests: mix test`."""
    title = " ".join(
        part for part in (manifest.language, "project", manifest.name, manifest.version) if part
    )
    if manifest.frameworks:
        title += f" ({', '.join(manifest.frameworks)})"
    parts = [title]
    if manifest.dependencies:
        shown = ", ".join(manifest.dependencies[:limit])
        hidden = len(manifest.dependencies) - limit
        parts.append(f"deps: {shown}" + (f" (+{hidden} more)" if hidden > 0 else ""))
    if manifest.test_command:
        parts.append(f"tests: {manifest.test_command}")
    return "; ".join(parts)
