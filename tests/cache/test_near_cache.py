"""The near cache (docs/cache.md#the-near-cache): the entity cache's hits from process memory,
invalidated by Redis's client-side tracking. A real ``redis-server`` on both backends, and a
second real process (tests/support/near_child.py) where the guarantee is about other processes:
its next read after the push sees a write; a tracking connection killed mid-run flushes it;
the writer reads its own write before the push comes; memory is bounded (LRU)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from schemaless_store import checks
from schemaless_store.cache import entity_cache, near_cache
from schemaless_store.exceptions import ConfigurationError
from schemaless_store.models import Entity
from tests.cache import test_entity_cache as PLAIN
from tests.support import STORE
from tests.support.cached import Board, run_with_cleaner
from tests.support.near import Other, held, near_on, redis_server, running, sneak, token_key

pytestmark = STORE


@pytest.fixture
def near() -> Iterator[near_cache.NearCache]:
    with near_on(DROP_TIMEOUT=2.0) as running_near:
        yield running_near


@pytest.fixture
def other(near) -> Iterator[Other]:
    process = Other()
    try:
        yield process
    finally:
        process.close()


def test_a_hit_is_served_from_process_memory_and_a_write_here_is_read_at_once(near):
    made = Entity.objects.create(n=1)
    held(made.id)
    sneak(made.id, n=99)
    entity_cache.reset_stats()
    assert Entity.objects.get(id=made.id)["n"] == 1  # the copy, not the sneaked row
    assert entity_cache.stats.near_hits == entity_cache.stats.hits == 1
    made["n"] = 2
    made.save()
    assert Entity.objects.get(id=made.id)["n"] == 2
    many = [Entity.objects.create(n=i) for i in range(4)]
    for entity in many:
        held(entity.id)
    # made's copy went with its write; the read above copied it again unless the pushes of
    # the write's DEL and of the read's own token came first (two: refused) or later (the
    # second drops it): once every push so far is applied, what is held is what is served.
    applied = time.monotonic()
    while near.heard() <= applied:
        time.sleep(0.005)
    copied_again = near.holds(made.id.bytes.hex())
    entity_cache.reset_stats()
    found = Entity.objects.get_many([e.id for e in many] + [made.id])
    assert entity_cache.stats.hits == 5 and entity_cache.stats.misses == 0
    assert entity_cache.stats.near_hits == 4 + copied_again
    assert [found[e.id]["n"] for e in many] == [0, 1, 2, 3]


def test_the_writer_reads_its_own_write_before_redis_pushes_the_invalidation(near):
    """The push for the writer's own DEL comes on another connection, perhaps after the DEL's
    answer: held back here, and the writer still reads its write (it evicted its copy)."""
    made = Entity.objects.create(n=1)
    held(made.id)
    gate = threading.Event()
    arrived = threading.Event()
    pushed = near._pushed

    def late(names: Any) -> None:
        arrived.set()
        gate.wait(10)
        pushed(names)

    near._pushed = late  # type: ignore[method-assign]
    try:
        made["n"] = 2
        made.save()
        assert Entity.objects.get(id=made.id)["n"] == 2
        assert Entity.objects.get_many([made.id])[made.id]["n"] == 2
        assert arrived.wait(5)  # the push came, and is being held
    finally:
        gate.set()
        near._pushed = pushed  # type: ignore[method-assign]


def test_a_copy_of_an_answer_read_before_an_invalidation_is_refused(near):
    """A reader took its mark, Redis answered with the old value, an invalidation of the id
    came (a push or this process's write), then the reader copies: refused."""
    h = uuid.uuid4().bytes.hex()
    mark, found = near.get_many([h])
    assert mark is not None and found == {}
    near.evict([h])
    near.put(mark, {h: (7, "old")})
    assert not near.holds(h)
    mark, _ = near.get_many([h])
    assert mark is not None
    near.put(mark, {h: (7, "new")})
    assert near.get_many([h])[1] == {h: (7, "new")}


def test_a_miss_is_served_from_memory_from_its_third_read_until_another_write(near):
    """docs/cache.md#no-copy-from-a-first-read: a first read's row (a miss) is not copied; the
    second read's Redis hit is, and the third is served from memory until the push of another
    process's DEL drops it."""
    made = Entity.objects.create(n=1)
    h = made.id.bytes.hex()
    assert Entity.objects.get(id=made.id)["n"] == 1  # a miss: the shard
    applied = time.monotonic()
    while near.heard() <= applied:  # its own token's push, whenever it came, applied
        time.sleep(0.005)
    assert not near.holds(h)
    entity_cache.reset_stats()
    assert Entity.objects.get(id=made.id)["n"] == 1  # the second read: a Redis hit, copied
    assert (entity_cache.stats.hits, entity_cache.stats.near_hits) == (1, 0)
    assert near.holds(h)
    sneak(made.id, n=2)
    assert Entity.objects.get(id=made.id)["n"] == 1  # the third read: from memory
    assert entity_cache.stats.near_hits == 1
    caches["entities"].delete("sls:g:" + h)  # another process's write's DEL (no local evict)
    deleted = time.monotonic()
    while near.heard() <= deleted:
        time.sleep(0.005)
    assert not near.holds(h)
    assert Entity.objects.get(id=made.id)["n"] == 2


def test_switching_the_near_cache_off_closes_it_and_its_thread(near):
    """Issue 36: ``setting_changed`` with ``NEAR_CACHE`` (or ``CACHE``) off closes this
    process's near cache; switched on again, a read builds a new one."""
    thread = near._thread
    assert thread.is_alive() and near_cache.existing() is near
    for off in ({"NEAR_CACHE": None}, {"CACHE": None, "NEAR_CACHE": None}):
        with override_settings(SCHEMALESS={**settings.SCHEMALESS, **off}):
            assert near_cache.existing() is None
            assert not thread.is_alive() and not near.usable()
        again = running()  # the override left: on again, a new one
        assert again is not near and again._thread.is_alive()
        near, thread = again, again._thread


def test_another_process_reads_the_write_once_the_push_arrives(near, other):
    made = Entity.objects.create(n=0)
    first = other.ask("read_near", made.id)
    assert first["n"] == 0 and first["near_hits"] >= 1
    sneak(made.id, n=99)
    assert other.ask("read", made.id)["n"] == 0  # its copy: no push, no change
    made["n"] = 1
    made.save()  # its DEL's push goes to the other process
    after = other.ask("wait_gone", made.id)
    assert after["n"] == 1, after
    assert after["pushed"] > first["pushed"]
    assert after["waited"] < 2, after  # the push's delivery, not a timeout
    again = other.ask("read_near", made.id)
    assert again["n"] == 1  # copied again


def test_a_tracking_connection_killed_mid_run_flushes_the_near_cache(near, other):
    """The other process's tracking connection is killed in the same MULTI as a token's DEL,
    so that push is lost: the dropped connection flushes every copy, and once a new one is up
    the other process reads the write."""
    import redis

    made = Entity.objects.create(n=0)
    before = other.ask("read_near", made.id)
    assert before["n"] == 0 and before["near_hits"] >= 1 and before["client_id"]
    sneak(made.id, n=5)  # the write, with the invalidation below
    client = redis.Redis.from_url(redis_server().url)
    try:
        pipe = client.pipeline(transaction=True)
        pipe.execute_command("CLIENT", "KILL", "ID", before["client_id"])
        pipe.delete(token_key(made.id))
        assert pipe.execute() == [1, 1]
    finally:
        client.close()
    after = other.ask("wait_reconnect", made.id, after=before["connections"])
    assert after["flushes"] > before["flushes"], after
    assert after["client_id"] != before["client_id"]
    assert after["n"] == 5, after


def test_a_silent_tracking_connection_stops_copies_after_the_drop_timeout():
    """Redis stopped (SIGSTOP): nothing comes on the tracking connection. Within DROP_TIMEOUT
    copies stop being served; reads go to Redis (hung: its socket timeout) and the shard."""
    with near_on(DROP_TIMEOUT=0.3) as near:
        made = Entity.objects.create(n=1)
        held(made.id)
        server = redis_server()
        server.pause()
        try:
            time.sleep(0.5)
            assert not near.usable()
            entity_cache.reset_stats()
            assert Entity.objects.get(id=made.id)["n"] == 1
            assert entity_cache.stats.near_hits == 0
        finally:
            server.resume()
        deadline = time.monotonic() + 10
        while not near.usable():  # it reconnects; the copies made before were flushed
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not near.holds(made.id.bytes.hex()) and near.stats.flushes >= 1


def test_copies_stop_after_the_drop_timeout_while_the_tracking_thread_hears_nothing():
    """The tracking thread stalled (it reads nothing: a starved thread, a lost network), the
    connection still open: copies stop being served once the last answered PING is older
    than DROP_TIMEOUT, whatever the thread does."""
    from redis.connection import Connection

    port = redis_server().port
    stalled, release = threading.Event(), threading.Event()

    class Stalling:
        def __init__(self) -> None:
            self.conn = Connection(host="127.0.0.1", port=port, protocol=2, socket_timeout=1)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

        def can_read(self, timeout: float = 0) -> bool:
            if stalled.is_set():
                release.wait(10)
            return self.conn.can_read(timeout)

    near = near_cache.NearCache(
        Stalling, "stall:", max_entries=10, drop_timeout=0.3, entry_timeout=60
    )
    try:
        deadline = time.monotonic() + 10
        while not near.usable():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        mark, _ = near.get_many(["ab"])
        assert mark is not None
        near.put(mark, {"ab": (1, "x")})
        assert near.get_many(["ab"])[1] == {"ab": (1, "x")}
        stalled.set()
        time.sleep(0.6)
        assert not near.usable()
        assert near.get_many(["ab"]) == (None, {})
    finally:
        release.set()
        stalled.clear()
        near.close()


def test_memory_is_bounded_least_recently_used_first():
    with near_on(MAX_ENTRIES=3, DROP_TIMEOUT=1.0) as near:
        made = [Entity.objects.create(n=i) for i in range(5)]
        for entity in made:
            held(entity.id)
        assert len(near) == 3
        assert [near.holds(e.id.bytes.hex()) for e in made] == [False, False, True, True, True]
        Entity.objects.get(id=made[2].id)  # now the most recently used
        held(made[0].id)  # in; out goes made[3], the least recently used
        assert len(near) == 3
        assert [near.holds(e.id.bytes.hex()) for e in made] == [True, False, True, False, True]
        entity_cache.reset_stats()
        Entity.objects.get_many([e.id for e in made])
        assert entity_cache.stats.near_hits == 3


def test_a_forked_child_uses_its_own_tracking_connection(near):
    made = Entity.objects.create(n=1)
    held(made.id)
    parent_id = near.client_id
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no database here, the parent's connections are the parent's
        code = 1
        try:
            os.close(read)
            assert near_cache.existing() is None
            mine = running()
            state = {
                "fresh": mine is not near and len(mine) == 0,
                "own_connection": mine.client_id not in (None, parent_id),
            }
            os.write(write, json.dumps(state).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        state = json.loads(answer.read() or "{}")
    _, status = os.waitpid(pid, 0)
    assert status == 0 and state == {"fresh": True, "own_connection": True}
    assert near.usable() and near.client_id == parent_id  # the parent's is untouched
    made["n"] = 2
    made.save()
    assert Entity.objects.get(id=made.id)["n"] == 2


def test_near_cache_settings_and_checks():
    on = {**settings.SCHEMALESS, "CACHE": "entities"}
    redis_cache = {**settings.CACHES, "entities": redis_server().cache_config()}
    bad = [
        ({"NEAR_CACHE": {"MAX_ENTRIES": 0}}, "MAX_ENTRIES"),
        ({"NEAR_CACHE": {"MAX_ENTRIES": True}}, "MAX_ENTRIES"),
        ({"NEAR_CACHE": {"DROP_TIMEOUT": 0}}, "DROP_TIMEOUT"),
        ({"NEAR_CACHE": {"TTL": 3}}, "unknown SCHEMALESS\\['NEAR_CACHE'\\] keys"),
        ({"NEAR_CACHE": 100}, "must be None or a dict"),
        ({"NEAR_CACHE": {}, "CACHE": None}, "needs one"),
    ]
    for change, message in bad:
        with (
            override_settings(CACHES=redis_cache, SCHEMALESS={**on, **change}),
            pytest.raises(ConfigurationError, match=message),
        ):
            entity_cache.enabled()
    with override_settings(CACHES=redis_cache, SCHEMALESS={**on, "NEAR_CACHE": {}}):
        assert checks.check_settings() == []  # the defaults, on cache_from_url's backend
    plain = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": redis_server().url,
        "OPTIONS": {"serializer": "schemaless_store.cache.backend.EntityCacheSerializer"},
    }
    locmem = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    for config, codes in (
        (plain, ["schemaless.E009"]),
        (locmem, ["schemaless.E009", "schemaless.W003"]),
    ):
        with override_settings(
            CACHES={**settings.CACHES, "entities": config},
            SCHEMALESS={**on, "NEAR_CACHE": {}},
        ):
            assert [m.id for m in checks.check_settings()] == codes
            with pytest.raises(ConfigurationError, match="EntityRedisCache"):
                entity_cache.lookup()


@pytest.mark.mariadb_only
@pytest.mark.slow
def test_writers_read_their_writes_among_other_processes_with_the_near_cache():
    """tests/support/cached.py's writer and reader processes (and the cleaner) with the near
    cache on: no writer ever reads its own acknowledged write older (the readers may, until the push
    comes: docs/cache.md#who-sees-what-for-how-long), and the readers were served from memory."""
    with near_on(DROP_TIMEOUT=5.0):
        ids = [Entity.objects.create(n=0, tag="t0").id for _ in range(12)]
        board = Board.create(ids)
        spawn = [("writer", "0", "6", "5"), ("writer", "6", "6", "5"), ("reader", "5")]
        results = run_with_cleaner(board, spawn)
    writers, (reader,) = results[:2], results[2:]
    assert all(w["writes"] > 20 and w["own_stale"] == 0 for w in writers), writers
    assert reader["near_hits"] > 0, reader


@pytest.mark.parametrize(
    "case",
    [
        PLAIN.test_get_reads_through_the_cache_and_a_save_invalidates_it,
        PLAIN.test_get_many_mixes_hits_misses_and_ids_that_do_not_exist,
        PLAIN.test_bulk_put_and_delete_invalidate,
        PLAIN.test_a_fill_that_read_before_a_write_never_brings_the_old_value_back,
        PLAIN.test_a_hit_that_names_another_shard_than_the_owner_is_not_used,
        PLAIN.test_reads_inside_a_transaction_on_the_shard_neither_use_nor_fill_the_cache,
        PLAIN.test_entities_move_with_their_bucket_and_the_cache_follows,
    ],
    ids=lambda case: case.__name__.removeprefix("test_"),
)
def test_the_entity_cache_guarantees_hold_with_the_near_cache_on(case):
    """Every read guarantee of the entity cache, run again with the near cache in front (each
    entity read three times first would change nothing: the cases read what they wrote)."""
    with near_on(DROP_TIMEOUT=2.0):
        case(caches["entities"])
        assert near_cache.existing() is not None


def test_a_failed_invalidation_still_evicts_this_process_copies(monkeypatch):
    with near_on(DROP_TIMEOUT=2.0) as near:
        made = Entity.objects.create(n=1)
        held(made.id)
        backend = caches["entities"]

        def broken(*args: Any, **kwargs: Any) -> None:
            raise ConnectionError("cache down")

        monkeypatch.setattr(type(backend.scripted), "delete", broken)  # where its DEL goes
        made["n"] = 2
        made.save()  # committed; its DEL failed: this process stops using the caches
        monkeypatch.undo()
        assert not near.holds(made.id.bytes.hex())
        assert not entity_cache.enabled()
        assert Entity.objects.get(id=made.id)["n"] == 2
