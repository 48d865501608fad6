"""The entity cache (docs/cache.md): ``get`` and ``get_many`` read through it; every write
invalidates it after its commit; a fill that raced a write never brings an old value back; a
failing cache costs reads nothing but speed. Redis (a throwaway ``redis-server``) on the MariaDB
run, Django's ``LocMemCache`` on the SQLite run."""

from __future__ import annotations

import io
import time
import uuid

import pytest
from django.conf import settings
from django.core.cache import caches
from django.core.management import call_command
from django.db import connections, transaction
from django.test import override_settings

from schemaless_store import checks
from schemaless_store.cache import entity_cache
from schemaless_store.cache.backend import EntityCacheSerializer
from schemaless_store.exceptions import ConfigurationError
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from tests.support import STORE, buckets, child
from tests.support.cached import Board, run_with_cleaner

pytestmark = STORE

_REDIS = None


def redis_server():
    """One throwaway redis-server for the module's tests (started on first use)."""
    global _REDIS
    if _REDIS is None:
        from schemaless_store.testing.redis import start_redis

        _REDIS = start_redis()
    return _REDIS


def cache_config(backend: str) -> dict:
    if backend == "mariadb":
        return redis_server().cache_config()
    return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "entities"}


@pytest.fixture
def cached(backend):
    """The entity cache on, empty, its counters at zero."""
    caches_setting = {**settings.CACHES, "entities": cache_config(backend)}
    raw = {**settings.SCHEMALESS, "CACHE": "entities", "MAP_MAX_AGE": 0.05}
    with override_settings(CACHES=caches_setting, SCHEMALESS=raw), buckets.restored_afterwards():
        caches["entities"].clear()
        entity_cache.reset_stats()
        entity_cache.resume()
        yield caches["entities"]
        entity_cache.resume()


def sneak(entity_id: uuid.UUID, **properties) -> None:
    """Change an entity's row behind the store's back (no invalidation): what a read then
    returns shows whether it came from the cache."""
    from schemaless_store.writes.rows import encode_body

    alias = bucket_map.alias_for(entity_id.bytes)
    body = encode_body(properties, entity_id.bytes)
    with connections[alias].cursor() as cursor:
        cursor.execute("UPDATE entities SET body = %s WHERE id = %s", [body, entity_id.bytes])


def test_get_reads_through_the_cache_and_a_save_invalidates_it(cached):
    made = Entity.objects.create(title="one", n=1)
    assert Entity.objects.get(id=made.id)["n"] == 1  # a miss, filled
    assert entity_cache.stats.misses == 1
    sneak(made.id, title="behind", n=99)
    found = Entity.objects.get(id=made.id)  # a hit: the cached row, not the sneaked one
    assert found["n"] == 1 and entity_cache.stats.hits == 1
    assert found.shard == found._state.db and found.added_id == made.added_id
    assert found.row_updated == made.row_updated
    found["n"] = 2
    found.save()
    assert Entity.objects.get(id=made.id)["n"] == 2  # invalidated: read again
    assert entity_cache.stats.invalidated >= 1


def test_get_many_mixes_hits_misses_and_ids_that_do_not_exist(cached):
    made = [Entity.objects.create(n=i) for i in range(5)]
    missing = uuid.uuid4()
    first = Entity.objects.get_many([made[0].id, made[1].id, missing])
    assert set(first) == {made[0].id, made[1].id}
    for entity in made[:2]:
        sneak(entity.id, n=-1)
    entity_cache.reset_stats()
    second = Entity.objects.get_many([e.id for e in made] + [missing])
    assert entity_cache.stats.hits == 3  # two entities and the known absence
    assert [second[e.id]["n"] for e in made] == [0, 1, 2, 3, 4]
    assert missing not in second
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=missing)  # the cached absence
    created = Entity.objects.create(id=missing, n=7)  # invalidates the absence
    assert Entity.objects.get(id=missing)["n"] == 7
    assert Entity.objects.get_many([missing])[missing].added_id == created.added_id


def test_bulk_put_and_delete_invalidate(cached):
    made = [Entity.objects.create(n=i) for i in range(3)]
    Entity.objects.get_many([e.id for e in made])
    Entity.objects.bulk_put([{"id": e.id, "n": 10 + i} for i, e in enumerate(made)])
    assert [Entity.objects.get(id=e.id)["n"] for e in made] == [10, 11, 12]
    Entity.objects.get(id=made[0].id).delete()
    assert made[0].id not in Entity.objects.get_many([e.id for e in made])
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=made[0].id)


