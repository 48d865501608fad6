"""Ids and buckets in tests: an id in a given bucket or on a given shard, and handing buckets
from shard to shard by hand: what a finished move leaves behind (the old owner's rows ``gone``,
the new one's ``owned``, a new map version), without copying data."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator

from schemaless_store.tables import buckets as bucket_table
from schemaless_store.topology import bucket_map, shards


def id_in_bucket(number: int, avoid: Iterable[uuid.UUID] = ()) -> uuid.UUID:
    """A fresh uuid4 whose bucket is ``number``."""
    taken = set(avoid)
    while True:
        found = uuid.uuid4()
        if found not in taken and bucket_map.bucket_for(found.bytes) == number:
            return found


def id_on(alias: str) -> uuid.UUID:
    """A random id whose bucket ``alias`` holds."""
    return ids_on(alias, 1)[0]


def ids_on(alias: str, count: int) -> list[uuid.UUID]:
    """``count`` random ids whose buckets ``alias`` holds."""
    found = []
    while len(found) < count:
        candidate = uuid.uuid4()
        if bucket_map.alias_for(candidate.bytes) == alias:
            found.append(candidate)
    return found


def other_alias(alias: str) -> str:
    return next(a for a in shards.shard_aliases() if a != alias)


def hand_over(numbers: Iterable[int], to: str, *, publish: bool = True) -> None:
    """Make ``to`` the owner of ``numbers`` on the shards (and in the stored map if
    ``publish``; without it, every process's map still names the old owner)."""
    numbers = sorted(set(numbers))
    for alias in shards.shard_aliases():
        if alias != to:
            current = bucket_table.states(alias, numbers)
            bucket_table.set_states(alias, [n for n in numbers if n in current], bucket_table.GONE)
    bucket_table.set_states(to, numbers, bucket_table.OWNED)
    if publish:
        publish_elsewhere(numbers, to)


def publish_elsewhere(numbers: Iterable[int], to: str) -> None:
    """A new stored map version giving ``numbers`` to ``to``, as another process would store
    it: this process's copy of the map is left as it is (stale until it is read again)."""
    from schemaless_store.config.metadata import ShardMap

    found = bucket_map.stored()
    owners = list(found.owners)
    for number in numbers:
        owners[number] = to
    draft = bucket_map.BucketMap(0, found.buckets, tuple(owners), 0.0, 0.0)
    ShardMap.objects.create(
        version=found.version + 1, buckets=found.buckets, owners=draft.ranges(), note="test"
    )


def restore() -> None:
    """Every shard's bucket table as the seed map says (the flush of ``default`` after a test
    removes the map versions it published)."""
    seed = bucket_map.seed()
    for alias in shards.shard_aliases():
        bucket_table.set_states(alias, list(range(seed.buckets)), None)
        bucket_table.create(alias, seed.buckets_of(alias))  # seeds it: it is empty
    bucket_map.forget()


@contextlib.contextmanager
def restored_afterwards() -> Iterator[None]:
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def laid_out_as_settings() -> Iterator[None]:
    """A new store laid out as the current ``SCHEMALESS["SHARDS"]`` says: no stored map (the
    setting is in force) and each shard's bucket table seeded from it. Use inside
    ``restored_afterwards()`` and ``override_settings``."""
    from schemaless_store.config.metadata import ShardMap

    ShardMap.objects.all().delete()
    restore()
    yield
