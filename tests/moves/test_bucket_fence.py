"""The shard that holds a bucket is the authority (docs/design.md#the-fence; docs/resharding.md).

Each test hands a bucket from one shard to the other by hand, as a finished move leaves it (the
old owner's row ``gone``, the new owner's ``owned``, a new stored map version), while this
process still routes by its old copy of the map (``MAP_MAX_AGE`` is an hour). Every write must
be refused by the old owner and land on the new one, invisibly to the caller.
"""

from __future__ import annotations

import io
import uuid

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connections, transaction
from django.test import override_settings

from schemaless_store.config.indexes import Index
from schemaless_store.config.metadata import ShardMap
from schemaless_store.exceptions import NotOwner, UniqueViolation
from schemaless_store.models import Cell, Entity
from schemaless_store.tables import buckets as bucket_table
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE, buckets
from tests.support.raw import index_rows

pytestmark = STORE


@pytest.fixture(autouse=True)
def stale_map():
    """This process keeps the map it read first for an hour; bucket tables restored after."""
    with override_settings(SCHEMALESS={**settings.SCHEMALESS, "MAP_MAX_AGE": 3600}):
        bucket_map.current()
        with buckets.restored_afterwards():
            yield


def entity_rows(alias: str, entity_id: uuid.UUID) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM entities WHERE id = %s", [entity_id.bytes])
        return int(cursor.fetchone()[0])


def moved_id() -> tuple[uuid.UUID, str, str]:
    """An id whose bucket is handed from its owner to the other shard: (id, old, new)."""
    entity_id = uuid.uuid4()
    old = bucket_map.alias_for(entity_id.bytes)
    new = buckets.other_alias(old)
    buckets.hand_over([bucket_map.bucket_for(entity_id.bytes)], new)
    assert bucket_map.alias_for(entity_id.bytes) == old  # this process has not noticed
    return entity_id, old, new


def test_a_write_routed_by_a_stale_map_lands_on_the_new_owner():
    entity_id, old, new = moved_id()
    Entity.objects.create(id=entity_id, title="hello", user_id=b"u" * 16)
    assert entity_rows(new, entity_id) == 1
    assert entity_rows(old, entity_id) == 0
    assert bucket_map.alias_for(entity_id.bytes) == new  # the refusal made it read the map again
    assert Entity.objects.get(id=entity_id)["title"] == "hello"
    assert [e.id for e in Entity.objects.filter_index(user_id=b"u" * 16)] == [entity_id]


def test_an_update_and_a_delete_run_on_the_new_owner():
    entity = Entity.objects.create(title="first", user_id=b"a" * 16)
    old = entity.shard
    new = buckets.other_alias(old)
    # The row moves with its bucket (as a move copies it), and this process is not told.
    with connections[old].cursor() as cursor:
        cursor.execute("SELECT updated, body FROM entities WHERE id = %s", [entity.id.bytes])
        updated, body = cursor.fetchone()
    with connections[new].cursor() as cursor:
        cursor.execute(
            "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)",
            [entity.id.bytes, updated, body],
        )
    buckets.hand_over([bucket_map.bucket_for(entity.id.bytes)], new)
    entity["title"] = "second"
    entity.save()
    assert Entity.objects.get(id=entity.id)["title"] == "second"
    entity.delete()
    assert entity_rows(new, entity.id) == 0
    assert entity_rows(old, entity.id) == 1  # the copy a move leaves behind, no longer served
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=entity.id)


def index_bucket(index: Index, value: object) -> tuple[int, str, str]:
    """The bucket of the rows whose ``shard_on`` property is ``value``, as the store routes
    them (from the column value), handed to the shard that does not hold it: (bucket, old,
    new)."""
    key = index.routing_key(index.column_value(index.shard_on, value))
    number, old = bucket_map.bucket_for(key), bucket_map.alias_for(key)
    new = buckets.other_alias(old)
    buckets.hand_over([number], new)
    assert bucket_map.alias_for(key) == old  # this process has not noticed
    return number, old, new


