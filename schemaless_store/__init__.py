"""schemaless_store: a schema-less, sharded entity store on MySQL with live secondary indexes."""

from __future__ import annotations

from .indexes import Index


class _Delete:
    """What a function given to ``Entity.objects.modify()`` or ``mapentities`` returns to
    delete the entity it was given (:data:`DELETE`)."""

    def __repr__(self) -> str:
        return "schemaless_store.DELETE"


DELETE = _Delete()


def __getattr__(name: str) -> object:
    # ``schemaless_store.Kind`` lazily: importing it loads the models, which an app's package
    # must not do before Django's app registry is ready.
    if name == "Kind":
        from .kinds import Kind

        return Kind
    raise AttributeError(f"module 'schemaless_store' has no attribute {name!r}")


__all__ = ["DELETE", "Index", "Kind"]
__version__ = "0.1.0.dev0"