def test_a_fill_that_read_before_a_write_never_brings_the_old_value_back(cached):
    """The race of Facebook's memcache paper: a reader misses and reads the database, a writer
    commits and invalidates, then the reader's fill arrives. The fill lands under a token the
    invalidation deleted, so no later read is served the old value."""
    made = Entity.objects.create(n=1)
    key = made.id.bytes
    owner = bucket_map.alias_for(key)
    slow = entity_cache.lookup()
    assert slow is not None
    assert slow.find([key], lambda _key: owner) == {}  # the slow reader's miss
    old = Entity.objects.using(owner).get(row_id=key)  # ... and its database read
    made["n"] = 2
    made.save()  # the write commits and invalidates
    slow.fill([(key, entity_cache.Row(owner, True, old.added_id, old.row_updated, old.row_body))])
    assert Entity.objects.get(id=made.id)["n"] == 2
    assert Entity.objects.get(id=made.id)["n"] == 2  # and once cached, still the new value


def test_a_hit_that_names_another_shard_than_the_owner_is_not_used(cached):
    made = Entity.objects.create(n=1)
    key = made.id.bytes
    owner = bucket_map.alias_for(key)
    elsewhere = buckets.other_alias(owner)
    wrong = entity_cache.lookup()
    wrong.find([key], lambda _key: owner)
    wrong.fill([(key, entity_cache.Row(elsewhere, True, 1, made.row_updated, made.row_body))])
    entity_cache.reset_stats()
    found = Entity.objects.get(id=made.id)
    assert found._state.db == owner and entity_cache.stats.hits == 0


def test_reads_inside_a_transaction_on_the_shard_neither_use_nor_fill_the_cache(cached):
    made = Entity.objects.create(n=1)
    alias = bucket_map.alias_for(made.id.bytes)
    Entity.objects.get(id=made.id)  # cached
    with transaction.atomic(using=alias):
        made["n"] = 2
        made.save()
        entity_cache.reset_stats()
        assert Entity.objects.get(id=made.id)["n"] == 2  # its own write, from the database
        assert entity_cache.stats.hits == entity_cache.stats.misses == 0
    assert Entity.objects.get(id=made.id)["n"] == 2  # invalidated once it committed
    with transaction.atomic(using=alias):
        made["n"] = 3
        made.save()
        transaction.set_rollback(True, using=alias)
    assert Entity.objects.get(id=made.id)["n"] == 2


def test_reads_survive_a_cache_that_fails(backend):
    """A cache server that refuses connections: reads and writes work, from the database."""
    dead = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0",
        "OPTIONS": {"serializer": "schemaless_store.cache.backend.EntityCacheSerializer"},
    }
    raw = {**settings.SCHEMALESS, "CACHE": "entities"}
    with override_settings(CACHES={**settings.CACHES, "entities": dead}, SCHEMALESS=raw):
        entity_cache.reset_stats()
        made = Entity.objects.create(id=uuid.uuid4(), n=1)  # its invalidation fails: suspended
        assert entity_cache.stats.failures == 1 and not entity_cache.enabled()
        entity_cache.resume()
        assert Entity.objects.get(id=made.id)["n"] == 1
        assert Entity.objects.get_many([made.id])[made.id]["n"] == 1
        assert entity_cache.stats.failures == 3
    entity_cache.resume()


