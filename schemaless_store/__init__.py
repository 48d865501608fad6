"""schemaless_store: a schema-less, sharded entity store on MySQL with live secondary indexes."""

from __future__ import annotations

from .indexes import Index


class _Delete:
    """What a function given to ``Entity.objects.modify()`` or ``mapentities`` returns to
    delete the entity it was given (:data:`DELETE`)."""

    def __repr__(self) -> str:
        return "schemaless_store.DELETE"


DELETE = _Delete()


# A kind is ``schemaless_store.kinds.Kind``: not re-exported here, since every module of the
# package imports this one (a re-export would put the whole package in one import cycle).
__all__ = ["DELETE", "Index"]
__version__ = "0.1.0.dev0"
