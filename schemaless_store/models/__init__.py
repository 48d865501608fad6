"""The store's Django models (the module Django loads for the app):

- :mod:`.entity`: ``Entity`` and its manager (on shards);
- :mod:`.cell`: ``Cell`` and ``CellHead``, the cell store (on shards);
- the metadata tables (on ``default``), defined in :mod:`schemaless_store.config.metadata` so that
  the storage layer reads them without loading this package (and the read and write paths
  it loads), and registered with Django from here.
"""

from __future__ import annotations

from ..config.metadata import BucketMove, CleanerCheckpoint, CleanerPass, IndexState, ShardMap
from .cell import Cell, CellHead
from .entity import Entity

__all__ = [
    "BucketMove",
    "Cell",
    "CellHead",
    "CleanerCheckpoint",
    "CleanerPass",
    "Entity",
    "IndexState",
    "ShardMap",
]
