"""Placed (co-located) entities (issue 20 part 1, docs/placement.md): an id that carries the
bucket of a property value, so that an entity lives with the index rows of that value and a
page of them is one statement."""

from __future__ import annotations

import uuid

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from schemaless_store import Index
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import PlacementError
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, placement, shards
from schemaless_store.values import bucket_hash, entity_ids
from tests.support import STORE
from tests.support.invariants import assert_exact
from tests.support.moving import run
from tests.support.raw import count_everything

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def index_alias(user: bytes) -> str:
    index = registry.get("index_user_published")
    return bucket_map.alias_for(index.routing_key(index.column_value("user_id", user)))


def statements_per_shard(evaluate) -> dict[str, int]:
    """How many statements each shard received while ``evaluate()`` ran."""
    captures = {
        alias: CaptureQueriesContext(connections[alias]) for alias in shards.shard_aliases()
    }
    for capture in captures.values():
        capture.__enter__()
    try:
        evaluate()
    finally:
        for capture in captures.values():
            capture.__exit__(None, None, None)
    return {alias: len(capture.captured_queries) for alias, capture in captures.items()}


def test_a_placed_id_is_a_uuid8_that_carries_its_bucket_and_others_keep_hashing():
    for bucket in (0, 1, 300, 4095, 65535):
        raw = entity_ids.make_placed_id(bucket, 1_700_000_000_000, b"\x01\x02\x03\x04\x05")
        made = uuid.UUID(bytes=raw)
        assert made.version == 8 and made.variant == uuid.RFC_4122
        assert entity_ids.placed_bucket(raw) == bucket
        assert bucket_hash.bucket_of(raw, 4096) == bucket % 4096
        assert bucket_hash.buckets_of([raw, raw], 4096) == [bucket % 4096] * 2
    for _ in range(2000):  # a uuid4 is never taken for a placed id
        plain = uuid.uuid4().bytes
        assert entity_ids.placed_bucket(plain) is None
        assert bucket_hash.bucket_of(plain, 4096) == bucket_hash.stable_hash(plain) % 4096
    mixed = [uuid.uuid4().bytes, entity_ids.make_placed_id(7, 0, bytes(5)), b"\x50short-key"]
    assert bucket_hash.buckets_of(mixed, 4096) == [bucket_hash.bucket_of(k, 4096) for k in mixed]
    with pytest.raises(ValueError, match="below 65536"):
        entity_ids.make_placed_id(65536, 0, bytes(5))
    # Placed ids made later sort later (their first six bytes are the time in ms).
    first = placement.placed_id("user_id", b"u" * 16)
    later = entity_ids.make_placed_id(0, (2**48) - 1, bytes(5))
    assert first.bytes < later


def test_create_placed_with_puts_the_entity_with_its_index_rows():
    user = uuid.uuid4().bytes
    made = [
        Entity.objects.create(placed_with="user_id", user_id=user, published=n, title=f"t{n}")
        for n in range(12)
    ]
    assert {e.shard for e in made} == {index_alias(user)}
    assert all(placement.is_placed(e.id) and e.id.version == 8 for e in made)
    assert len({e.id for e in made}) == 12
    assert Entity.objects.get(id=made[3].id)["title"] == "t3"
    assert set(Entity.objects.get_many([e.id for e in made])) == {e.id for e in made}
    # Nothing of the option is stored: it is not a property.
    assert "placed_with" not in Entity.objects.get(id=made[0].id).properties
    assert_exact()


def test_a_page_of_placed_entities_is_one_statement_on_one_shard():
    user = uuid.uuid4().bytes
    for n in range(40):
        Entity.objects.create(placed_with="user_id", user_id=user, published=n, title=f"t{n}")
    here = index_alias(user)
    found: list[list[int]] = []

    def page() -> None:
        query = Entity.objects.filter_index(user_id=user).order_by("-published")[:30]
        found.append([e["published"] for e in query])

    def everything() -> None:
        found.append(sorted(e["published"] for e in Entity.objects.filter_index(user_id=user)))

    counts = statements_per_shard(page)
    assert found[-1] == list(range(39, 9, -1))
    assert counts == {alias: int(alias == here) for alias in shards.shard_aliases()}, counts
    counts = statements_per_shard(everything)
    assert found[-1] == list(range(40))
    assert counts == {alias: int(alias == here) for alias in shards.shard_aliases()}, counts


