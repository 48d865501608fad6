"""The benchmark harness (``bench/``) has no import cycle. As in test_layers, function-level
imports count, and importing ``a.b`` counts as importing the package ``a`` too: a loop closed
through a function-level import still makes a reader follow three modules to learn which one
owns a helper (issue 36: ``legs/netem`` -> ``profile`` -> ``run`` -> ``legs/netem``). Nothing
is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "bench"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The harness's modules that ``name`` imports, wherever the import stands."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()

    def add(dotted: str) -> None:
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            if ".".join(parts[:k]) in MODULES:
                # Importing a.b runs a/__init__ first: an edge to every package above it.
                found.update(
                    above
                    for j in range(1, k + 1)
                    if (above := ".".join(parts[:j])) in MODULES
                    and above != name
                    and not name.startswith(above + ".")
                )
                return

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                add(f"{target}.{alias.name}")
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for other in sorted(graph[node]):
            if state.get(other) == 1:
                return [*path[path.index(other) :], other]
            if other not in state and (cycle := walk(other)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := walk(name)):
            return cycle
    return None


def test_the_finder_sees_a_cycle_through_a_function_level_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    # The edges it reads from the harness: a relative import inside a function, and a
    # ``from . import module`` of a sibling.
    assert "bench.run" in imports_of("bench.profile")
    assert {"bench.legs.get", "bench.legs.put"} <= imports_of("bench.legs.netem")


def test_bench_has_no_import_cycle():
    graph = {name: imports_of(name) for name in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in bench/: " + " -> ".join(cycle or [])
