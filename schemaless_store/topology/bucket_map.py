"""The bucket -> shard map in force: stored, versioned, in the metadata database, and cached by
every process for at most ``SCHEMALESS["MAP_MAX_AGE"]`` seconds.

``SCHEMALESS["SHARDS"]`` only seeds the map: the first ``migrate`` stores it as version 1, and
from then on the highest stored version is the truth (a system check warns when the setting
says otherwise). Before anything is stored (a store not migrated yet) the setting is the map.

A process's copy is a hint. The authority on a bucket is the shard that holds it: each shard
keeps its own bucket table (:mod:`..tables.buckets`), every write checks it inside its
transaction, and a write refused there is retried on the owner after the map is read again
(:mod:`..writes.protocol`; docs/resharding.md).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, transaction

from ..config import conf
from ..config.metadata import BucketMove, ShardMap
from ..exceptions import ConfigurationError, NotOwner, SchemalessError
from ..values.bucket_hash import bucket_of

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BucketMap:
    """One version of the map. ``version`` 0 is the seed from the settings (nothing stored)."""

    version: int
    buckets: int
    owners: tuple[str, ...]  # bucket number -> alias
    fetched_at: float  # time.monotonic() before the read that found it
    max_age: float
    moving: frozenset[int] = frozenset()  # buckets a move is copying (their reads are confirmed)
    # Kept after the stored map could not be read: it still routes (shards refuse writes they do
    # not own), but it vouches for no read: each is confirmed by the shard's own bucket table.
    unverified: bool = False

    @property
    def read_bound(self) -> float:
        """How long after it was read this copy still vouches for a read: a move flips its
        buckets at least this long after it marks them moving (:func:`read_bound`)."""
        return read_bound(self.max_age)

    def buckets_of(self, alias: str) -> list[int]:
        return [n for n, owner in enumerate(self.owners) if owner == alias]

    def ranges(self) -> dict[str, list[list[int]]]:
        """``{alias: [[low, high], ...]}`` for every alias the settings name (``[]``: none)."""
        aliases = dict.fromkeys([*conf.get().shards, *self.owners])
        return {alias: spans(self.buckets_of(alias)) for alias in aliases}


def read_bound(max_age: float) -> float:
    """Seconds a map read vouches for reads routed by it (twice its refresh period, and half
    a second for the read itself)."""
    return 2 * max_age + 0.5


class StaleRead(SchemalessError):
    """A read was routed by a map that may be out of date for what it read. The store reads
    again by the new map; it reaches a caller only if a bucket move stays mid-flip for longer
    than ``SCHEMALESS["MOVE_WAIT"]`` (a mover killed then: run it again, docs/resharding.md)."""

    def __init__(self) -> None:
        super().__init__(
            "a bucket move is flipping buckets this read needs and has not finished; "
            "try again (or resume the move: manage.py movebuckets)"
        )


_lock = threading.Lock()
_cached: BucketMap | None = None


def current() -> BucketMap:
    """The map this process routes by: its cached copy, read again once it is older than
    ``SCHEMALESS["MAP_MAX_AGE"]`` seconds."""
    found = _cached
    if found is None or time.monotonic() - found.fetched_at > found.max_age:
        found = refresh()
    return found


def refresh() -> BucketMap:
    """Read the stored map now. If the metadata database cannot be read, the copy this process
    has keeps routing (shards refuse what they do not own); with no copy, the settings do."""
    global _cached
    with _lock:
        started = time.monotonic()
        try:
            found = stored(started)
        except ConfigurationError:
            raise
        except Exception as exc:  # table not migrated yet, database unreachable, ...
            previous = _cached
            if previous is not None and previous.version:
                logger.warning(
                    "reading the shard map failed (%s); keeping version %s", exc, previous.version
                )
                found = BucketMap(
                    previous.version,
                    previous.buckets,
                    previous.owners,
                    started,
                    previous.max_age,
                    previous.moving,
                    unverified=True,
                )
            else:
                # The settings' map, which moves may have changed since: it vouches for no read.
                found = dataclasses.replace(seed(started), unverified=True)
        _cached = found
        return found


def seed(fetched_at: float | None = None) -> BucketMap:
    """The map ``SCHEMALESS["SHARDS"]`` gives (version 0)."""
    settings = conf.get()
    when = time.monotonic() if fetched_at is None else fetched_at
    return BucketMap(0, settings.buckets, settings.bucket_aliases, when, settings.map_max_age)


def stored(fetched_at: float | None = None) -> BucketMap:
    """The highest stored version, or the seed when none is stored."""

    when = time.monotonic() if fetched_at is None else fetched_at
    row = ShardMap.objects.using(DEFAULT_DB_ALIAS).order_by("-version").first()
    if row is None:
        return seed(when)
    settings = conf.get()
    if row.buckets != settings.buckets:
        raise ConfigurationError(
            f"the stored shard map (version {row.version}) has {row.buckets} buckets but "
            f"SCHEMALESS['BUCKETS'] is {settings.buckets}: the bucket count cannot change"
        )
    _aliases, owners = conf.bucket_aliases(row.owners, row.buckets)
    moving = frozenset(n for low, high in row.moving for n in range(low, high + 1))
    return BucketMap(row.version, row.buckets, owners, when, settings.map_max_age, moving)


def publish(
    owners: Sequence[str],
    note: str = "",
    using: str = DEFAULT_DB_ALIAS,
    moving: Iterable[int] = (),
) -> BucketMap:
    """Store ``owners`` (bucket -> alias), with the buckets a move is copying, as the next
    version and return it. Two publishers cannot both take the same version (it is the
    primary key)."""

    settings = conf.get()
    if len(owners) != settings.buckets:
        raise ConfigurationError(f"a map needs {settings.buckets} owners, not {len(owners)}")
    unknown = sorted(set(owners) - set(settings.shards))
    if unknown:
        raise ConfigurationError(f"{unknown} are not shard aliases; shards: {settings.shards}")
    draft = BucketMap(0, settings.buckets, tuple(owners), 0.0, settings.map_max_age)
    with transaction.atomic(using=using):
        last = ShardMap.objects.using(using).order_by("-version").first()
        version = 1 if last is None else last.version + 1
        ShardMap.objects.using(using).create(
            version=version,
            buckets=settings.buckets,
            owners=draft.ranges(),
            moving=spans(moving),
            note=note[:200],
        )
    forget()
    return refresh()


def store_seed(using: str = DEFAULT_DB_ALIAS) -> BucketMap | None:
    """Store ``SCHEMALESS["SHARDS"]`` as version 1 if no map is stored yet (``migrate`` on
    ``default`` does); the new version, or None if one was stored already."""

    if ShardMap.objects.using(using).exists():
        return None
    return publish(seed().owners, note="seeded from SCHEMALESS['SHARDS']", using=using)


def moves_unfinished(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether a bucket move has not finished (its copies may be on two shards)."""

    try:
        return BucketMove.objects.using(using).exclude(phase__in=BucketMove.FINISHED).exists()
    except Exception:  # not migrated yet: no moves
        return False


