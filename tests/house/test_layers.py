"""The package's shape, as docs/architecture.md draws it: every module sits in a layer, and no
module imports one of a higher layer (function-level imports count, and so do imports under
``if TYPE_CHECKING:``: a loop made of type hints alone is still a loop a reader must untangle;
importing ``a.b`` counts as importing the package ``a`` too, whose ``__init__`` runs first); no
import cycles; no module over 450 lines; no private name of another module used. No database is
touched."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "schemaless_store"
MAX_LINES = 450

# Lower layers first. A module belongs to the entry that names the longest part of its dotted
# name: ``tables`` (the package) holds statements on one session, ``tables.entities`` routes rows.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "pure",
        (
            "exceptions",
            "codec",
            "server_errors",
            "topology",
            "topology.entity_ids",
            "topology.bucket_hash",
            "index_values",
            "jsonview",
            "throttle",
            "expected",
            "asyncapi",
        ),
    ),
    (
        "config",
        ("conf", "dburls", "topology.server_support", "indexes", "fields", "metadata"),
    ),
    (
        # Statements on a cursor the caller holds: no routing, no connection of their own.
        "session statements",
        (
            "tables",
            "tables.sessions",
            "tables.gtids",
            "tables.layout",
            "tables.server_locks",
            "tables.values",
            "tables.literals",
            "tables.keyset",
        ),
    ),
    (
        # Which server holds an id, and how a connection reaches it.
        "topology",
        (
            "topology.bucket_map",
            "topology.placement",
            "topology.shards",
            "topology.servers",
            "topology.retries",
            "topology.replicas",
            "topology.clustering",
            "topology.write_lock",
            "topology.server_lock",
        ),
    ),
    (
        "storage",
        (
            "tables.buckets",
            "tables.cells",
            "tables.counts",
            "tables.ddl",
            "tables.entities",
            "tables.index_rows",
            "tables.map_runs",
            "tables.move_log",
            "tables.moved_rows",
            "tables.receipts",
            "tables.scans",
            "lifecycle",
            "near_cache",
            "cache_script",
            "entity_cache",
        ),
    ),
    # The write fence decides which writes a shard takes; the statements below it never do.
    ("guards", ("topology.fence",)),
    (
        "paths",
        (
            "writes",
            "query",
            "cell_store",
            "feed",
            "consistency",
            "cleaner",
            "backup",
            "moves",
            "modify",
            "mapping",
        ),
    ),
    (
        "django face",
        (
            "models",
            "kinds",
            "topology.router",
            "middleware",
            "backends",
            "signals",
            "checks",
            "apps",
            "admin",
            "templatetags",
            "management",
            "testing",
        ),
    ),
]


def test_every_tables_module_is_in_a_layer_by_name():
    """A new module of ``tables/`` must be placed by name: routed, or on a session's cursor."""
    unplaced = [
        name
        for name in MODULES
        if name.startswith("tables.") and not any(name in prefixes for _layer, prefixes in LAYERS)
    ]
    assert not unplaced, f"add these to a layer of tests/house/test_layers.py: {unplaced}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {
    module_name(p): p
    for p in PACKAGE.rglob("*.py")
    if "migrations" not in p.parts and module_name(p) != ""
}


def layer_of(name: str) -> int:
    best: tuple[int, int] | None = None  # (length of the matching entry, its layer)
    for rank, (_layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), rank)
    if best is None:
        raise AssertionError(
            f"schemaless_store.{name} is in no layer of tests/house/test_layers.py"
        )
    return best[1]


