"""The store's Django models (the module Django loads for the app):

- :mod:`.entity`: ``Entity`` and its manager (on shards);
- :mod:`.cells`: ``Cell`` and ``CellHead``, the cell store (on shards);
- :mod:`.metadata`: ``IndexState``, ``CleanerCheckpoint``, ``CleanerPass`` (on ``default``).
"""

from __future__ import annotations

from .cells import Cell, CellHead
from .entity import Entity
from .metadata import CleanerCheckpoint, CleanerPass, IndexState  # first: the paths use them

__all__ = ["Cell", "CellHead", "CleanerCheckpoint", "CleanerPass", "Entity", "IndexState"]
