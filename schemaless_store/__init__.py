"""schemaless_store: a schema-less, sharded entity store on MySQL with live secondary indexes."""

from __future__ import annotations

from .indexes import Index

__all__ = ["Index"]
__version__ = "0.1.0.dev0"
