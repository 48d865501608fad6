"""The package's shape, as docs/architecture.md draws it: every module sits in a layer, and no
module imports one of a higher layer (function-level imports count, and so do imports under
``if TYPE_CHECKING:``: a loop made of type hints alone is still a loop a reader must untangle;
importing ``a.b`` counts as importing the package ``a`` too, whose ``__init__`` runs first); no
import cycles; no module over 450 lines; no private name of another module used. No database is
touched."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "schemaless_store"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAX_LINES = 450

# The layers are the folders. Their order is written once, in docs/architecture.md's table
# (``| 1. values | `values/`, `exceptions.py` | ... |``): this test reads it, and checks that
# every folder and every module at the package root stands in exactly one row.
LAYER_ROW = re.compile(r"^\|\s*(\d+)\.\s*(\w+)\s*\|([^|]*)\|", re.MULTILINE)


def read_layers(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """``[(layer, (folder or root module, ...)), ...]``, lowest first, from the docs' table."""
    rows = sorted(
        (
            int(number),
            name,
            tuple(p.removesuffix("/").removesuffix(".py") for p in re.findall(r"`([^`]+)`", cells)),
        )
        for number, name, cells in LAYER_ROW.findall(text)
    )
    return [(name, places) for _number, name, places in rows]


LAYERS = read_layers(ARCHITECTURE.read_text())
PATHS = "paths"
FACES = "faces"

# The third-party packages each layer may import, besides those of the layers below it (and
# the standard library). A name covers its submodules. The faces may import anything.
THIRD_PARTY: dict[str, tuple[str, ...]] = {
    "values": ("msgpack",),
    "config": (
        "django.conf",
        "django.core.exceptions",
        "django.core.signals",
        "django.db",
        "django.dispatch",
        "django.utils.module_loading",
        "environ",
    ),
    "sql": (),
    # shards.connection reads Django's connections where asgiref keeps them (issue 45, item 5)
    "topology": ("asgiref.local",),
    "tables": (),
    "cache": ("django.core.cache", "redis", "hiredis"),
    "guards": (),
    PATHS: ("django.apps", "django.core", "django.utils", "asgiref", "tqdm"),
}

# The paths are one layer, but not one lump: a path may use another only along these arrows
# (a package imports its own modules freely). ``moves`` -> ``cleaner`` is not one of them.
PATH_ARROWS: set[tuple[str, str]] = {
    ("writes", "query"),  # writes.modify reads the entity it changes
    ("cells", "writes"),  # a cell's write is a store write
    ("cleaner", "writes"),  # a repair writes through the write path's rows
    ("moves", "query"),  # a move reads entities by id
    ("mapping", "query"),
    ("mapping", "writes"),  # mapentities reads and saves entities
    ("backup", "cells"),
    ("backup", "writes"),  # an import writes entities and cells
}

# Names loaded through importlib (``import_module("...")``) count as imports, and the one
# allowed to reach above its layer says why here.
LAZY_LOADS = {
    ("", "kinds"): "schemaless_store.Kind (issue 38): a PEP 562 attribute of the package root, "
    "loaded on first access, after the app registry is ready; no module of the package asks for it",
}


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


def test_the_layers_are_read_and_not_empty():
    """The table parses into the layers, and the walk found the package's modules: a layer
    test that reads nothing passes everything."""
    assert [name for name, _ in LAYERS][:3] == ["values", "config", "sql"], LAYERS
    assert len(LAYERS) >= 8 and all(places for _, places in LAYERS), LAYERS
    assert len(MODULES) > 100, sorted(MODULES)
    for name, _places in LAYERS:
        assert any(layer_of(m) == [n for n, _ in LAYERS].index(name) for m in MODULES), name


def test_every_folder_and_root_module_stands_in_one_layer():
    placed = [place for _layer, places in LAYERS for place in places]
    assert len(placed) == len(set(placed)), f"named twice in docs/architecture.md: {placed}"
    tops = {name.split(".")[0] for name in MODULES}
    assert sorted(tops - set(placed)) == [], "add these to docs/architecture.md's layer table"
    assert sorted(set(placed) - tops) == [], "docs/architecture.md's layer table names these: gone"


def test_the_package_root_holds_at_most_twelve_modules():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= 12, flat


def layer_of(name: str) -> int:
    """The layer of a module: the row that names its folder (or the root module itself)."""
    top = name.split(".")[0]
    for rank, (_layer, places) in enumerate(LAYERS):
        if top in places:
            return rank
    raise AssertionError(f"schemaless_store.{name} is in no layer of docs/architecture.md")


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
OUTSIDE_THE_RULE = ("tables", "sql", "testing", "config.dburls")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


