"""No import circles among the project's modules (ctxview, manifests, ctxkit).

Every import counts, wherever it is written: at the top, inside a function (a "lazy" import
only hides a circle) or under ``TYPE_CHECKING``. A circle means two modules that cannot be
understood, tested or moved one without the other; this walk finds any new one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"ctxview": ROOT / "ctxview", "manifests": ROOT / "manifests", "ctxkit": ROOT / "sdk" / "ctxkit"}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from a import b`` counts ``a.b`` when it is a
    module, else ``a``)."""
    mods = modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from pkg import module`` depends on the module; ``from pkg import name`` on pkg.
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_it_finds_no_import_circle():
    graph = import_graph()
    assert "manifests.tasks" in graph and "ctxkit.context.allocator" in graph  # the walk sees the code
    assert cycles(graph) == []


def test_it_would_find_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# One direction between ctxkit's layers: a module may import from its own layer or one below.
# The schema (``ctxkit.manifest``) is below everything; building a context (``ctxkit.context``)
# is below recording it (``ctxkit.record``).
LAYERS = ("ctxkit.manifest", "ctxkit.context", "ctxkit.record")


def layer_of(module: str) -> int | None:
    for rank, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a lower layer into a higher one, as (importer, imported)."""
    found = []
    for name, targets in graph.items():
        own = layer_of(name)
        if own is None:
            continue
        for target in sorted(targets):
            other = layer_of(target)
            if other is not None and other > own:
                found.append((name, target))
    return sorted(found)


def test_it_keeps_ctxkit_layers_pointing_down():
    graph = import_graph()
    assert any(t.startswith("ctxkit.context") for t in graph["ctxkit.record.builder"])  # record uses context
    assert upward_imports(graph) == []


def test_it_would_find_an_upward_import():
    graph = {"ctxkit.context.layout": {"ctxkit.record.items"}, "ctxkit.record.items": {"ctxkit.context.tokens"},
             "ctxkit.manifest": set(), "ctxkit.context.tokens": {"ctxkit.manifest"}}
    assert upward_imports(graph) == [("ctxkit.context.layout", "ctxkit.record.items")]
