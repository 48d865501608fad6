"""Index lifecycle: ``building`` -> ``ready`` -> ``retired``, kept in the metadata database.

Writers maintain every valid declared index, whatever its state: an index is maintained from the
moment it is declared, while the cleaner backfills it (:mod:`..cleaner`), which makes it ``ready``
(:func:`mark_ready`) once every shard is backfilled. Queries use only ``ready`` indexes.
Retired indexes are no longer declared, so nothing maintains them; their tables wait for
``manage.py dropindex`` (:func:`drop_retired`), after which the index is forgotten.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError

from ..config.indexes import ENTITIES, Index, Source, registry
from ..config.metadata import CleanerCheckpoint, IndexState
from ..exceptions import ConfigurationError, IndexNotReady
from ..topology import shards
from . import entities as entity_table
from .ddl import drop_table

BUILDING, READY, RETIRED = "building", "ready", "retired"
# How long a process trusts the states it read (a backfill finishing shows up within this).
STATE_CACHE_SECONDS = 1.0

_cache_lock = threading.Lock()
_cache: dict[str, Any] = {"at": 0.0, "states": {}}


def maintained_indexes() -> list[Index]:
    return registry.valid()


def states(refresh: bool = False) -> dict[str, str]:
    """``{index name: state}`` from the metadata database (cached for a second)."""
    now = time.monotonic()
    with _cache_lock:
        if not refresh and now - _cache["at"] < STATE_CACHE_SECONDS:
            return _cache["states"]
    found = dict(IndexState.objects.using(DEFAULT_DB_ALIAS).values_list("name", "state"))
    with _cache_lock:
        _cache.update(at=now, states=found)
    return found


def forget_states() -> None:
    with _cache_lock:
        _cache["at"] = 0.0


def state_of(index: Index) -> str | None:
    return states().get(index.name)


def require_ready(index: Index) -> None:
    state = state_of(index)
    if state == READY:
        return
    state = states(refresh=True).get(index.name)
    if state == READY:
        return
    if state is None:
        raise IndexNotReady(
            f"index {index.name!r} has no state yet: run `manage.py migrateall` to create its "
            f"tables, then `manage.py runcleaner --index={index.name}`"
        )
    raise IndexNotReady(
        f"index {index.name!r} is {state}: its backfill is not finished. Run "
        f"`manage.py runcleaner --index={index.name}`, or call .allow_building() on the "
        "query to accept partial results"
    )


def set_state(name: str, state: str) -> None:
    IndexState.objects.using(DEFAULT_DB_ALIAS).filter(name=name).update(state=state)
    forget_states()


def mark_ready(name: str) -> bool:
    """``building`` -> ``ready`` (the cleaner's last step of a backfill). False if the index was
    not building: a retirement that happened meanwhile must not be undone."""
    changed = (
        IndexState.objects.using(DEFAULT_DB_ALIAS)
        .filter(name=name, state=BUILDING)
        .update(state=READY)
    )
    forget_states()
    return bool(changed)


def store_is_empty(source: Source = ENTITIES) -> bool:
    """No entities (or, for an index over a cell column, no row has that column) on any shard:
    an index declared now has nothing to backfill."""
    return not any(entity_table.exists(source, alias) for alias in shards.shard_aliases())


def declare(index: Index, *, empty: bool | None = None) -> str:
    """Record a newly declared index: ``ready`` on an empty store, else ``building``."""
    existing = IndexState.objects.using(DEFAULT_DB_ALIAS).filter(name=index.name).first()
    if existing is not None and existing.state != RETIRED:
        return existing.state
    if empty is None:
        empty = store_is_empty(index.source)
    state = READY if empty else BUILDING
    IndexState.objects.using(DEFAULT_DB_ALIAS).update_or_create(
        name=index.name,
        defaults={"state": state, "properties": list(index.properties), "shard_on": index.shard_on},
    )
    # Checkpoints of an earlier life of this name (declared, retired, declared again) would make
    # the cleaner skip a backfill that has not happened.
    CleanerCheckpoint.objects.using(DEFAULT_DB_ALIAS).filter(index_name=index.name).delete()
    forget_states()
    return state


def sync_states(using: str = DEFAULT_DB_ALIAS) -> None:
    """After ``migrate`` on the metadata database: record new indexes, retire removed ones."""
    if using != DEFAULT_DB_ALIAS:
        return
    declared = {index.name: index for index in registry.valid()}
    known = dict(IndexState.objects.using(using).values_list("name", "state"))
    new = [index for name, index in declared.items() if known.get(name) in (None, RETIRED)]
    for index in new:
        declare(index, empty=_empty_or_unknown(index.source))
    gone = [name for name, state in known.items() if name not in declared and state != RETIRED]
    if gone:
        IndexState.objects.using(using).filter(name__in=gone).update(state=RETIRED)
    forget_states()


def _empty_or_unknown(source: Source) -> bool:
    # On a first migrate of ``default`` the shards may not have their tables yet: no entities.
    try:
        return store_is_empty(source)
    except DatabaseError:
        return False  # promote_if_empty() settles it when the shards are migrated


def promote_if_empty() -> None:
    """After ``migrate`` on a shard: an index still building on an empty store is ready."""
    building = [name for name, state in states(refresh=True).items() if state == BUILDING]
    for name in building:
        source = registry.get(name).source if name in registry else ENTITIES
        try:
            empty = store_is_empty(source)
        except DatabaseError:
            return  # another shard is not migrated yet
        if empty:
            set_state(name, READY)


# --- retired indexes ---------------------------------------------------------------------------


def retired_names() -> list[str]:
    return sorted(
        IndexState.objects.using(DEFAULT_DB_ALIAS)
        .filter(state=RETIRED)
        .values_list("name", flat=True)
    )


def check_droppable(name: str) -> None:
    """Raise :class:`ConfigurationError` (saying what to do) unless ``name`` is retired."""
    if name in registry:
        state = states(refresh=True).get(name, "not recorded yet")
        raise ConfigurationError(
            f"index {name!r} is still declared (state: {state}); only a retired index can be "
            "dropped. Remove its declaration from your indexes.py, deploy, run "
            f"`manage.py migrateall` (which marks it retired), then `manage.py dropindex {name}`"
        )
    found = IndexState.objects.using(DEFAULT_DB_ALIAS).filter(name=name).first()
    if found is None:
        retired = retired_names()
        raise ConfigurationError(
            f"no index named {name!r} is known; retired indexes: "
            f"{', '.join(retired) if retired else 'none'}"
        )
    if found.state != RETIRED:
        raise ConfigurationError(
            f"index {name!r} is {found.state}, not retired, although no longer declared here: "
            "run `manage.py migrateall` so removed declarations are marked retired"
        )


def drop_retired(name: str) -> list[str]:
    """Drop a retired index's tables on every shard and forget its state and checkpoints.

    Returns the shard aliases. Every process must run code without the declaration first: a
    process that still declares the index would fail to write to the dropped table.
    """
    check_droppable(name)
    aliases = list(shards.shard_aliases())
    for alias in aliases:
        with shards.errors_named(alias):
            drop_table(alias, name)
    # Pass records stay: they are the history the admin shows.
    CleanerCheckpoint.objects.using(DEFAULT_DB_ALIAS).filter(index_name=name).delete()
    IndexState.objects.using(DEFAULT_DB_ALIAS).filter(name=name, state=RETIRED).delete()
    forget_states()
    return aliases
