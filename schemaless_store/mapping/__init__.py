"""Changing data that is already stored, while the site runs: ``manage.py mapentities`` and
:func:`map_entities` (docs/usage.md, "Changing data that is already stored").

A function gets each stored entity and changes it in place (or returns
:data:`schemaless_store.DELETE`); the run saves, through the write protocol, the entities whose
properties changed, each only if nobody wrote it since it was read (:mod:`.apply`). It follows
the cleaner's ways: one worker per shard, a lock per (function, shard), checkpoints and a note
of every entity saved, so a killed run resumes and never applies the function twice to an
entity it saved (:mod:`..tables.map_runs`), the same throttle, a progress bar, and a summary
(:mod:`.runner`, :mod:`.walk`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from .runner import DEFAULT_BATCH_SIZE, Mapper, MapSummary

__all__ = ["DEFAULT_BATCH_SIZE", "MapSummary", "Mapper", "map_entities"]


def map_entities(
    function: Callable[[Any], Any] | str,
    *,
    where: Mapping[str, Any] | None = None,
    kind: str | None = None,
    shards: Sequence[str] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    sleep: float = 0.0,
    duty: float = 1.0,
    max_latency: float | None = None,
    dry_run: bool = False,
    restart: bool = False,
    progress: bool = False,
    progress_file: TextIO | None = None,
) -> MapSummary:
    """Apply ``function`` (a callable, or its dotted path) to every stored entity, or to those
    ``filter_index(**where)`` finds, and save what it changed; see the module docs.

    ``kind``: only the entities of that kind (docs/kinds.md), given to ``function`` as
    instances of the kind's class (saved without the kind's validation: this is how stored
    values that no longer fit are mended); ``where`` then uses the kind's indexes.
    ``shards``: walk only these shards. ``sleep``, ``duty``, ``max_latency`` (seconds): the
    cleaner's throttle. ``dry_run``: write nothing; the summary counts what would change and
    holds 3 examples. ``restart``: forget an earlier run of the same function and ``where``
    (its checkpoints, which entities it saved, its failures) and start over. A run that is
    interrupted, stopped by a bucket move, or had failures is finished by calling it again.
    Returns a :class:`MapSummary` (``ok`` when every shard was walked and nothing failed).
    """
    return Mapper(
        function,
        where=where,
        kind=kind,
        shards_=shards,
        batch_size=batch_size,
        sleep=sleep,
        duty=duty,
        max_latency=max_latency,
        dry_run=dry_run,
        restart=restart,
        progress=progress,
        progress_file=progress_file,
    ).execute()
