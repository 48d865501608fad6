"""The docs' code runs (issue 46): every python block of README.md, docs/install.md,
docs/usage.md and docs/kinds.md, extracted from the page and run against the test settings, or
the reason it is not, in a marker the test reads.

A page's blocks run in order in one namespace, as a reader types them into one shell, on the
store's test databases:

- a block headed ``# <package>/<module>.py`` (``# myapp/models.py``) is that module of a
  throwaway package on ``sys.path``, imported where the page shows it, its names then known to
  the blocks after it (a reader's code imports them). A ``models.py`` makes the package an
  installed app for the page, and a class a later block declares is one of its models. The
  indexes kinds declare get their tables, as ``migrateall`` would make them; all of it is
  taken away after the page. Such a page runs as
  the reader's project would, without the global indexes of the suite's own apps
  (``tests/testapp``, the demo's ``project/feed``): a reader's project has none of them.
- a block headed ``# settings.py`` (or ``# <project>/settings.py``) runs in the namespace; the
  ``DATABASE_ROUTERS`` it names must import.
- an HTML comment right before a block is its marker:
  ``<!-- docs-test: skip: REASON -->`` (not run; the reason is required),
  ``<!-- docs-test: setup: CODE -->`` (CODE runs first, for names the page leaves to the
  reader: an id, a request), ``<!-- docs-test: fresh-project -->`` (docs/install.md only: run in
  a fresh project by tests/package/test_install.py).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.apps import AppConfig, apps
from django.contrib import admin
from django.utils.module_loading import import_string

from schemaless_store.config.indexes import registry
from schemaless_store.kinds.kind import KINDS
from tests.support import STORE, child
from tests.support.package import Block, python_blocks

PAGES = ["README.md", "docs/install.md", "docs/usage.md", "docs/kinds.md"]
MARKERS = {"skip", "setup", "fresh-project"}
SETTINGS_FILES = {"settings.py", "urls.py"}


def module_of(block: Block) -> str | None:
    """``myapp.models`` for a block headed ``# myapp/models.py``; None for other blocks and for
    settings or URL fragments, which run in the page's namespace."""
    path = block.file
    if path is None or "/" not in path or Path(path).name in SETTINGS_FILES:
        return None
    return path.removesuffix(".py").replace("/", ".")


@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs_or_says_why_not(page):
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python block"
    for block in blocks:
        assert block.marker in MARKERS | {None}, f"{block.where}: unknown marker {block.marker!r}"
        if block.marker == "skip":
            assert len(block.text) >= 10, f"{block.where}: a skipped block says why"
        if block.marker == "setup":
            assert block.text, f"{block.where}: a setup marker carries code"
        if block.marker == "fresh-project":
            assert page == "docs/install.md", f"{block.where}: only install.md's project is made"


@STORE
@pytest.mark.parametrize("page", PAGES)
def test_python_blocks_run(page, tmp_path):
    blocks = python_blocks(page)
    ran = [b for b in blocks if b.marker not in {"skip", "fresh-project"}]
    if not ran:
        pytest.skip(f"every python block of {page} runs elsewhere or says why not")
    namespace: dict[str, Any] = {"__name__": f"docs_{Path(page).stem}"}
    with (
        _reader_packages(blocks, tmp_path) as reader,
        mock.patch.dict(os.environ),
    ):
        for block in ran:
            try:
                if block.marker == "setup":
                    exec(compile(block.text, f"{block.where} (setup)", "exec"), namespace)
                module = module_of(block)
                if module is not None:
                    namespace.update(reader.load(module))
                    if reader.app:  # a class a later block declares is one of its models
                        namespace["__name__"] = f"{reader.app}.models"
                    continue
                exec(compile(block.code, block.where, "exec"), namespace)
                reader.declare_new_indexes()
            except Exception as exc:
                raise AssertionError(f"the block at {block.where} failed: {exc!r}") from exc
            for router in namespace.pop("DATABASE_ROUTERS", []):
                import_string(router)


class _Reader:
    """The page's reader packages while the page runs (``_reader_packages``)."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack = stack
        self.app: str | None = None
        self.known = {index.name for index in registry.all()}

    def load(self, module: str) -> dict[str, Any]:
        """Import one module block; its public names."""
        package = module.split(".")[0]
        if module.endswith(".models") and package not in apps.app_configs:
            _install_app(package, self.stack)
            self.stack.enter_context(_without_suite_indexes())
            self.app = package
        loaded = importlib.import_module(module)
        self.declare_new_indexes()
        return {k: v for k, v in vars(loaded).items() if not k.startswith("_")}

    def declare_new_indexes(self) -> None:
        """Tables for the indexes declared since (a kind's), as ``migrateall`` makes them."""
        for index in registry.all():
            if index.name not in self.known:
                self.known.add(index.name)
                self.stack.enter_context(child.declared(index))


@contextlib.contextmanager
def _reader_packages(blocks: list[Block], root: Path) -> Iterator[Any]:
    """The page's module blocks as files of throwaway packages under ``root`` (on
    ``sys.path``); yields a ``_Reader`` that imports them. Everything is taken away after:
    modules, app configs, kinds, admin registrations, index tables."""
    packages = set()
    for block in blocks:
        module = module_of(block)
        if module is None or block.marker == "skip":
            continue
        path = root / block.file
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(block.code)
        packages.add(module.split(".")[0])
    for name in packages:
        assert name not in sys.modules, f"{name} would shadow an importable package"
    sys.path.insert(0, str(root))
    kinds_before = dict(KINDS)
    admin_before = set(admin.site._registry)
    with contextlib.ExitStack() as stack:
        try:
            yield _Reader(stack)
        finally:
            sys.path.remove(str(root))
            for name in list(sys.modules):
                if name.split(".")[0] in packages:
                    del sys.modules[name]
            for model in set(admin.site._registry) - admin_before:
                admin.site.unregister(model)
            KINDS.clear()
            KINDS.update(kinds_before)


@contextlib.contextmanager
def _without_suite_indexes() -> Iterator[None]:
    """The global indexes of the suite's apps (``indexes.py`` of tests/ and project/) out of the
    registry until the block ends."""
    suite = [
        index
        for index in registry.all()
        if (getattr(index, "module", None) or "").startswith(("tests.", "project."))
    ]
    for index in suite:
        registry.unregister(index.name)
    try:
        yield
    finally:
        for index in suite:
            registry.register(index)


def _install_app(package: str, stack: contextlib.ExitStack) -> None:
    """Make ``package`` an installed app until the stack closes (its models are registered as
    its models module is imported)."""
    config = AppConfig.create(package)
    config.apps = apps
    config.models = apps.all_models[package]
    apps.app_configs[package] = config
    apps.clear_cache()

    def uninstall() -> None:
        del apps.app_configs[package]
        apps.all_models.pop(package, None)
        apps.clear_cache()

    stack.callback(uninstall)
