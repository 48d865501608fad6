"""What the mapentities tests share beside the functions they apply (:mod:`.mapfuncs`)."""

from __future__ import annotations

from django.db import connections

from schemaless_store.tables import map_runs
from schemaless_store.topology import shards


def forget_runs() -> None:
    """Delete every run's checkpoints, saved marks and failures on every shard (Django's flush
    empties model tables only, and these are the store's own)."""
    for alias in shards.shard_aliases():
        map_runs.create_tables(alias)
        with connections[alias].cursor() as cursor:
            for table in (map_runs.RUNS, map_runs.SAVED, map_runs.FAILURES):
                cursor.execute(f"DELETE FROM {table}")
