"""What the query property tests (tests/queries) share: emptying the shards raw between
examples, and each lookup's comparison as the oracle applies it in Python."""

from __future__ import annotations

from django.db import connections

from schemaless_store.config.indexes import registry
from schemaless_store.topology import shards


def wipe() -> None:
    """Empty every shard's entities and index tables (raw, bypassing the store)."""
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM entities")
            for index in registry.valid():
                cursor.execute(f"DELETE FROM {connections[alias].ops.quote_name(index.name)}")


COMPARE = {
    "exact": lambda v, t: v == t,
    "in": lambda v, t: v in t,
    "gt": lambda v, t: v > t,
    "gte": lambda v, t: v >= t,
    "lt": lambda v, t: v < t,
    "lte": lambda v, t: v <= t,
}
