"""The package's shape as tests: no import cycles between modules or packages, lazy imports included.

Every `import` / `from ... import` statement anywhere in a module (top level, inside functions, under
`TYPE_CHECKING`) is an edge; `from posttrain.engine import LocalEngine`, a name a package exports lazily
through its `_EXPORTS` table, is an edge to the module that defines it. A cycle between two modules, or
between two packages (`posttrain.rl` -> `posttrain.eval` -> `posttrain.rl`), fails with the cycle spelled out.
Modules loaded by name are edges too (`string_plugins`: the entries of `_PLUGINS` lists and `_PLUGIN_OF`
tables, and `importlib.import_module("posttrain....")` calls): a cycle hidden in a string is a cycle. In the
package graph every one counts; in the module graph a registry naming a self-registering plugin of its own
package (which imports the registry back by construction) does not. No module names a module of another package
in a string (the wiring layer hands registries their plugins, `posttrain/wiring.py`), so any new one fails.
Imports under `if TYPE_CHECKING:` are not edges: they never run, they only name types for the checker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import posttrain

ROOT = Path(posttrain.__file__).parent


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(p, root): p for p in root.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an import names (`posttrain.a.b.c` may be module `posttrain.a.b`, attribute c)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _lazy_exports(modules: dict[str, Path]) -> dict[str, str]:
    """`{"posttrain.engine.LocalEngine": "posttrain.engine.local", ...}` from packages' `_EXPORTS` tables."""
    out = {}
    for mod, path in modules.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
                table = ast.literal_eval(node.value)
                out.update({f"{mod}.{name}": target for name, target in table.items()})
    return out


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


PLUGIN_TABLES = ("_PLUGINS", "_PLUGIN_OF")


