"""What the crash tests (tests/reliability) share: the store every case starts from (three
entities, ``BEFORE``) and the indexes a mixed writer's entities can touch (the cleaner's pass
after a kill runs on those)."""

from __future__ import annotations

import random
import uuid
from typing import Any

from django.db import connections

from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import child

A, B, C, D = (uuid.UUID(int=n) for n in (0xA, 0xB, 0xC, 0xD))
BEFORE: dict[uuid.UUID, dict[str, Any]] = {
    A: {"user_id": "u1", "link": "https://a", "published": 1, "tags": ["x", "y"], "username": "an"},
    B: {"user_id": "u2", "link": "https://b", "published": 2, "tags": ["y"], "username": "bo"},
    C: {"user_id": "u1", "link": "https://c", "published": 3, "tags": ["z"]},
}


def reset_store() -> None:
    """Empty every shard's entities and index tables (raw), then write ``BEFORE``."""
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            cursor.execute("DELETE FROM entities")
            for index in registry.valid():
                cursor.execute(f"DELETE FROM {conn.ops.quote_name(index.name)}")
    Entity.objects.bulk_put([{"id": i, **props} for i, props in BEFORE.items()])


def touched_indexes() -> list[str]:
    """The indexes 200 seeded mixed writes' entities (``child.mixed_props``) imply rows in."""
    rng = random.Random(0)
    samples = [child.mixed_props(rng) for _ in range(200)]
    return [i.name for i in registry.valid() if any(i.rows_for(p) for p in samples)]
