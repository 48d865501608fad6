"""The docs name the package's modules as they are (no database needed): docs/architecture.md's
module map names every module of ``schemaless_store`` and nothing else; every ``.py`` path
the docs and the package cite is a file of the repository; every module a docstring points to
with ``:mod:`` (or a function or class through its module) exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "schemaless_store"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def package_files() -> set[str]:
    """Every ``.py`` file of the package, relative to it (``topology/fence.py``)."""
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}


def expand(token: str) -> list[str]:
    """``commands/{a,b}`` -> ``commands/a``, ``commands/b``."""
    braces = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", token)
    if braces is None:
        return [token]
    head, inner, tail = braces.groups()
    return [f"{head}{name}{tail}" for name in inner.split(",")]


def module_map(text: str) -> set[str]:
    """The files the module map names, relative to the package. The map is the code block that
    opens with ``schemaless_store/``; on each line, what precedes ``#`` is names: ``pkg/`` opens
    a package (the names after it on its line, and the lines indented under it, are its
    modules), ``name.py`` or a bare ``name`` is a module, ``a/b.py`` a path; a path names the
    packages it passes through (their ``__init__.py``)."""
    block = re.search(r"^```\w*\nschemaless_store/[^\n]*\n(.*?)^```", text, re.M | re.S)
    assert block, "no module map (a code block opening with schemaless_store/)"
    named = {"__init__.py"}
    opened: list[tuple[int, str]] = []  # (indent, prefix) of the packages open above this line
    for line in block.group(1).splitlines():
        names = line.split("#", 1)[0]
        tokens = names.split()
        if not tokens:
            continue
        indent = len(names) - len(names.lstrip())
        while opened and opened[-1][0] >= indent:
            opened.pop()
        prefix = opened[-1][1] if opened else ""
        if tokens[0].endswith("/"):
            prefix += tokens[0]
            opened.append((indent, prefix))
            named.add(prefix + "__init__.py")
            tokens = tokens[1:]
        for token in tokens:
            for name in expand(token):
                named.add(prefix + (name if name.endswith(".py") else name + ".py"))
    for path in list(named):
        parts = path.split("/")
        named.update("/".join([*parts[:k], "__init__.py"]) for k in range(1, len(parts)))
    return named


def test_the_module_map_parses_as_meant():
    text = (
        "```text\nschemaless_store/      # root\n  codec.py conf.py       # pure\n"
        "  topology/    # which server\n    fence       #   guards\n"
        "  management/ arguments\n    commands/{shardmap,dumpdata}\n"
        "  templatetags/filters.py apps.py\n  backends/galera/base.py\n```\n"
    )
    assert module_map(text) == {
        "__init__.py",
        "codec.py",
        "conf.py",
        "topology/__init__.py",
        "topology/fence.py",
        "management/__init__.py",
        "management/arguments.py",
        "management/commands/__init__.py",
        "management/commands/shardmap.py",
        "management/commands/dumpdata.py",
        "templatetags/__init__.py",
        "templatetags/filters.py",
        "apps.py",
        "backends/__init__.py",
        "backends/galera/__init__.py",
        "backends/galera/base.py",
    }


def test_the_module_map_names_every_module_and_no_other():
    named = module_map(ARCHITECTURE.read_text())
    files = package_files()
    # Django's migrations are one entry of the map, ``migrations/``.
    files = {f for f in files if not f.startswith("migrations/")} | {"migrations/__init__.py"}
    assert sorted(files - named) == [], "add these to docs/architecture.md's module map"
    assert sorted(named - files) == [], "docs/architecture.md's module map names these: gone"


# ``myapp/`` is a reader's project in the examples (``library/``, docs/kinds.md's), ``mysite/``
# and ``notes/`` the one docs/install.md makes; the history of performance cites the modules
# as they were when each measurement was made.
EXAMPLES = re.compile(r"^(myapp|library|mysite|notes)/")
HISTORY = {"performance-history.md"}
PY_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.py)\b")


def repository_files() -> list[str]:
    skip = {".git", ".venv", "var", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
    return [
        p.relative_to(ROOT).as_posix()
        for p in ROOT.rglob("*.py")
        if not skip.intersection(p.relative_to(ROOT).parts)
    ]


def test_every_cited_py_path_is_a_file():
    """A path such as ``topology/server_lock.py`` in a doc page, the README or the package's
    docstrings and comments names a file of the repository: one whose path is it or ends with
    it (``cleaner/lock.py`` was cited for a while after it was gone)."""
    files = repository_files()
    pages = [ROOT / "README.md", ROOT / "tests" / "README.md", *(ROOT / "docs").glob("*.md")]
    sources = sorted(PACKAGE.rglob("*.py"))
    missing = []
    for path in [*pages, *sources]:
        if path.name in HISTORY:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for cited in PY_PATH.findall(line):
                cited = cited.removeprefix("./")
                if EXAMPLES.match(cited):
                    continue
                if not any(f == cited or f.endswith("/" + cited) for f in files):
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {cited}")
    assert missing == []


def module_exists(dotted: list[str]) -> bool:
    path = PACKAGE.parent.joinpath(*dotted)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def cited_module(source: Path, role: str, target: str) -> list[str] | None:
    """The module a reference names: for ``:mod:`` the whole target; for the other roles the
    longest part that is a module, then a name or ``Class.name`` (anything else names a module
    that is not there). None when the reference names no module (``:meth:`.close```)."""
    relative = target.lstrip(".")
    dots = len(target) - len(relative)
    if target.startswith("schemaless_store."):
        parts = target.split(".")
    elif dots and (role == "mod" or dots > 1 or "." in relative):
        # A module's package, or a package's own __init__: the folder the file is in.
        package = list(source.relative_to(PACKAGE.parent).parts[:-1])
        parts = [*package[: len(package) - (dots - 1)], *relative.split(".")]
    else:
        return None
    if role == "mod":
        return parts
    for k in range(len(parts) - 1, 0, -1):
        if module_exists(parts[:k]):
            rest = parts[k:]
            if len(rest) == 1 or (len(rest) == 2 and rest[0][:1].isupper()):
                return parts[:k]
            return parts[: k + 1]
    return parts


def test_docstrings_point_to_modules_that_exist():
    stale = set()
    for source in sorted(PACKAGE.rglob("*.py")):
        text = source.read_text()
        for match in re.finditer(r":(mod|func|class|meth|data|attr|exc|obj):`~?([\w.]+)`", text):
            role, target = match.groups()
            parts = cited_module(source, role, target)
            if parts is not None and not module_exists(parts):
                stale.add(f"{source.relative_to(PACKAGE).as_posix()}: {target}")
    assert sorted(stale) == []
