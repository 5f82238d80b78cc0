"""The package's modules import each other without a cycle.

Every ``import`` statement counts, wherever it stands: at the top of a module, inside a
function (where a cycle hides from Python at import time), and under ``TYPE_CHECKING``. The
graph is read from the source with ``ast``, so the test needs none of the optional
dependencies. Importing a submodule runs its package's ``__init__`` first, but that is not an
edge here: it is how packages work, not a dependency one module chose. A last test holds what
crosses modules to public names: no module takes another's ``_private`` name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "edgembed"


def _module_name(path: Path) -> str:
    parts = ["edgembed", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _from_target(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module a ``from … import`` in module ``name`` reads from (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = name.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(name, is_package, node)
            # ``from pkg import sub`` imports the module pkg.sub when there is one, else a
            # name defined by pkg itself
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v] & graph.keys()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, c) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def test_the_graph_is_read_from_every_module() -> None:
    graph = import_graph()
    assert "edgembed.embedder" in graph and "edgembed.backends.wasm" in graph
    # a top-level import, a relative one from a package and an in-function one are all seen
    assert "edgembed.errors" in graph["edgembed.embedder"]
    assert "edgembed.batching.batcher" in graph["edgembed.batching"]
    assert "edgembed.sources" in graph["edgembed.export"]


def test_the_cycle_finder_finds_in_function_cycles(tmp_path: Path) -> None:
    pkg = tmp_path / "edgembed"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")
    (pkg / "c.py").write_text("from . import a\n")
    known = {"edgembed", "edgembed.a", "edgembed.c", "edgembed.sub", "edgembed.sub.b"}
    paths = {"edgembed.a": pkg / "a.py", "edgembed.sub.b": pkg / "sub" / "b.py",
             "edgembed.c": pkg / "c.py"}
    graph = {n: _imports(n, p, known) for n, p in paths.items()}
    assert graph["edgembed.sub.b"] == {"edgembed.a"}
    assert find_cycles(graph) == [["edgembed.a", "edgembed.sub.b", "edgembed.a"]]


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    if cycles:
        pytest.fail("import cycles (break each by moving what both sides need into a module "
                    "of its own):\n" + "\n".join("  " + " -> ".join(c) for c in cycles))


def private_imports() -> list[str]:
    """``module: from target import _name`` for each private name (not a module) one module of
    the package takes from another: what crosses modules is public, or it is one module's."""
    modules = _modules()
    known = set(modules)
    found = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _from_target(name, is_package, node)
            if target not in known:
                continue
            for a in node.names:
                private = a.name.startswith("_") and not a.name.startswith("__")
                if private and f"{target}.{a.name}" not in known:
                    found.append(f"{name}: from {target} import {a.name}")
    return found


def test_no_private_name_crosses_modules() -> None:
    assert not private_imports()