def test_index_rows_whose_bucket_moved_are_written_on_its_new_owner():
    from tests.testapp.indexes import user_id_index

    user = b"m" * 16
    _number, old, new = index_bucket(user_id_index, user)
    entity = Entity.objects.create(user_id=user)
    rows = index_rows("index_user_id")
    assert [(row[-1], row[-2]) for row in rows] == [(new, entity.id.bytes)]
    assert index_rows("index_user_id", old) == []
    assert [e.id for e in Entity.objects.filter_index(user_id=user)] == [entity.id]


def test_index_rows_of_a_bulk_put_whose_bucket_moved_are_written_on_its_new_owner():
    from tests.testapp.indexes import user_id_index

    moved, kept = b"n" * 16, b"k" * 16
    _number, _old, new = index_bucket(user_id_index, moved)
    kept_key = user_id_index.routing_key(user_id_index.column_value("user_id", kept))
    entities = Entity.objects.bulk_put(
        [{"user_id": moved, "n": n} for n in range(5)] + [{"user_id": kept}]
    )
    placed = sorted((row[-1], row[-2]) for row in index_rows("index_user_id"))
    expected = [(new, e.id.bytes) for e in entities[:5]]
    expected.append((bucket_map.alias_for(kept_key), entities[5].id.bytes))
    assert placed == sorted(expected)
    found = {e.id for e in Entity.objects.filter_index(user_id=moved)}
    assert found == {e.id for e in entities[:5]}


def test_a_unique_claim_whose_bucket_moved_is_made_on_its_new_owner():
    from tests.testapp.indexes import username_index

    _number, _old, new = index_bucket(username_index, "moved-name")
    first = Entity.objects.create(username="moved-name")
    assert [row[-1] for row in index_rows("index_users_username")] == [new]
    with pytest.raises(UniqueViolation):
        Entity.objects.create(username="moved-name")
    assert [e.id for e in Entity.objects.filter_index(username="moved-name")] == [first.id]


def test_bulk_put_splits_a_batch_whose_buckets_moved():
    keep = [uuid.uuid4() for _ in range(20)]
    first = keep[0]
    old = bucket_map.alias_for(first.bytes)
    new = buckets.other_alias(old)
    number = bucket_map.bucket_for(first.bytes)
    moved = [buckets.id_in_bucket(number) for _ in range(3)]
    same_shard = [
        i
        for i in keep[1:]
        if bucket_map.alias_for(i.bytes) == old and bucket_map.bucket_for(i.bytes) != number
    ]
    buckets.hand_over([number], new)
    entities = Entity.objects.bulk_put(
        [{"id": i, "n": n} for n, i in enumerate([first, *moved, *same_shard])]
    )
    assert len(entities) == 4 + len(same_shard)
    for entity_id in [first, *moved]:
        assert (entity_rows(new, entity_id), entity_rows(old, entity_id)) == (1, 0)
    for entity_id in same_shard:
        assert (entity_rows(old, entity_id), entity_rows(new, entity_id)) == (1, 0)
    assert len(Entity.objects.all()) == len(entities)


def test_a_cell_whose_row_key_moved_is_put_on_its_new_owner():
    row_key, old, new = moved_id()
    Cell.objects.put(row_key, "profile", {"name": "ann"})
    assert Cell.objects.get_cell(row_key, "profile").body == {"name": "ann"}
    with connections[new].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM cell WHERE row_key = %s", [row_key.bytes])
        assert cursor.fetchone()[0] == 1
    with connections[old].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM cell WHERE row_key = %s", [row_key.bytes])
        assert cursor.fetchone()[0] == 0


