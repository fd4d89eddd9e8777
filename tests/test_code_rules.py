"""The code's shape rules, checked on the source tree, as a ratchet that only tightens.

Four rules, each measured with the standard library's ``ast`` over every ``.py`` file under
``memoryapp/`` and ``agents/`` (issue 36, items 6 and 7):

1. **Layers import one way**: ``lib/`` (pure) <- ``core/`` <- ``http/`` <- ``api/``,
   ``ams/``, ``dashboard/``. ``lib`` imports nothing else of memoryapp and no framework
   (Django, ninja, Celery); ``core`` imports only ``lib``; ``http`` (the HTTP layer both
   APIs share: authentication, middleware, schema bases, the error contract) imports
   ``lib`` and ``core``; the three apps import ``lib``, ``core`` and ``http`` but not each
   other (the AMS API stands on ``core`` and ``http``, not on ``api`` internals); nothing
   under ``memoryapp/`` imports ``agents`` but ``clients/``, the management commands that
   send through the client (issue 36, item 6: "management commands that post through the
   client may import it: they are clients"), which stand on every layer but ``ams``; and
   ``agents`` imports no framework and nothing of memoryapp but the pure ``lib`` (which,
   while ``memoryapp/__init__.py`` loads the Celery app, still brings Django in). No app
   imports the project's wiring
   (``memoryapp/__init__.py``, ``settings.py``, ``urls.py``, ``celery.py``, ``wsgi.py``):
   settings are read through ``django.conf.settings``. Every import statement counts,
   deferred ones inside functions and ``TYPE_CHECKING`` blocks included; dotted strings
   (``INSTALLED_APPS``, ``importlib``) do not. Exempt as importers: that wiring,
   which exists to tie the apps together (``urls.py`` mounts every app), and the
   generated ``migrations/`` packages; both may import any memoryapp module, never
   ``agents``. A new sub-package of memoryapp fails until it is given a layer in
   ``MAY_IMPORT``.
2. **No import cycles** between the modules of ``memoryapp/`` and ``agents/``
   (migrations left out): a graph of explicit imports, deferred ones included
   (``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
   ``pkg``; the implicit import of a parent package is not an edge), whose strongly
   connected components (Tarjan) of two or more modules are the cycles.
3. **No function over 80 lines**: ``end_lineno - lineno + 1`` of the ``def`` (decorators
   not counted, the docstring counted), for every function and method, nested ones
   included, named ``path:Class.method.inner``; migrations left out.
4. **No function above cyclomatic complexity 25**, as radon's ``cc_visit_ast`` measures
   it (a nested function's branches count for it, not for its parent).

The code does not hold these rules yet, so ``tests/code_rules_allowed.toml`` lists each
violation the tree had when the list was written, with its measure. A test fails when a
violation appears that is not listed, when a listed one grows (more lines, more
complexity, a cycle with more modules), and when a listed one shrinks or goes: then the
message says which line of the list to change, so the list only ever gets shorter.
``python -m tests.test_code_rules --write`` rewrites the list from the tree and prints
what it let grow, for a reviewer to see.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
import tomllib
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from radon.complexity import cc_visit_ast
from radon.visitors import Function

ROOT = Path(__file__).resolve().parent.parent
ALLOWED_FILE = Path(__file__).resolve().parent / "code_rules_allowed.toml"
PACKAGES = ("memoryapp", "agents")

MAX_FUNCTION_LINES = 80
MAX_COMPLEXITY = 25

# The project's wiring: the modules that tie the apps together (area "wiring").
WIRING = {"memoryapp", "memoryapp.settings", "memoryapp.urls", "memoryapp.celery", "memoryapp.wsgi"}
# Frameworks a pure module (lib/, agents/) does without.
FRAMEWORKS = {"django", "ninja", "celery", "django_htmx"}
_APPS = {
    "memoryapp.lib",
    "memoryapp.core",
    "memoryapp.http",
    "memoryapp.api",
    "memoryapp.ams",
    "memoryapp.dashboard",
    "memoryapp.clients",
}
# Area -> the memoryapp/agents areas its modules may import (each may import itself).
MAY_IMPORT: dict[str, set[str]] = {
    "memoryapp.lib": {"memoryapp.lib"},
    "memoryapp.core": {"memoryapp.lib", "memoryapp.core"},
    "memoryapp.http": {"memoryapp.lib", "memoryapp.core", "memoryapp.http"},
    "memoryapp.api": {"memoryapp.lib", "memoryapp.core", "memoryapp.http", "memoryapp.api"},
    "memoryapp.ams": {"memoryapp.lib", "memoryapp.core", "memoryapp.http", "memoryapp.ams"},
    "memoryapp.dashboard": {
        "memoryapp.lib",
        "memoryapp.core",
        "memoryapp.http",
        "memoryapp.dashboard",
    },
    # The commands that are clients of the agent API (issue 36, item 6: "management
    # commands that post through the client may import it: they are clients").
    "memoryapp.clients": {
        "memoryapp.lib",
        "memoryapp.core",
        "memoryapp.http",
        "memoryapp.api",
        "memoryapp.dashboard",
        "memoryapp.clients",
        "agents",
    },
    "wiring": _APPS | {"wiring", "migrations"},
    "migrations": _APPS | {"wiring", "migrations"},
    "agents": {"agents", "memoryapp.lib"},
}
PURE = {"memoryapp.lib", "agents"}


@dataclass(frozen=True)
class Module:
    name: str  # dotted: memoryapp.core.models
    path: str  # relative to the root, POSIX: memoryapp/core/models.py
    is_package: bool
    tree: ast.Module = field(compare=False, repr=False)

    @property
    def is_migration(self) -> bool:
        return "migrations" in self.name.split(".")


def load_modules(root: Path) -> dict[str, Module]:
    """Every module under the root's memoryapp/ and agents/, parsed, by dotted name."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(root)
            parts = list(rel.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
            except SyntaxError as error:
                raise AssertionError(f"{rel} does not parse: {error}") from error
            name = ".".join(parts)
            modules[name] = Module(name, rel.as_posix(), is_package, tree)
    return modules


def imports_of(module: Module, known: dict[str, Module]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement anywhere in the module."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.name.split(".")
                if not module.is_package:
                    package = package[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield (submodule if submodule in known else base), node.lineno


def area_of(name: str) -> str:
    """The layer a dotted module name belongs to (or its top-level package, outside ours)."""
    parts = name.split(".")
    if parts[0] == "agents":
        return "agents"
    if parts[0] != "memoryapp":
        return parts[0]
    if "migrations" in parts:
        return "migrations"
    if name in WIRING or ".".join(parts[:2]) in WIRING:
        return "wiring"
    return ".".join(parts[:2])


def unlayered(modules: dict[str, Module]) -> list[str]:
    """Modules in an area MAY_IMPORT does not know (a new sub-package needs a layer)."""
    return sorted(m.path for m in modules.values() if area_of(m.name) not in MAY_IMPORT)


def layer_edges(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Forbidden imports, "importer -> imported", each with the places that make it."""
    edges: dict[str, list[str]] = defaultdict(list)
    for module in modules.values():
        source = area_of(module.name)
        if source not in MAY_IMPORT:
            continue
        for target, line in imports_of(module, modules):
            area = area_of(target)
            if target.split(".")[0] in PACKAGES:
                allowed = area in MAY_IMPORT[source]
            else:
                allowed = not (source in PURE and area in FRAMEWORKS)
            places = edges[f"{module.name} -> {target}"] if not allowed else []
            if f"{module.path}:{line}" not in places:
                places.append(f"{module.path}:{line}")
    return dict(edges)


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (migrations left out)."""
    names = {n for n, m in modules.items() if not m.is_migration}
    graph: dict[str, set[str]] = {n: set() for n in names}
    for name in names:
        for target, _line in imports_of(modules[name], modules):
            # The longest of our modules the target names (import a.b.c of a gone c is a.b).
            while target and target not in names:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Tarjan's strongly connected components of two or more nodes, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def a_cycle(graph: dict[str, set[str]], component: tuple[str, ...]) -> list[str]:
    """One shortest import cycle through the component's first module, for the message."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    return list(component)


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def functions_of(module: Module) -> Iterator[tuple[str, FunctionNode]]:
    """(Class.method.inner, node) for every function defined anywhere in the module."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, FunctionNode]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                yield from walk(child, f"{name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(module.tree, "")


def complexity_of(node: FunctionNode) -> int:
    """Radon's cyclomatic complexity of one function (its closures measured apart)."""
    blocks = cc_visit_ast(ast.Module(body=[node], type_ignores=[]))
    return next(b.complexity for b in blocks if isinstance(b, Function) and b.lineno == node.lineno)


def function_measures(modules: dict[str, Module]) -> tuple[dict[str, int], dict[str, int]]:
    """Functions over the line limit and over the complexity limit, "path:name" -> measure.

    Two functions of one file with one name (a property's getter and setter) share a key,
    which holds the larger measure.
    """
    lengths: dict[str, int] = {}
    complexities: dict[str, int] = {}
    for module in modules.values():
        if module.is_migration:
            continue
        for name, node in functions_of(module):
            key = f"{module.path}:{name}"
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                lengths[key] = max(length, lengths.get(key, 0))
            complexity = complexity_of(node)
            if complexity > MAX_COMPLEXITY:
                complexities[key] = max(complexity, complexities.get(key, 0))
    return lengths, complexities


@dataclass
class Measures:
    """The tree's violations of each rule."""

    function_lines: dict[str, int]
    complexity: dict[str, int]
    layer_edges: dict[str, list[str]]  # edge -> where it is made
    cycles: dict[tuple[str, ...], list[str]]  # component -> one cycle through it
    unlayered: list[str]


def measure(root: Path) -> Measures:
    modules = load_modules(root)
    lengths, complexities = function_measures(modules)
    graph = import_graph(modules)
    cycles = {c: a_cycle(graph, c) for c in strongly_connected(graph)}
    return Measures(lengths, complexities, layer_edges(modules), cycles, unlayered(modules))


@functools.cache
def measure_tree() -> Measures:
    return measure(ROOT)


@dataclass
class Allowed:
    function_lines: dict[str, int] = field(default_factory=dict)
    complexity: dict[str, int] = field(default_factory=dict)
    layer_edges: list[str] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)


def read_allowed(path: Path = ALLOWED_FILE) -> Allowed:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return Allowed(
        data.get("function_lines", {}),
        data.get("complexity", {}),
        data.get("layer_edges", []),
        data.get("cycles", []),
    )


def _entry(key: str, value: int) -> str:
    return f"{json.dumps(key)} = {value}"


def _cycle_line(component: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(json.dumps(m) for m in component) + "],"


def compare_measures(
    section: str, limit: str, current: dict[str, int], allowed: dict[str, int]
) -> list[str]:
    """What keeps current from matching allowed, one sentence per function."""
    problems = []
    for key, value in sorted(current.items()):
        if key not in allowed:
            problems.append(f"new: {key} is {value} ({limit}); make it smaller")
        elif value > allowed[key]:
            problems.append(f"worse: {key} is {value}, allowed {allowed[key]}; make it smaller")
        elif value < allowed[key]:
            problems.append(
                f"better, tighten {ALLOWED_FILE.name} [{section}]: change the line "
                f"`{_entry(key, allowed[key])}` to `{_entry(key, value)}`"
            )
    for key in sorted(allowed.keys() - current.keys()):
        problems.append(
            f"gone, tighten {ALLOWED_FILE.name} [{section}]: delete the line "
            f"`{_entry(key, allowed[key])}`"
        )
    return problems


def compare_edges(current: dict[str, list[str]], allowed: list[str]) -> list[str]:
    problems = []
    for edge, places in sorted(current.items()):
        if edge not in allowed:
            source = area_of(edge.split(" -> ")[0])
            rule = ", ".join(sorted(MAY_IMPORT[source]))
            problems.append(
                f"new: {edge} ({', '.join(places)}); {source} may import only {rule}"
                + (" and no framework" if source in PURE else "")
            )
    for edge in sorted(set(allowed) - current.keys()):
        problems.append(
            f"gone, tighten {ALLOWED_FILE.name}: delete the line `{json.dumps(edge)},` "
            "from layer_edges"
        )
    return problems


def compare_cycles(
    current: dict[tuple[str, ...], list[str]], allowed: list[list[str]]
) -> list[str]:
    listed = [tuple(sorted(c)) for c in allowed]
    problems = []
    for component, cycle in sorted(current.items()):
        if component in listed or any(set(component) < set(c) for c in listed):
            continue  # listed, or what is left of a listed one (said below)
        narrower = [c for c in listed if set(c) < set(component)]
        grew = f" (grew from {_cycle_line(narrower[0])[:-1]})" if narrower else ""
        problems.append(f"new: import cycle {' -> '.join(cycle)}{grew}; members {list(component)}")
    for component in listed:
        if component in current or any(set(component) < set(c) for c in current):
            continue  # listed and unchanged, or grown (said above)
        left = [c for c in current if set(c) < set(component)]
        if left:
            problems.append(
                f"better, tighten {ALLOWED_FILE.name} cycles: replace the line "
                f"`{_cycle_line(component)}` with "
                + " and ".join(f"`{_cycle_line(c)}`" for c in sorted(left))
            )
        else:
            problems.append(
                f"gone, tighten {ALLOWED_FILE.name}: delete the line `{_cycle_line(component)}` "
                "from cycles"
            )
    return problems


def allowed_text(measures: Measures) -> str:
    """The allowed list that holds exactly the tree's current violations."""
    lines = [
        "# Today's violations of the code rules (tests/test_code_rules.py), which may only",
        "# shrink: fix one, then change or delete its line here (the failing test says which).",
        "# Written by `python -m tests.test_code_rules --write`.",
        "",
        "# Imports that go against the layers, importer -> imported.",
        "layer_edges = [",
        *(f"    {json.dumps(edge)}," for edge in sorted(measures.layer_edges)),
        "]",
        "",
        "# Import cycles, each a strongly connected component's modules, sorted.",
        "cycles = [",
        *(f"    {_cycle_line(c)}" for c in sorted(measures.cycles)),
        "]",
        "",
        f"# Functions over {MAX_FUNCTION_LINES} lines (def to last line).",
        "[function_lines]",
        *(_entry(k, v) for k, v in sorted(measures.function_lines.items())),
        "",
        f"# Functions above cyclomatic complexity {MAX_COMPLEXITY} (radon).",
        "[complexity]",
        *(_entry(k, v) for k, v in sorted(measures.complexity.items())),
        "",
    ]
    return "\n".join(lines)


def write_allowed() -> None:
    """Rewrite the allowed list from the tree; say on stderr what it let in or grow."""
    measures = measure(ROOT)
    old = read_allowed() if ALLOWED_FILE.exists() else Allowed()
    grown = [
        p
        for p in compare_measures(
            "function_lines", "lines", measures.function_lines, old.function_lines
        )
        + compare_measures("complexity", "complexity", measures.complexity, old.complexity)
        + compare_edges(measures.layer_edges, old.layer_edges)
        + compare_cycles(measures.cycles, old.cycles)
        if p.startswith(("new", "worse"))
    ]
    ALLOWED_FILE.write_text(allowed_text(measures), encoding="utf-8")
    for problem in grown:
        print(f"let in: {problem}", file=sys.stderr)
    print(
        f"{ALLOWED_FILE.relative_to(ROOT)}: {len(measures.function_lines)} long functions, "
        f"{len(measures.complexity)} complex functions, {len(measures.layer_edges)} layer "
        f"edges, {len(measures.cycles)} cycles",
        file=sys.stderr,
    )


# The tree against the list.


def _fail_on(problems: list[str]) -> None:
    assert not problems, "\n".join(problems)


def test_every_module_has_a_layer():
    _fail_on(
        [f"{path}: give its package a layer in MAY_IMPORT" for path in measure_tree().unlayered]
    )


def test_layers_import_one_way():
    _fail_on(compare_edges(measure_tree().layer_edges, read_allowed().layer_edges))


def test_no_new_import_cycles():
    _fail_on(compare_cycles(measure_tree().cycles, read_allowed().cycles))


def test_no_new_long_functions():
    limit = f"over {MAX_FUNCTION_LINES} lines"
    _fail_on(
        compare_measures(
            "function_lines", limit, measure_tree().function_lines, read_allowed().function_lines
        )
    )


def test_no_new_complex_functions():
    limit = f"above complexity {MAX_COMPLEXITY}"
    _fail_on(
        compare_measures("complexity", limit, measure_tree().complexity, read_allowed().complexity)
    )


def test_allowed_list_is_well_formed():
    """The list reads back as what --write writes, so a hand edit keeps it regenerable."""
    allowed = read_allowed()
    assert allowed.layer_edges == sorted(set(allowed.layer_edges))
    assert [sorted(c) for c in allowed.cycles] == allowed.cycles
    assert all(v > MAX_FUNCTION_LINES for v in allowed.function_lines.values())
    assert all(v > MAX_COMPLEXITY for v in allowed.complexity.values())


# The checkers on a tiny synthetic tree: each rule can fail.

_BRANCHY = "def branchy(x):\n" + "".join(
    f"    if x == {i}:\n        return {i}\n" for i in range(30)
)
_LONG = "def long():\n" + "    x = 1\n" * 90

SYNTHETIC: dict[str, dict[str, str]] = {
    "clean": {},
    "long function": {"memoryapp/lib/a.py": _LONG},
    "long method": {"agents/m.py": "class A:\n    @property\n    " + _LONG.replace("\n", "\n    ")},
    "complex function": {"memoryapp/core/a.py": _BRANCHY},
    "lib imports core": {"memoryapp/lib/a.py": "from memoryapp.core import models\n"},
    "lib imports django": {"memoryapp/lib/a.py": "import django.db\n"},
    "deferred import of api in ams": {
        "memoryapp/ams/a.py": "def f():\n    from memoryapp.api.schemas import X\n"
    },
    "relative import across layers": {"memoryapp/core/a.py": "from ..api import schemas\n"},
    "server imports agents": {"memoryapp/urls.py": "import agents.client\n"},
    "core imports wiring": {"memoryapp/core/a.py": "from memoryapp import celery_app\n"},
    "agents imports core": {"agents/a.py": "from memoryapp.core.models import Agent\n"},
    "client command imports agents": {
        "memoryapp/clients/a.py": "from agents import client\nfrom memoryapp.api import schemas\n"
    },
    "api imports agents": {"memoryapp/api/a.py": "from agents.client import MemoryClient\n"},
    "agents imports a client command": {"agents/a.py": "from memoryapp.clients import a\n"},
    "two-module cycle": {
        "agents/a.py": "from agents import b\n",
        "agents/b.py": "def f():\n    from agents.a import g\n",
    },
    "unlayered package": {"memoryapp/newapp/a.py": "x = 1\n"},
}
# What each synthetic tree must report, as (rule, violation).
EXPECTED: dict[str, set[tuple[str, str]]] = {
    "clean": set(),
    "long function": {("function_lines", "memoryapp/lib/a.py:long")},
    "long method": {("function_lines", "agents/m.py:A.long")},
    "complex function": {("complexity", "memoryapp/core/a.py:branchy")},
    "lib imports core": {("layer_edges", "memoryapp.lib.a -> memoryapp.core.models")},
    "lib imports django": {("layer_edges", "memoryapp.lib.a -> django.db")},
    "deferred import of api in ams": {("layer_edges", "memoryapp.ams.a -> memoryapp.api.schemas")},
    "relative import across layers": {("layer_edges", "memoryapp.core.a -> memoryapp.api.schemas")},
    "server imports agents": {("layer_edges", "memoryapp.urls -> agents.client")},
    "core imports wiring": {("layer_edges", "memoryapp.core.a -> memoryapp")},
    "agents imports core": {("layer_edges", "agents.a -> memoryapp.core.models")},
    "client command imports agents": set(),
    "api imports agents": {("layer_edges", "memoryapp.api.a -> agents.client")},
    "agents imports a client command": {("layer_edges", "agents.a -> memoryapp.clients")},
    "two-module cycle": {("cycles", "agents.a agents.b")},
    "unlayered package": {("unlayered", "memoryapp/newapp/a.py")},
}
# Files every synthetic tree has, which break no rule (urls may import every app).
_BASE = {
    "memoryapp/__init__.py": "from memoryapp.celery import app as celery_app\n",
    "memoryapp/celery.py": "import celery\n",
    "memoryapp/urls.py": "from memoryapp.api import schemas\nfrom .dashboard import views\n",
    "memoryapp/lib/__init__.py": "",
    "memoryapp/core/__init__.py": "from memoryapp.lib import tokens\nimport django\n",
    "memoryapp/core/models.py": "import django.db\nfrom .. import lib\n",
    "memoryapp/core/migrations/0001_initial.py": "from memoryapp.api import schemas\n" + _LONG,
    "memoryapp/api/__init__.py": "",
    "memoryapp/api/schemas.py": "import ninja\nfrom memoryapp.core.models import Agent\n",
    "memoryapp/ams/__init__.py": "",
    "memoryapp/dashboard/__init__.py": "",
    "memoryapp/dashboard/views.py": "from ..core import models\nfrom memoryapp.lib import tokens\n",
    "memoryapp/lib/tokens.py": "def n():\n    return 1\n",
    "agents/__init__.py": "",
    "agents/client.py": "from memoryapp.lib.tokens import n\nimport httpx\n",
}


def _build(root: Path, files: dict[str, str]) -> Path:
    for rel, text in {**_BASE, **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _reported(measures: Measures) -> set[tuple[str, str]]:
    return (
        {("function_lines", k) for k in measures.function_lines}
        | {("complexity", k) for k in measures.complexity}
        | {("layer_edges", k) for k in measures.layer_edges}
        | {("cycles", " ".join(c)) for c in measures.cycles}
        | {("unlayered", p) for p in measures.unlayered}
    )


@pytest.mark.parametrize("case", sorted(SYNTHETIC))
def test_checkers_report_each_violation(tmp_path, case):
    assert _reported(measure(_build(tmp_path, SYNTHETIC[case]))) == EXPECTED[case]


def test_a_cycle_is_reported_with_its_path(tmp_path):
    measures = measure(_build(tmp_path, SYNTHETIC["two-module cycle"]))
    assert measures.cycles == {("agents.a", "agents.b"): ["agents.a", "agents.b", "agents.a"]}


def test_lengths_skip_decorators_and_count_the_docstring(tmp_path):
    body = "    '''Doc.'''\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 2)
    source = "@a\n@b\ndef f():\n" + body + "\n@a\ndef g():\n" + body + "    x = 2\n"
    measures = measure(_build(tmp_path, {"agents/a.py": source}))
    assert measures.function_lines == {"agents/a.py:g": MAX_FUNCTION_LINES + 1}


@pytest.mark.parametrize(
    ("current", "allowed", "expected"),
    [
        ({"f": 90}, {"f": 90}, []),
        ({"f": 90}, {}, ["new: f is 90 (limit); make it smaller"]),
        ({"f": 95}, {"f": 90}, ["worse: f is 95, allowed 90; make it smaller"]),
        ({"f": 85}, {"f": 90}, ['change the line `"f" = 90` to `"f" = 85`']),
        ({}, {"f": 90}, ['delete the line `"f" = 90`']),
    ],
    ids=["same", "new", "worse", "better", "gone"],
)
def test_the_ratchet_on_measures(current, allowed, expected):
    problems = compare_measures("function_lines", "limit", current, allowed)
    assert len(problems) == len(expected)
    assert all(e in p for e, p in zip(expected, problems, strict=True))


def test_the_ratchet_on_edges():
    places = {"memoryapp.lib.a -> memoryapp.core.b": ["memoryapp/lib/a.py:3"]}
    assert compare_edges(places, list(places)) == []
    assert "memoryapp/lib/a.py:3" in compare_edges(places, [])[0]
    assert "delete the line" in compare_edges({}, list(places))[0]


@pytest.mark.parametrize(
    ("current", "allowed", "expected"),
    [
        ([("a", "b")], [["a", "b"]], []),
        ([("a", "b")], [], ["new: import cycle"]),
        ([("a", "b", "c")], [["a", "b"]], ["grew from"]),
        ([("a", "b")], [["a", "b", "c"]], ["replace the line"]),
        ([], [["a", "b"]], ["delete the line"]),
    ],
    ids=["same", "new", "worse", "better", "gone"],
)
def test_the_ratchet_on_cycles(current, allowed, expected):
    problems = compare_cycles({c: list(c) for c in current}, allowed)
    assert len(problems) == len(expected)
    assert all(e in p for e, p in zip(expected, problems, strict=True))


def test_written_list_reads_back(tmp_path):
    measures = measure(
        _build(
            tmp_path,
            {
                **SYNTHETIC["two-module cycle"],
                **SYNTHETIC["long method"],
                **SYNTHETIC["lib imports core"],
                **SYNTHETIC["complex function"],
            },
        )
    )
    path = tmp_path / "allowed.toml"
    path.write_text(allowed_text(measures), encoding="utf-8")
    allowed = read_allowed(path)
    assert compare_measures("x", "", measures.function_lines, allowed.function_lines) == []
    assert compare_measures("x", "", measures.complexity, allowed.complexity) == []
    assert compare_edges(measures.layer_edges, allowed.layer_edges) == []
    assert compare_cycles(measures.cycles, allowed.cycles) == []
    assert allowed.function_lines and allowed.complexity and allowed.layer_edges and allowed.cycles


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_code_rules --write")
    write_allowed()