def test_pages_mixing_placed_and_hashed_entities_stay_exact():
    user = uuid.uuid4().bytes
    placed = Entity.objects.bulk_put(
        [{"user_id": user, "published": n} for n in range(0, 60, 2)], placed_with="user_id"
    )
    hashed = Entity.objects.bulk_put([{"user_id": user, "published": n} for n in range(1, 60, 2)])
    assert all(placement.is_placed(e.id) for e in placed)
    assert not any(placement.is_placed(e.id) for e in hashed)
    assert {e.shard for e in hashed} == set(shards.shard_aliases())  # 30 uuid4s: both shards
    query = Entity.objects.filter_index(user_id=user)
    assert [e["published"] for e in query.order_by("published")] == list(range(60))
    assert [e["published"] for e in query.order_by("-published")[:25]] == list(range(59, 34, -1))
    assert sorted(e["published"] for e in query) == list(range(60))
    assert_exact()


def test_bulk_put_places_the_items_without_an_id_and_keeps_the_ids_given():
    user = uuid.uuid4().bytes
    given = uuid.uuid4()
    items = Entity.objects.bulk_put(
        [{"id": given, "user_id": user}, {"user_id": user}, Entity(user_id=user)],
        placed_with="user_id",
    )
    assert items[0].id == given and not placement.is_placed(given)
    assert all(placement.is_placed(e.id) and e.shard == index_alias(user) for e in items[1:])
    # Putting a placed entity again keeps it where it is.
    items[1]["title"] = "again"
    Entity.objects.bulk_put([items[1]], placed_with="user_id")
    assert Entity.objects.get(id=items[1].id)["title"] == "again"


def test_bad_placements_are_refused_with_nothing_written():
    before = count_everything()
    cases = [
        ({"placed_with": "title", "title": "x"}, "no declared index is sharded on 'title'"),
        ({"placed_with": "user_id", "title": "x"}, "it has no such property"),
        ({"placed_with": "user_id", "user_id": [b"a", b"b"]}, "its value is a list"),
        ({"placed_with": "user_id", "id": uuid.uuid4(), "user_id": b"u"}, "not both"),
    ]
    for kwargs, message in cases:
        with pytest.raises(PlacementError, match=message):
            Entity.objects.create(**kwargs)
    with pytest.raises(PlacementError, match="has no such property"):
        Entity.objects.bulk_put([{"user_id": b"u"}, {"title": "no user"}], placed_with="user_id")
    assert count_everything() == before


def test_indexes_that_disagree_about_a_value_s_bucket_refuse_placement():
    as_int = Index(table="index_score_int", properties=["score"], shard_on="score", types={})
    as_float = Index(
        table="index_score_float", properties=["score"], shard_on="score", types={"score": "float"}
    )
    registry.register(as_int)
    registry.register(as_float)
    try:
        value = next(
            v
            for v in range(1000)
            if bucket_hash.bucket_of(as_int.routing_key(as_int.column_value("score", v)), 4096)
            != bucket_hash.bucket_of(as_float.routing_key(as_float.column_value("score", v)), 4096)
        )
        with pytest.raises(PlacementError, match="different buckets"):
            placement.placed_id("score", value)
    finally:
        registry.unregister("index_score_int")
        registry.unregister("index_score_float")


def test_a_bucket_move_carries_placed_entities_and_their_pages_stay_one_statement():
    # A user whose index rows live in the buckets test_moves moves (0-299).
    index = registry.get("index_user_published")
    user = next(
        candidate
        for candidate in (uuid.uuid4().bytes for _ in range(100_000))
        if bucket_map.bucket_for(index.routing_key(index.column_value("user_id", candidate))) < 300
    )
    made = Entity.objects.bulk_put(
        [{"user_id": user, "published": n} for n in range(20)], placed_with="user_id"
    )
    source = made[0].shard
    target = next(alias for alias in shards.shard_aliases() if alias != source)
    assert "verified" in run("--to", target, "--buckets", "0-299")
    bucket_map.forget()
    assert {e.shard for e in made} == {target} == {index_alias(user)}
    with connections[source].cursor() as cursor:
        marks = ",".join(["%s"] * len(made))
        cursor.execute(
            f"SELECT COUNT(*) FROM entities WHERE id IN ({marks})", [e.id.bytes for e in made]
        )
        assert cursor.fetchone()[0] == 0
    found: list[int] = []
    counts = statements_per_shard(
        lambda: found.extend(
            e["published"]
            for e in Entity.objects.filter_index(user_id=user).order_by("-published")[:10]
        )
    )
    assert found == list(range(19, 9, -1))
    assert counts == {alias: int(alias == target) for alias in shards.shard_aliases()}, counts
    assert_exact()
