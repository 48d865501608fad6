"""The fixtures of the kinds tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections

from schemaless_store.tables import map_runs
from schemaless_store.topology import shards


@pytest.fixture
def fresh_runs() -> Iterator[None]:
    """No mapentities run's checkpoints from another test (a flush leaves them)."""
    yield
    for alias in shards.shard_aliases():
        map_runs.create_tables(alias)
        with connections[alias].cursor() as cursor:
            for table in (map_runs.RUNS, map_runs.SAVED, map_runs.FAILURES):
                cursor.execute(f"DELETE FROM {table}")
