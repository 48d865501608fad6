from __future__ import annotations

import threading
import uuid

import pytest
from django.db import transaction

from schemaless_store.exceptions import UniqueViolation
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import index_values
from tests.support import STORE
from tests.support.buckets import ids_on
from tests.support.raw import count_everything, index_rows, insert_index_row

pytestmark = STORE


def test_second_entity_with_a_taken_value_is_refused_and_nothing_is_written():
    first = Entity.objects.create(username="bret", user_id=b"1" * 16)
    before = count_everything()
    with pytest.raises(UniqueViolation) as info:
        Entity.objects.create(username="bret", user_id=b"2" * 16, link="https://x")
    message = str(info.value)
    assert "index_users_username" in message and "'bret'" in message
    assert first.id.hex in message
    assert count_everything() == before
    assert [e.id for e in Entity.objects.filter_index(username="bret")] == [first.id]


def test_resaving_the_holder_keeps_its_claim():
    e = Entity.objects.create(username="paul")
    e["title"] = "hi"
    e.save()
    assert len(index_rows("index_users_username")) == 1


def test_a_changed_value_is_released_for_others():
    e = Entity.objects.create(username="old-name")
    e["username"] = "new-name"
    e.save()
    other = Entity.objects.create(username="old-name")
    assert [x.id for x in Entity.objects.filter_index(username="old-name")] == [other.id]
    with pytest.raises(UniqueViolation):
        Entity.objects.create(username="new-name")


def test_a_deleted_holder_releases_the_value():
    e = Entity.objects.create(username="gone")
    e.delete()
    new = Entity.objects.create(username="gone")
    assert [x.id for x in Entity.objects.filter_index(username="gone")] == [new.id]
    assert Entity.objects.get_many([e.id]) == {}
    value = index_values.encode_key("gone")
    assert [(r[0], r[1]) for r in index_rows("index_users_username")] == [(value, new.id.bytes)]


def test_a_stale_claim_left_by_a_crash_does_not_block():
    value = index_values.encode_key("ghost")
    ghost = uuid.uuid4().bytes  # a claim whose entity never committed
    insert_index_row(
        "index_users_username", bucket_map.alias_for(index_values.encode_key(value)), (value, ghost)
    )
    e = Entity.objects.create(username="ghost")
    assert [(r[0], r[1]) for r in index_rows("index_users_username")] == [(value, e.id.bytes)]


def test_bulk_put_checks_uniqueness_and_a_failed_batch_writes_nothing():
    Entity.objects.create(username="taken")
    before = count_everything()
    free_id, taken_id = ids_on("shard_0", 2)  # one shard: one batch, one transaction
    with pytest.raises(UniqueViolation):
        Entity.objects.bulk_put(
            [{"id": free_id, "username": "free"}, {"id": taken_id, "username": "taken"}]
        )
    assert count_everything() == before
    assert Entity.objects.get_many([free_id, taken_id]) == {}


def test_racing_writers_exactly_one_wins():
    for round_ in range(5):
        value = f"race-{round_}"
        results: list[str] = []
        barrier = threading.Barrier(4)

        def claim(value=value, results=results, barrier=barrier):
            from django.db import connections

            try:
                barrier.wait()
                Entity.objects.create(username=value)
                results.append("won")
            except UniqueViolation:
                results.append("lost")
            finally:
                shards.close_index_connections()
                connections.close_all()

        threads = [threading.Thread(target=claim) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["lost", "lost", "lost", "won"], results
        assert len(list(Entity.objects.filter_index(username=value))) == 1


def test_a_value_released_in_an_open_transaction_stays_taken_until_it_commits():
    """A holder is judged by what is committed, not by its own transaction's pending change: the
    release may still roll back, and its claim row must then be there."""
    (first_id,) = ids_on("shard_0", 1)
    first = Entity.objects.create(id=first_id, username="kept")
    with pytest.raises(RuntimeError), transaction.atomic(using="shard_0"):
        first["username"] = "renamed"
        first.save()
        with pytest.raises(UniqueViolation) as info:
            Entity.objects.create(username="kept")
        assert first.id.hex in str(info.value)
        raise RuntimeError("roll the rename back")
    assert Entity.objects.get(id=first_id)["username"] == "kept"
    assert [e.id for e in Entity.objects.filter_index(username="kept")] == [first_id]
    with pytest.raises(UniqueViolation):
        Entity.objects.create(username="kept")


def test_a_batch_that_fails_after_moving_a_value_leaves_the_holder_its_claim():
    """One batch, one transaction: the first entity gives its value up, the second asks for
    it, the third is refused. The batch rolls back; the first keeps its value and its row."""
    Entity.objects.create(username="elsewhere")
    first_id, second_id, third_id = ids_on("shard_0", 3)
    Entity.objects.create(id=first_id, username="moving")
    before = count_everything()
    with pytest.raises(UniqueViolation):
        Entity.objects.bulk_put(
            [
                {"id": first_id, "username": "moved"},
                {"id": second_id, "username": "moving"},
                {"id": third_id, "username": "elsewhere"},
            ]
        )
    assert count_everything() == before
    assert Entity.objects.get(id=first_id)["username"] == "moving"
    assert [e.id for e in Entity.objects.filter_index(username="moving")] == [first_id]
    with pytest.raises(UniqueViolation):
        Entity.objects.create(username="moving")
