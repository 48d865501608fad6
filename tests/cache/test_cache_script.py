"""The entity cache's read in one round trip on Redis (docs/cache.md#one-round-trip): a miss
sets its token in the script, its row travels with the thread's next read, and is stored only
while its token is current. A real ``redis-server`` on both backends."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from schemaless_store.cache import entity_cache
from schemaless_store.cache.backend import EntityRedisCache
from schemaless_store.models import Entity
from tests.support import STORE, buckets

pytestmark = STORE

_REDIS = None


@pytest.fixture
def redis_cache() -> Iterator[EntityRedisCache]:
    global _REDIS
    if _REDIS is None:
        from schemaless_store.testing.redis import start_redis

        _REDIS = start_redis()
    caches_setting = {**settings.CACHES, "entities": _REDIS.cache_config()}
    raw = {**settings.SCHEMALESS, "CACHE": "entities"}
    with override_settings(CACHES=caches_setting, SCHEMALESS=raw), buckets.restored_afterwards():
        backend = caches["entities"]
        backend.clear()
        backend.scripted.pending.clear()
        entity_cache.reset_stats()
        entity_cache.resume()
        yield backend
        entity_cache.resume()


def test_a_miss_row_travels_with_the_next_read(redis_cache):
    one, two = Entity.objects.create(n=1), Entity.objects.create(n=2)
    h = one.id.bytes.hex()
    assert Entity.objects.get(id=one.id)["n"] == 1  # a miss: its token set, its row pending
    assert redis_cache.get("sls:g:" + h) is not None
    assert redis_cache.get("sls:v:" + h) is None
    assert len(redis_cache.scripted.pending) == 1
    Entity.objects.get(id=two.id)  # another id's read carries the fill
    assert redis_cache.get("sls:v:" + h) is not None
    entity_cache.reset_stats()
    assert Entity.objects.get(id=one.id)["n"] == 1
    assert entity_cache.stats.hits == 1 and entity_cache.stats.misses == 0


def test_a_pending_fill_whose_token_a_write_deleted_is_not_stored(redis_cache):
    one, two = Entity.objects.create(n=1), Entity.objects.create(n=2)
    h = one.id.bytes.hex()
    Entity.objects.get(id=one.id)  # a miss: pending under its token
    redis_cache.delete("sls:g:" + h)  # a write's invalidation, from another process
    Entity.objects.get(id=two.id)
    assert redis_cache.get("sls:v:" + h) is None  # dropped in the script, not stored
    pending = redis_cache.scripted.pending  # only two's own fill waits now
    assert [fill[0] for fill in pending] == ["sls:g:" + two.id.bytes.hex()]


def _raw_client(backend: EntityRedisCache):
    return backend._cache.get_client(write=True)


def test_the_script_is_loaded_again_after_a_script_flush(redis_cache):
    one = Entity.objects.create(n=1)
    assert Entity.objects.get(id=one.id)["n"] == 1  # EVALSHA: the script is known
    _raw_client(redis_cache).script_flush()  # a restarted Redis, an operator's SCRIPT FLUSH
    entity_cache.reset_stats()
    assert Entity.objects.get(id=one.id)["n"] == 1  # NOSCRIPT, then EVAL: a hit, not a failure
    assert entity_cache.stats.hits == 1 and entity_cache.stats.failures == 0
    assert Entity.objects.get(id=one.id)["n"] == 1 and entity_cache.stats.hits == 2


def test_a_killed_script_connection_is_made_again_and_the_read_still_uses_the_cache(redis_cache):
    one = Entity.objects.create(n=1)
    Entity.objects.get(id=one.id)  # a miss: the connection made, the row pending
    conn = redis_cache.scripted._local.conn
    conn.send_command("CLIENT", "ID")
    _raw_client(redis_cache).client_kill_filter(_id=conn.read_response())  # a restarted Redis
    entity_cache.reset_stats()
    # Found closed, made again, sent again: no failure, and the pending row went with it (it
    # is stored before the ids are looked up: a hit).
    assert Entity.objects.get(id=one.id)["n"] == 1
    assert entity_cache.stats.failures == 0 and entity_cache.stats.hits == 1


def test_a_writes_invalidation_goes_on_the_script_connection_even_once_killed(
    redis_cache, monkeypatch
):
    """A write's DEL is sent on this thread's own connection (the script's), packed directly,
    not through redis.Redis's command path; a killed connection is made again and the DEL
    still lands (docs/performance.md#the-near-cache-under-writes-issue-45-item-6)."""
    from redis import Redis

    one = Entity.objects.create(n=1)
    h = one.id.bytes.hex()
    Entity.objects.get(id=one.id)  # a miss: the connection made, the token set
    through_redis_py: list[object] = []
    original = Redis.execute_command

    def spy(self: Redis, *args: object, **options: object) -> object:
        through_redis_py.append(args[0])
        return original(self, *args, **options)

    for kill in (False, True):
        Entity.objects.get(id=one.id)  # the token set again (the write before deleted it)
        assert redis_cache.get("sls:g:" + h) is not None
        if kill:
            conn = redis_cache.scripted._local.conn
            conn.send_command("CLIENT", "ID")
            _raw_client(redis_cache).client_kill_filter(_id=conn.read_response())
        entity_cache.reset_stats()
        monkeypatch.setattr(Redis, "execute_command", spy)
        one["n"] += 1
        one.save()
        monkeypatch.undo()
        assert through_redis_py == []
        assert entity_cache.stats.invalidated == 1 and entity_cache.stats.failures == 0
        assert redis_cache.get("sls:g:" + h) is None  # deleted: the old row is never served
        assert entity_cache.enabled()
        assert Entity.objects.get(id=one.id)["n"] == one["n"]


def test_a_script_connection_that_times_out_fails_that_read_only(redis_cache, monkeypatch):
    from redis.exceptions import TimeoutError as RedisTimeoutError

    one = Entity.objects.create(n=1)
    Entity.objects.get(id=one.id)
    conn = redis_cache.scripted._local.conn
    sent: list[int] = []

    def hung(*args: object, **kwargs: object) -> None:
        sent.append(1)
        raise RedisTimeoutError("Timeout reading from socket")

    monkeypatch.setattr(conn, "read_response", hung)
    entity_cache.reset_stats()
    assert Entity.objects.get(id=one.id)["n"] == 1  # from the shard
    assert entity_cache.stats.failures == 1 and sent == [1]  # sent once: a timeout is no retry
    monkeypatch.undo()
    assert Entity.objects.get(id=one.id)["n"] == 1
    assert entity_cache.stats.failures == 1


def test_a_forked_child_sends_the_script_on_a_connection_of_its_own(redis_cache):
    made = Entity.objects.create(n=1)
    Entity.objects.get(id=made.id)
    parent_conn = redis_cache.scripted._local.conn
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no database, only the script on the parent's cache instance
        code = 1
        try:
            os.close(read)
            answer = redis_cache.scripted.ask([("sls:g:fork", "sls:v:fork")], [7], 300)
            state = {
                "own": redis_cache.scripted._local.conn is not parent_conn,
                "answer": [answer[0][0], answer[0][2]],
            }
            os.write(write, json.dumps(state).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        state = json.loads(answer.read() or "{}")
    _, status = os.waitpid(pid, 0)
    assert status == 0 and state == {"own": True, "answer": [7, True]}
    assert redis_cache.scripted._local.conn is parent_conn  # the parent's, still working
    entity_cache.reset_stats()
    assert Entity.objects.get(id=made.id)["n"] == 1
    assert entity_cache.stats.failures == 0


def _reversed_key(key: str, key_prefix: str, version: int) -> str:
    return f"{key[::-1]}|{key_prefix}|{version}"


def test_the_script_names_keys_as_the_cache_does():
    from schemaless_store.cache.backend import EntityRedisCache

    for params in (
        {},
        {"KEY_PREFIX": "site7", "VERSION": 3},
        {"KEY_PREFIX": "p", "KEY_FUNCTION": f"{__name__}._reversed_key"},
    ):
        backend = EntityRedisCache("redis://127.0.0.1:1/0", params)
        for name in ("sls:g:0a1b", "sls:v:0a1b"):
            assert backend.scripted._key(name) == backend.make_key(name)
