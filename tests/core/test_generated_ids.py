"""Ids the store generates are time-ordered (UUIDv7-like, entity_ids.new_id), so that inserts into
``entities`` clustered by id stay at the right edge of its B-tree; they route by their stable
hash, as a uuid4 did (docs/design.md#the-entities-table)."""

from __future__ import annotations

import time
import uuid

from schemaless_store.models import Entity
from schemaless_store.values import bucket_hash, entity_ids


def test_a_generated_id_is_a_version_7_uuid_that_sorts_by_its_millisecond():
    made = [
        entity_ids._new_id(millis, bytes([n]) * 10)
        for n, millis in enumerate([5, 7, 7_000, 1 << 47])
    ]
    for raw in made:
        parsed = uuid.UUID(bytes=raw)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert made == sorted(made)
    assert int.from_bytes(made[2][:6], "big") == 7_000


def test_entities_given_no_id_get_time_ordered_ids():
    first = Entity(title="a")
    time.sleep(0.002)
    second = Entity(title="b")
    assert first.has_generated_id and second.has_generated_id
    assert first.id.version == second.id.version == 7
    assert first.row_id < second.row_id
    now = time.time() * 1000
    assert now - 1000 < int.from_bytes(second.row_id[:6], "big") <= now + 1
    assert Entity(id=uuid.UUID(int=3)).id == uuid.UUID(int=3)


def test_a_generated_id_routes_by_its_stable_hash_never_as_a_placed_id():
    for _ in range(2000):
        raw = entity_ids.new_id()
        assert entity_ids.placed_bucket(raw) is None
        assert bucket_hash.bucket_of(raw, 4096) == bucket_hash.stable_hash(raw) % 4096
    # A fixed id routes to the same bucket in every process (blake2b, never hash()).
    fixed = entity_ids._new_id(1_700_000_000_000, bytes(range(10)))
    assert fixed.hex() == "018bcfe5680070018203040506070809"
    assert bucket_hash.bucket_of(fixed, 4096) == 322


def test_generated_ids_spread_over_buckets_like_random_ones():
    buckets = {bucket_hash.bucket_of(entity_ids.new_id(), 64) for _ in range(2000)}
    assert len(buckets) == 64