def differs_from_settings() -> BucketMap | None:
    """The stored map when it is not what ``SCHEMALESS["SHARDS"]`` says, else None."""
    found = stored()
    if found.version and found.owners != conf.get().bucket_aliases:
        return found
    return None


def owners_from(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Bucket owners from a ``SHARDS``-style dict (validated as the setting is)."""
    return conf.bucket_aliases(dict(spec), conf.get().buckets)[1]


def spans(numbers: Iterable[int]) -> list[list[int]]:
    spans: list[list[int]] = []
    for number in sorted(set(numbers)):
        if spans and spans[-1][1] == number - 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return spans


def describe(numbers: Iterable[int]) -> str:
    """``0-1364, 2000`` for bucket numbers; ``none`` for none."""
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans(numbers))
    return text or "none"


def forget(**kwargs: Any) -> None:
    """Drop this process's copy: the next :func:`current` reads the stored map."""
    global _cached
    _cached = None


def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("SCHEMALESS", "DATABASES"):
        forget()


# --- routing by the map ------------------------------------------------------------------------


def alias_for(key: bytes) -> str:
    """The alias whose buckets include this key (an entity id, or an encoded ``shard_on`` value),
    by this process's copy of the map (:func:`current`)."""
    found = current()
    return found.owners[bucket_of(key, found.buckets)]


def bucket_for(key: bytes) -> int:
    return bucket_of(key, conf.get().buckets)


def await_new_owner(alias: str, buckets: set[int]) -> None:
    """After ``alias`` refused a write for ``buckets``: read the map again until it names
    another owner for all of them (a move flipping them finishes), for at most
    ``SCHEMALESS["MOVE_WAIT"]`` seconds; then :class:`NotOwner`."""
    deadline = time.monotonic() + conf.get().move_wait
    pause = 0.005
    while True:
        found = refresh()
        if all(found.owners[number] != alias for number in buckets):
            return
        if time.monotonic() >= deadline:
            raise NotOwner(alias, buckets)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


setting_changed.connect(_reset, dispatch_uid="schemaless_shardmap_reset")
