"""What the mapentities tests share beside the functions they apply (:mod:`.mapfuncs`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from schemaless_store.tables import map_runs
from schemaless_store.topology import shards
from tests.support import mapfuncs


def forget_runs() -> None:
    """Delete every run's checkpoints, saved marks and failures on every shard (Django's flush
    empties model tables only, and these are the store's own)."""
    for alias in shards.shard_aliases():
        map_runs.create_tables(alias)
        with connections[alias].cursor() as cursor:
            for table in (map_runs.RUNS, map_runs.SAVED, map_runs.FAILURES):
                cursor.execute(f"DELETE FROM {table}")


def fresh_runs() -> Any:
    """An autouse fixture (assign it in the test module): no run's checkpoints, saved marks or
    failures from another test (Django's flush empties model tables only), and the applied
    functions' records reset (:mod:`.mapfuncs`)."""

    @pytest.fixture(autouse=True)
    def _fresh_runs() -> Iterator[None]:
        mapfuncs.CALLS.clear()
        mapfuncs.BROKEN["on"] = True
        yield
        forget_runs()

    return _fresh_runs