def string_plugins(root: Path = ROOT) -> dict[str, set[str]]:
    """Per module, the project modules it loads by name: `_PLUGINS` / `_PLUGIN_OF` entries, and string literals
    passed to `importlib.import_module`."""
    modules = _modules(root)
    out: dict[str, set[str]] = {}
    for mod, path in modules.items():
        text = path.read_text()
        if "import_module" not in text and not any(t in text for t in PLUGIN_TABLES):
            continue  # neither construct can occur: no need to parse
        tree = ast.parse(text, str(path))
        names: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(getattr(t, "id", "") in PLUGIN_TABLES for t in targets) and node.value is not None:
                    names += [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
                names += [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        deps = {d for n in names if n.startswith("posttrain.") and (d := _resolve(n, modules)) is not None and d != mod}
        if deps:
            out[mod] = deps
    return out


def import_graph(root: Path = ROOT, plugins: str = "none") -> dict[str, set[str]]:
    """Module -> the project modules it imports. `plugins`: "none", "modules" (string-loaded plugins as edges,
    but a registry's own package's plugins), or "all"."""
    modules = _modules(root)
    exports = _lazy_exports(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        type_only = {id(n) for block in ast.walk(tree) if _is_type_checking_block(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{a.name}" for a in node.names] or [prefix]
            for t in targets:
                if not t.startswith("posttrain"):
                    continue
                dep = _resolve(exports.get(t, t), modules)
                if dep is not None and dep != mod:
                    graph[mod].add(dep)
    if plugins != "none":
        for mod, deps in string_plugins(root).items():
            graph[mod] |= {d for d in deps if plugins == "all" or _package(d) != _package(mod)}
    return graph


# Packages whose modules are each their own unit in the package graph. `recipes/` groups end-to-end recipes that
# sit on different layers: `builtin` below `rl` (a run on the built-in base builds it through `resolve.py`),
# `quickstart` above it, as each did when it lived at the package's root; its `__init__` imports none of them.
SPLIT_PACKAGES = ("posttrain.recipes",)


def _package(mod: str) -> str:
    parts = mod.split(".")
    if ".".join(parts[:2]) in SPLIT_PACKAGES:
        return ".".join(parts[:3])
    return ".".join(parts[:2]) if len(parts) > 1 else mod


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        packages.setdefault(_package(mod), set()).update(_package(d) for d in deps if _package(d) != _package(mod))
    return packages


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _path(graph: dict[str, set[str]], comp: list[str]) -> str:
    """A readable cycle inside one strongly connected component."""
    inside = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & inside):
                if w == start:
                    cycle = [start]
                    while v != start:
                        cycle.append(v)
                        v = prev[v]
                    return " -> ".join([start, *reversed(cycle[1:]), start])
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return ", ".join(comp)


@pytest.mark.slow
def test_no_cycles_between_modules():
    graph = import_graph(plugins="modules")
    cycles = [_path(graph, c) for c in _cycles(graph)]
    assert not cycles, "import cycles between modules:\n" + "\n".join(cycles)


@pytest.mark.slow
def test_no_cycles_between_packages():
    graph = import_graph(plugins="all")
    packages = _package_graph(graph)
    cycles = [_path(packages, c) for c in _cycles(packages)]
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


@pytest.mark.slow
def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    # rl/build.py imports the resolver inside a function: a lazy edge the graph must hold
    assert "posttrain.resolve" in graph["posttrain.rl.build"]


def test_a_split_package_imports_none_of_its_modules():
    """Importing `posttrain.recipes.builtin` (below `rl`) must not load `recipes.quickstart` (above it)."""
    graph = import_graph()
    for pkg in SPLIT_PACKAGES:
        assert graph[pkg] == set(), f"{pkg}/__init__.py imports {sorted(graph[pkg])}"
    assert _package("posttrain.recipes.builtin") == "posttrain.recipes.builtin"
    assert _package("posttrain.rl.trainer") == "posttrain.rl"


def test_string_loaded_plugins_are_edges_and_a_planted_one_is_a_cycle(tmp_path):
    """A registry in package `a` naming a module of package `b` by string, which imports `a` back: invisible to
    `import` statements, a package cycle once strings count."""
    pkg = tmp_path / "posttrain"
    for d in ("", "a", "b"):
        (pkg / d).mkdir(exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "a" / "registry.py").write_text('_PLUGINS = ["posttrain.b.plugin"]\nREGISTRY = {}\n')
    (pkg / "b" / "plugin.py").write_text("from posttrain.a.registry import REGISTRY\n")
    (pkg / "b" / "loader.py").write_text('import importlib\nimportlib.import_module("posttrain.a.registry")\n')
    assert string_plugins(pkg) == {"posttrain.a.registry": {"posttrain.b.plugin"},
                                   "posttrain.b.loader": {"posttrain.a.registry"}}
    packages = _package_graph(import_graph(pkg, plugins="all"))
    assert _cycles(packages) == [["posttrain.a", "posttrain.b"]]
    assert not _cycles(_package_graph(import_graph(pkg)))  # what the test saw before strings counted


def cross_package_string_edges(found: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, the module of another package it loads by name) in `string_plugins`' answer: none are allowed."""
    return {(m, d) for m, deps in found.items() for d in deps if _package(d) != _package(m)}


def test_no_module_loads_another_packages_module_by_name():
    """The core chooses no implementations by name: `rl/` names no module in a string, and no registry names a
    module of another package (the wiring layer, `posttrain/wiring.py` and `cli/`, passes them in); what is
    left are registries naming their own package's plugins (`rewards/registry.py`)."""
    found = string_plugins()
    assert not {m: d for m, d in found.items() if m.startswith("posttrain.rl")}
    assert cross_package_string_edges(found) == set()


def test_a_planted_string_import_of_another_package_fails_the_check(tmp_path):
    pkg = tmp_path / "posttrain"
    for d in ("", "tasks", "agent"):
        (pkg / d).mkdir(exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "tasks" / "domains.py").write_text('import importlib\n\ndef load():\n'
                                              '    importlib.import_module("posttrain.agent.lookup")\n')
    (pkg / "agent" / "lookup.py").write_text("")
    assert cross_package_string_edges(string_plugins(pkg)) == {("posttrain.tasks.domains", "posttrain.agent.lookup")}
