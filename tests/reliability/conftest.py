"""Fixtures of the reliability suite (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import child
from tests.support.buckets import ids_on
from tests.support.factories import PostFactory


@pytest.fixture(scope="module")
def writer(django_db_setup: Any) -> Iterator[child.CrashWriter]:
    """A writer process for the module, killed and started again by the tests (SIGKILL before
    a chosen statement). Made after the test databases exist: the child is handed their names."""
    process = child.CrashWriter()
    yield process
    process.close()


@pytest.fixture
def seeded() -> list[Entity]:
    """Twelve entities on both shards, each in every test index."""
    aliases = shards.shard_aliases()
    ids = [i for alias in aliases for i in ids_on(alias, 12 // len(aliases))]
    return Entity.objects.bulk_put(
        [
            # Three posts per user, tags shared by four: index reads find several entities.
            PostFactory(id=entity_id, user_id=n % 4, tags=[f"t{n % 3}", "all"], username=f"u{n}")
            for n, entity_id in enumerate(ids)
        ]
    )