@pytest.mark.parametrize(
    "name",
    sorted(
        n for n in MODULES if not any(n == o or n.startswith(o + ".") for o in OUTSIDE_THE_RULE)
    ),
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


def spelled_numbers(name: str, source: str, numbers: set[int]) -> list[str]:
    """Where ``source`` spells one of ``numbers``: as an int, or as a word of a string (a
    statement's text: ``DECLARE CONTINUE HANDLER FOR 1146``, or a message), docstrings
    aside."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    words = re.compile(r"\b(" + "|".join(str(n) for n in sorted(numbers)) + r")\b")
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        if type(node.value) is int and node.value in numbers:
            found.append(f"{name} line {node.lineno}: {node.value}")
        elif isinstance(node.value, str):
            found += [f"{name} line {node.lineno}: {m}" for m in words.findall(node.value)]
    return found


def test_an_error_number_in_a_statement_is_found():
    numbers = {1146}
    assert spelled_numbers("m", 'SQL = "DECLARE CONTINUE HANDLER FOR 1146 BEGIN END"', numbers)
    assert spelled_numbers("m", "N = 1146", numbers)
    assert not spelled_numbers("m", 'SQL = f"DECLARE CONTINUE HANDLER FOR {N} BEGIN END"', numbers)


def test_server_error_numbers_are_named_in_server_errors_only():
    """A MariaDB error number the store acts on is spelled once, in ``server_errors``; every
    other module names it (docstrings aside, and the test tooling's servers)."""
    from schemaless_store.sql import server_errors

    numbers = {
        value
        for name, value in vars(server_errors).items()
        if name.isupper() and isinstance(value, int)
    }
    spelled = []
    for name in sorted(MODULES):
        if name == "sql.server_errors" or name.split(".")[0] == "testing":
            continue
        spelled += spelled_numbers(name, MODULES[name].read_text(), numbers)
    assert not spelled, f"use schemaless_store.sql.server_errors' names: {spelled}"


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


def third_party_imports(path: Path) -> dict[str, int]:
    """The modules outside the package and the standard library that ``path`` imports."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for imported in names:
            top = imported.split(".")[0]
            if top != "schemaless_store" and top not in sys.stdlib_module_names:
                found.setdefault(imported, node.lineno)
    return found


def allowed_third_party(rank: int) -> tuple[str, ...] | None:
    """What layer ``rank`` may import from outside (None: anything)."""
    allowed: list[str] = []
    for name, _places in LAYERS[: rank + 1]:
        if name not in THIRD_PARTY:
            return None
        allowed += THIRD_PARTY[name]
    return tuple(allowed)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_layer_imports_only_its_third_party_packages(name):
    """The values know no Django; the storage layers know Django's databases, not its forms,
    views or admin; the paths do not render; only the faces may import anything."""
    allowed = allowed_third_party(layer_of(name))
    if allowed is None:
        return
    outside = {
        imported: line
        for imported, line in third_party_imports(MODULES[name]).items()
        if not any(imported == a or imported.startswith(a + ".") for a in allowed)
    }
    assert not outside, (
        f"schemaless_store.{name} ({LAYERS[layer_of(name)][0]}) imports {outside}; its layer "
        f"may import {allowed} (THIRD_PARTY in tests/house/test_layers.py)"
    )


@pytest.mark.parametrize("name", sorted(n for n in MODULES if LAYERS[layer_of(n)][0] == PATHS))
def test_a_path_uses_another_only_along_the_drawn_arrows(name):
    """Imports inside one layer are free, but the paths are many packages: each may use
    another only along ``PATH_ARROWS``."""
    own = name.split(".")[0]
    crossing = {
        other: line
        for other, line in imports_of(name).items()
        if LAYERS[layer_of(other)][0] == PATHS
        and other.split(".")[0] != own
        and (own, other.split(".")[0]) not in PATH_ARROWS
    }
    assert not crossing, f"schemaless_store.{name} imports the path(s) {crossing}"


def lazy_loads(path: Path) -> list[tuple[str, int]]:
    """The package's modules that ``path`` loads by name: ``import_module("...")`` or
    ``__import__("...")`` with a literal (or a dict of literals, as the root's ``LAZY``)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"schemaless_store(\.\w+)+", node.value)
            and node.value.split(".")[1] in {m.split(".")[0] for m in MODULES}
        ):
            found.append((node.value.removeprefix("schemaless_store."), node.lineno))
    uses_loader = any(
        isinstance(node, ast.Attribute | ast.Name)
        and getattr(node, "attr", getattr(node, "id", None)) in {"import_module", "__import__"}
        for node in ast.walk(tree)
    )
    return found if uses_loader else []


def test_modules_loaded_by_name_are_imports_too():
    """A load through importlib is an import the statements do not show: each one in the
    package is listed in ``LAZY_LOADS`` with its reason, and a listed one that is gone fails."""
    seen = set()
    for name, path in [("", PACKAGE / "__init__.py"), *sorted(MODULES.items())]:
        for target, line in lazy_loads(path):
            top = target.split(".")[0]
            if (name, top) in LAZY_LOADS:
                seen.add((name, top))
                continue
            if name:
                assert layer_of(target) <= layer_of(name), (
                    f"schemaless_store.{name} loads {target} (line {line}), a higher layer"
                )
            else:
                raise AssertionError(f"the package root loads {target} (line {line})")
    assert seen == set(LAZY_LOADS), (
        f"LAZY_LOADS lists loads that are gone: {set(LAZY_LOADS) - seen}"
    )


def test_a_lazy_load_is_found():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.py"
        path.write_text('import importlib\nimportlib.import_module("schemaless_store.moves")\n')
        assert lazy_loads(path) == [("moves", 2)]
