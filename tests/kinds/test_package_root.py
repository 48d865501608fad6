"""``schemaless_store.Kind``, as issue 38 spells it, beside ``schemaless_store.kinds.Kind``
(docs/kinds.md): the package root gives it lazily, so that importing ``schemaless_store`` before
Django's app registry is ready still works."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import schemaless_store
from schemaless_store import kinds
from tests.kindsapp.models import Note
from tests.support import child

PACKAGE = Path(schemaless_store.__file__).parent


def test_both_spellings_are_the_same_class():
    from schemaless_store import Kind

    assert Kind is schemaless_store.Kind is kinds.Kind
    assert issubclass(Note, schemaless_store.Kind)
    assert "Kind" in dir(schemaless_store)
    # Not in __all__: a star-import may run before the app registry is ready.
    assert "Kind" not in schemaless_store.__all__
    with pytest.raises(AttributeError, match="Nothing"):
        schemaless_store.Nothing  # noqa: B018


def test_the_root_imports_before_the_app_registry_is_ready():
    """A fresh interpreter: the root and its eager names import without django.setup(), the
    kinds are not loaded until asked for, and after setup ``schemaless_store.Kind`` is the
    class an app's models subclass."""
    script = textwrap.dedent(
        """
        import sys
        import schemaless_store
        from schemaless_store import DELETE, Index
        assert "schemaless_store.kinds" not in sys.modules, "kinds loaded too early"
        assert "schemaless_store.models" not in sys.modules, "models loaded too early"
        import django
        django.setup()
        from django.db import models
        from schemaless_store.kinds import Kind

        class Memo(schemaless_store.Kind):
            text = models.CharField(max_length=10)

            class Meta:
                app_label = "kindsapp"

        assert schemaless_store.Kind is Kind and Memo._kind.name == "memo"
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=child.ROOT,
        env=child.child_env(),  # this run's databases: the child starts no servers of its own
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


def test_no_module_of_the_package_asks_the_root_for_a_lazy_name():
    """What keeps the lazy names out of the import graph for real: the package itself never
    uses them (it imports ``.kinds``, above it, only where its layer may)."""
    asking = []
    for path in PACKAGE.rglob("*.py"):
        # How many levels up the root is from this module's package (``from ..`` = 2).
        depth = len(path.relative_to(PACKAGE).parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (
                (node.level == depth and node.module is None)
                or (not node.level and node.module == "schemaless_store")
            ):
                asking += [
                    f"{path.relative_to(PACKAGE)}:{node.lineno}"
                    for alias in node.names
                    if alias.name in schemaless_store.LAZY
                ]
    assert not asking, asking