def test_a_failed_invalidation_keeps_this_process_off_the_cache(cached, monkeypatch):
    made = Entity.objects.create(n=1)
    Entity.objects.get(id=made.id)  # cached
    backend = caches["entities"]

    def broken(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(type(backend), "delete_many", broken)
    if hasattr(backend, "scripted"):  # an EntityRedisCache sends its DEL there
        monkeypatch.setattr(type(backend.scripted), "delete", broken)
    made["n"] = 2
    made.save()  # committed; its invalidation failed
    monkeypatch.undo()
    assert not entity_cache.enabled()
    assert Entity.objects.get(id=made.id)["n"] == 2  # not the cached 1
    entity_cache.resume()
    assert Entity.objects.get(id=made.id)["n"] == 1  # what the cache still holds, as designed


@pytest.mark.mariadb_only
def test_a_hung_cache_server_delays_reads_by_its_timeout_only(cached):
    made = Entity.objects.create(n=1)
    server = redis_server()
    server.pause()
    try:
        began = time.monotonic()
        assert Entity.objects.get(id=made.id)["n"] == 1
        assert time.monotonic() - began < 5
    finally:
        server.resume()
    entity_cache.resume()


def test_entities_move_with_their_bucket_and_the_cache_follows(cached):
    """Cached on one shard, moved, changed on the new owner, moved back: every read is the
    latest value (a hit must name the reader's owner; every write invalidates the id)."""
    moved = buckets.id_in_bucket(5)
    made = Entity.objects.create(id=moved, n=1)
    home = bucket_map.alias_for(moved.bytes)
    away = buckets.other_alias(home)
    assert Entity.objects.get(id=moved)["n"] == 1  # cached, on home
    out = io.StringIO()
    call_command("movebuckets", "--to", away, "--buckets", "5", stdout=out, stderr=io.StringIO())
    bucket_map.forget()
    found = Entity.objects.get(id=moved)
    assert found._state.db == away and found["n"] == 1
    found["n"] = 2
    found.save()
    call_command("movebuckets", "--to", home, "--buckets", "5", stdout=out, stderr=io.StringIO())
    bucket_map.forget()
    back = Entity.objects.get(id=moved)
    assert back._state.db == home and back["n"] == 2
    assert made.id == back.id


@pytest.mark.mariadb_only
def test_the_backend_reuses_one_redis_client_and_takes_any_key(cached):
    """EntityRedisCache: one redis.Redis per pool across operations and threads (Django's
    RedisCache builds one per operation), the cache's commands unchanged."""
    import threading

    from schemaless_store.cache.backend import EntityRedisCache

    assert isinstance(cached, EntityRedisCache)
    cached.set_many({"sls:test:a": 1, "sls:test:b": b"\x00two"}, 10)
    assert cached.get_many(["sls:test:a", "sls:test:b", "sls:test:c"]) == {
        "sls:test:a": 1,
        "sls:test:b": b"\x00two",
    }
    cached.set("a key with spaces and \u00e9", 7, 10)  # memcached's key check would warn
    assert cached.get("a key with spaces and \u00e9") == 7
    clients = {id(cached._cache.get_client(write=True))}
    threads = [
        threading.Thread(target=lambda: clients.add(id(cached._cache.get_client(write=True))))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(clients) == 1
    cached.delete_many(["sls:test:a", "sls:test:b"])
    assert cached.get("sls:test:a") is None


def test_the_serializer_stores_ints_and_bytes_and_never_unpickles():
    import pickle

    serializer = EntityCacheSerializer()
    assert serializer.dumps(7) == 7 and serializer.loads(b"7") == 7
    assert serializer.dumps(b"E1xyz") == b"E1xyz" and serializer.loads(b"E1xyz") == b"E1xyz"
    payload = pickle.dumps(("a", "tuple"))
    assert serializer.loads(payload) == payload  # bytes as they are
    with pytest.raises(TypeError, match="ints and bytes only"):
        serializer.dumps({"a": 1})


def test_configuration_errors_and_checks():
    with (
        override_settings(SCHEMALESS={**settings.SCHEMALESS, "CACHE": "nope"}),
        pytest.raises(ConfigurationError, match="'nope', which is not in CACHES"),
    ):
        entity_cache.enabled()
    for bad in (0, -1, 1.5, True, None):
        with (
            override_settings(SCHEMALESS={**settings.SCHEMALESS, "CACHE_TIMEOUT": bad}),
            pytest.raises(ConfigurationError, match="CACHE_TIMEOUT"),
        ):
            entity_cache.enabled()
    redis = "django.core.cache.backends.redis.RedisCache"
    layouts = {
        "schemaless.W003": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "schemaless.W004": {"BACKEND": redis, "LOCATION": "redis://127.0.0.1:1/0"},
        "schemaless.E006": {
            "BACKEND": redis,
            "LOCATION": ["redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0"],
            "OPTIONS": {"serializer": "schemaless_store.cache.backend.EntityCacheSerializer"},
        },
    }
    for code, config in layouts.items():
        with override_settings(
            CACHES={**settings.CACHES, "entities": config},
            SCHEMALESS={**settings.SCHEMALESS, "CACHE": "entities"},
        ):
            assert [m.id for m in checks.check_settings()] == [code]
    with override_settings(
        CACHES={**settings.CACHES, "entities": cache_config("mariadb")},
        SCHEMALESS={**settings.SCHEMALESS, "CACHE": "entities"},
    ):
        assert checks.check_settings() == []  # the recommended configuration


@pytest.mark.mariadb_only
@pytest.mark.slow
@pytest.mark.parametrize("invalidating", [True, False], ids=["invalidating", "not-invalidating"])
def test_no_process_reads_a_value_older_than_an_acknowledged_write(cached, invalidating):
    """Writer processes (save and bulk_put) post each write once it returns; reader processes
    read a posted number, then the entity, through the shared Redis cache, while the cleaner
    runs: no read is older than a write acknowledged before it began. With the writers'
    invalidation switched off (``not-invalidating``), the same check catches stale reads."""
    ids = [Entity.objects.create(n=0, tag="t0").id for _ in range(12)]
    board = Board.create(ids)
    env = child.child_env()
    if not invalidating:
        env["SCHEMALESS_TEST_NO_INVALIDATION"] = "1"
    spawn = [
        ("writer", "0", "6", "5"),
        ("writer", "6", "6", "5"),
        ("reader", "5"),
        ("reader", "5"),
    ]
    results = run_with_cleaner(board, spawn, env)
    writers, readers = results[:2], results[2:]
    assert all(w["writes"] > 20 for w in writers), writers
    assert all(r["hits"] > r["reads"] // 4 for r in readers), readers  # the cache served them
    if invalidating:
        assert all(w["own_stale"] == 0 for w in writers), writers
        assert all(r["stale"] == 0 for r in readers), readers
    else:
        assert sum(r["stale"] for r in readers) + sum(w["own_stale"] for w in writers) > 0


def _closed_port() -> int:
    from schemaless_store.testing.mariadb import free_port

    return free_port()  # nothing listens there once the probe socket is closed
