"""The health page's cache panel: what the entity cache and the near cache of the process that
serves the page did (docs/cache.md#the-counters). Each process counts its own from its start:
under gunicorn, a page shows the worker that answered it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..cache import entity_cache, near_cache
from ..config import conf


@dataclass(frozen=True)
class Counter:
    name: str  # the attribute it reads: entity_cache.Stats' or near_cache.NearStats'
    label: str
    value: int
    means: str


def cache_panel() -> dict[str, Any] | None:
    """The panel's context; None when ``SCHEMALESS["CACHE"]`` is not set."""
    resolved = conf.get()
    if resolved.cache is None:
        return None
    stats = entity_cache.stats
    counters = [
        Counter("hits", "Hits", stats.hits, "reads served from the cache (Redis or memory)"),
        Counter("near_hits", "Near-cache hits", stats.near_hits, "of the hits, from memory"),
        Counter("misses", "Misses", stats.misses, "ids read from the shards, then filled"),
        Counter(
            "invalidated", "Invalidated", stats.invalidated, "ids whose tokens a write deleted"
        ),
        Counter("failures", "Failures", stats.failures, "cache operations that raised"),
    ]
    near = near_cache.existing() if resolved.near_cache is not None else None
    near_counters = []
    if near is not None:
        held = near.stats
        near_counters = [
            Counter("entries", "Copies held", len(near), f"at most {near.max_entries:,}"),
            Counter("pushed", "Pushed", held.pushed, "copies dropped by Redis's pushes"),
            Counter(
                "refused", "Refused", held.refused, "copies not taken: an invalidation came first"
            ),
            Counter("flushes", "Flushes", held.flushes, "every copy dropped (connection lost)"),
            Counter("connections", "Connections", held.connections, "tracking connections made"),
        ]
    return {
        "alias": resolved.cache,
        "pid": os.getpid(),
        "suspended": not entity_cache.enabled(),
        "near_on": resolved.near_cache is not None,
        "near_live": near is not None and near.usable(),
        "counters": counters,
        "near_counters": near_counters,
    }