def test_inside_the_callers_transaction_the_refusal_reaches_the_caller():
    entity_id, old, new = moved_id()
    with pytest.raises(NotOwner) as info, transaction.atomic(using=old):
        Entity.objects.create(id=entity_id, title="x")
    assert info.value.alias == old
    assert "retry the transaction" in str(info.value)
    assert entity_rows(old, entity_id) == entity_rows(new, entity_id) == 0
    # Outside a transaction the same write goes through.
    Entity.objects.create(id=entity_id, title="x")
    assert entity_rows(new, entity_id) == 1


def test_a_bucket_no_shard_serves_fails_after_the_wait_with_nothing_written():
    entity_id = uuid.uuid4()
    alias = bucket_map.alias_for(entity_id.bytes)
    number = bucket_map.bucket_for(entity_id.bytes)
    bucket_table.set_states(alias, [number], bucket_table.FENCED)  # a flip that never ends
    raw = {**settings.SCHEMALESS, "MAP_MAX_AGE": 3600, "MOVE_WAIT": 0.2}
    with override_settings(SCHEMALESS=raw), pytest.raises(NotOwner) as info:
        Entity.objects.create(id=entity_id, title="x", user_id=b"z" * 16, username="nobody")
    assert f"bucket(s) {number}" in str(info.value)
    assert all(entity_rows(a, entity_id) == 0 for a in shards.shard_aliases())
    assert index_rows("index_user_id") == [] and index_rows("index_users_username") == []


def test_the_stored_map_is_in_force_and_the_setting_only_seeds_it():
    entity_id, _old, new = moved_id()
    bucket_map.forget()
    assert bucket_map.alias_for(entity_id.bytes) == new
    warnings = [m for m in run_checks(databases=["default"]) if m.id == "schemaless.W002"]
    assert len(warnings) == 1 and "stored shard map" in warnings[0].msg


def test_migrate_stores_the_seed_once_and_seeds_each_shards_bucket_table():
    ShardMap.objects.all().delete()
    call_command("migrateall", verbosity=0)
    stored = bucket_map.stored()
    assert stored.version == 1
    assert stored.owners == bucket_map.seed().owners
    call_command("migrateall", verbosity=0)
    assert ShardMap.objects.count() == 1
    for alias in shards.shard_aliases():
        served = {n for n, s in bucket_table.states(alias).items() if s == bucket_table.OWNED}
        assert served == set(stored.buckets_of(alias))


def test_an_alias_may_own_no_buckets():
    first, second = shards.shard_aliases()[:2]
    spec = {first: "0-4095", second: []}
    owners = bucket_map.owners_from(spec)
    assert set(owners) == {first}
    assert bucket_map.BucketMap(0, 4096, owners, 0.0, 1.0).ranges()[second] == []


def test_shardmap_command_shows_the_map_and_what_each_shard_serves():
    entity_id, _old, new = moved_id()
    Entity.objects.create(id=entity_id, title="x")
    out = io.StringIO()
    call_command("shardmap", stdout=out)
    text = out.getvalue()
    number = bucket_map.bucket_for(entity_id.bytes)
    assert "Shard map version 2, 4096 buckets." in text
    assert f"gone here: 1 ({number})" in text
    assert "entities: 1;" in text
    # A shard whose table does not serve what the map gives it is named.
    bucket_table.set_states(new, [number], None)
    out = io.StringIO()
    call_command("shardmap", stdout=out)
    assert f"the map gives it 1 buckets its table does not serve ({number})" in out.getvalue()


def test_a_shard_without_its_bucket_table_says_to_run_migrateall():
    from schemaless_store.exceptions import ConfigurationError

    entity_id = uuid.uuid4()
    alias = bucket_map.alias_for(entity_id.bytes)
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DROP TABLE {bucket_table.TABLE}")
    try:
        with pytest.raises(ConfigurationError, match=r"run manage\.py migrateall"):
            Entity.objects.create(id=entity_id, title="x")
    finally:
        bucket_table.create(alias, bucket_map.seed().buckets_of(alias))
    Entity.objects.create(id=entity_id, title="x")