def imports_of(name: str) -> dict[str, int]:
    """The package's modules that ``name`` imports (the longest one an imported name lies
    in), with a line where it does; wherever the import stands, ``if TYPE_CHECKING:`` too."""
    path = MODULES[name]
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    found: dict[str, int] = {}

    def resolve(level: int, module: str | None) -> str:
        parts = base[: len(base) - (level - 1)] if level > 1 else list(base)
        return ".".join([p for p in parts if p] + ([module] if module else []))

    def add(dotted: str, line: int) -> None:
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            candidate = ".".join(parts[:k])
            if candidate in MODULES:
                # Importing a.b runs a/__init__ first: an edge to every package above it.
                for j in range(1, k + 1):
                    above = ".".join(parts[:j])
                    if above in MODULES and above != name and not name.startswith(above + "."):
                        found.setdefault(above, line)
                return

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("schemaless_store."):
                        add(alias.name.removeprefix("schemaless_store."), child.lineno)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    target = resolve(child.level, child.module)
                elif (child.module or "").startswith("schemaless_store"):
                    target = (child.module or "").removeprefix("schemaless_store").lstrip(".")
                else:
                    target = None
                if target is not None:
                    for alias in child.names:
                        add(f"{target}.{alias.name}" if target else alias.name, child.lineno)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_a_higher_layer(name):
    rank = layer_of(name)
    upward = {other: line for other, line in imports_of(name).items() if layer_of(other) > rank}
    assert not upward, (
        f"schemaless_store.{name} ({LAYERS[rank][0]}) imports a higher layer: "
        + ", ".join(f"{o} ({LAYERS[layer_of(o)][0]}, line {n})" for o, n in upward.items())
    )


def test_no_import_cycles():
    graph = {name: set(imports_of(name)) for name in MODULES}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for other in sorted(graph[node]):
            if state.get(other) == 1:
                cycle = [*path[path.index(other) :], other]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if other not in state:
                walk(other)
        path.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_too_long(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"schemaless_store.{name} has {lines} lines"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_name_of_another_module_is_imported(name):
    tree = ast.parse(MODULES[name].read_text())
    private = [
        f"{node.module}.{alias.name} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert not private, f"schemaless_store.{name} imports private names: {private}"


# A statement's first word, as the store spells its SQL (upper case), at the start of a string.
STATEMENT = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|TRUNCATE|SHOW|SET|START|COMMIT|"
    r"ROLLBACK|KILL|USE|LOCK|UNLOCK)\s"
)
# The servers the tests start are set up with statements of their own; dburls writes the
# connection options of the settings (the driver's ``init_command``), below the storage layer;
# migrations are Django's.
OUTSIDE_THE_RULE = ("tables", "testing", "dburls")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if n.split(".")[0] not in OUTSIDE_THE_RULE)
)
def test_statements_are_spelled_in_tables_only(name):
    """tables/__init__.py's rule: no other module spells a statement (docstrings aside)."""
    tree = ast.parse(MODULES[name].read_text())
    skip = _docstrings(tree)
    spelled = [
        f"line {node.lineno}: {node.value.strip()[:60]!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and STATEMENT.match(node.value)
    ]
    assert not spelled, f"schemaless_store.{name} spells statements outside tables/: {spelled}"


def test_server_error_numbers_are_named_in_server_errors_only():
    """A MariaDB error number the store acts on is spelled once, in ``server_errors``; every
    other module names it (docstrings aside, and the test tooling's servers)."""
    from schemaless_store import server_errors

    numbers = {
        value
        for name, value in vars(server_errors).items()
        if name.isupper() and isinstance(value, int)
    }
    spelled = []
    for name in sorted(MODULES):
        if name == "server_errors" or name.split(".")[0] == "testing":
            continue
        tree = ast.parse(MODULES[name].read_text())
        spelled += [
            f"{name} line {node.lineno}: {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and type(node.value) is int and node.value in numbers
        ]
    assert not spelled, f"use schemaless_store.server_errors' names: {spelled}"


def test_the_package_root_imports_only_the_bottom_layers():
    """Every module imports the package root (``from .. import conf`` runs its ``__init__``),
    so whatever the root imports, even inside a function, closes a cycle through everything
    above it (docs/architecture.md)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
    }
    high = {name for name in imported if layer_of(name) > 1}
    assert not high, f"schemaless_store/__init__.py imports above config: {sorted(high)}"
