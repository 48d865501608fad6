"""Placement: ids that put an entity in the bucket of one of its properties (docs/placement.md).

An entity normally lives in the bucket of its id's hash, so a user's entries are spread over every
shard while the user's index rows (an index sharded on ``user_id``) sit on one. A **placed** id
carries a bucket instead: the bucket of a property value, as an index sharded on that property
places its rows (:func:`..values.entity_ids.placed_bucket`). The entity then lives next to its index
rows, and a page of that index reads rows and entities in one statement (a join on that shard).

Routing by id stays a pure function of the id, with no lookup: the bucket is written in it. A
bucket move carries placed entities with their bucket like any other.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ..config import conf
from ..config.indexes import KIND_PROPERTY, registry
from ..exceptions import ConfigurationError, IndexValueError, PlacementError
from ..values import bucket_hash, entity_ids


def bucket_of_value(prop: str, value: Any, kind: str | None = None) -> int:
    """The bucket where indexes sharded on ``prop`` put the rows of ``value``: the indexes that
    hold rows of an entity of ``kind`` (the plain ones, and that kind's own, docs/kinds.md).

    ``PlacementError`` when no such index is sharded on ``prop`` (a placed entity would sit
    next to nothing), when the indexes sharded on it place the value in different buckets
    (different column types), or when the value cannot be indexed by them.
    """
    indexes = [
        index
        for index in registry.valid()
        if index.shard_on == prop and (index.kind is None or index.kind == kind)
    ]
    if not indexes:
        of_kind = f" for an entity of kind {kind!r}" if kind is not None else ""
        raise PlacementError(
            f"no declared index is sharded on {prop!r}{of_kind}: an entity placed with it "
            "would sit next to no index rows"
        )
    if type(value) is list:
        raise PlacementError(
            f"cannot place an entity with {prop!r}: its value is a list (one entity, one bucket)"
        )
    buckets = conf.get().buckets
    found: dict[int, list[str]] = {}
    for index in indexes:
        try:
            key = index.routing_key(index.column_value(prop, value))
        except IndexValueError as exc:
            raise PlacementError(f"cannot place an entity with {prop!r}: {exc}") from None
        found.setdefault(bucket_hash.bucket_of(key, buckets), []).append(index.name)
    if len(found) > 1:
        names = sorted(name for group in found.values() for name in group)
        raise PlacementError(
            f"the indexes sharded on {prop!r} ({', '.join(names)}) place {value!r} in different "
            "buckets (their column types differ): placement cannot follow all of them"
        )
    (bucket,) = found
    return bucket


def placed_id(prop: str, value: Any, kind: str | None = None) -> uuid.UUID:
    """A new entity id in the bucket of ``value`` of property ``prop``
    (:func:`bucket_of_value`): an entity (of ``kind``) with this id lives with the index rows of
    that value."""
    if conf.get().buckets > entity_ids.PLACED_MAX_BUCKETS:
        raise ConfigurationError(
            f"placed ids hold a bucket below {entity_ids.PLACED_MAX_BUCKETS}; "
            f"SCHEMALESS['BUCKETS'] is {conf.get().buckets}"
        )
    bucket = bucket_of_value(prop, value, kind)
    return uuid.UUID(
        bytes=entity_ids.make_placed_id(bucket, time.time_ns() // 1_000_000, os.urandom(5))
    )


def placed_id_for(properties: Mapping[str, Any], prop: str) -> uuid.UUID:
    """:func:`placed_id` of an entity's own ``prop`` value (which it must have), by the indexes
    that hold its rows (its kind's among them)."""
    if not isinstance(prop, str):
        raise PlacementError(f"placed_with names a property, not {type(prop).__name__}")
    if prop not in properties:
        raise PlacementError(f"cannot place an entity with {prop!r}: it has no such property")
    kind = properties.get(KIND_PROPERTY)
    return placed_id(prop, properties[prop], kind if isinstance(kind, str) else None)


def is_placed(entity_id: Any) -> bool:
    """Whether an id (uuid, bytes or hex) is a placed id."""
    return entity_ids.placed_bucket(entity_ids.entity_id_bytes(entity_id)) is not None
