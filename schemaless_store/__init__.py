"""schemaless_store: a schema-less, sharded entity store on MariaDB (10.11 or later; not MySQL)
with secondary indexes you add and drop on a live system, as a reusable Django app."""

from __future__ import annotations

import importlib
from typing import Any

from .config.indexes import Index


class _Delete:
    """What a function given to ``Entity.objects.modify()`` or ``mapentities`` returns to
    delete the entity it was given (:data:`DELETE`)."""

    def __repr__(self) -> str:
        return "schemaless_store.DELETE"


DELETE = _Delete()


# Given lazily (PEP 562), when first asked for: ``schemaless_store.Kind`` loads Django models,
# which an app's package must be able to import before the app registry is ready. Nothing
# runs at import time, and no module of the package asks for these names
# (tests/kinds/test_package_root.py). The house's layer test reads this load as an import
# from the root to the faces and allows it by name, with this reason (LAZY_LOADS in
# tests/house/test_layers.py).
LAZY = {"Kind": "schemaless_store.kinds"}


def __getattr__(name: str) -> Any:
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY})


# Not Kind: a star-import may run before the app registry is ready (Kind is lazy for that).
__all__ = ["DELETE", "Index"]
__version__ = "0.1.0"
