"""The cleaner: backfills new indexes and keeps every index exact (docs/design.md#cleaner).

- :mod:`.worker`: :class:`Cleaner`, the run loop (rounds, locks, throttle, stop signals);
- :mod:`.passes`: the backfill, repair and sweep passes over one (index, shard);
- :mod:`.repairs`: the passes' writes, through the write protocol's steps;
- :mod:`.records`: what a pass and a run did, and the pass records the admin shows;
- one cleaner per (index, shard): the server lock of :mod:`..guards.server_lock`, which dies
  with its process.
"""

from __future__ import annotations

from .records import PassResult, Summary
from .worker import Cleaner

__all__ = ["Cleaner", "PassResult", "Summary"]
