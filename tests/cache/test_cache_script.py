"""The entity cache's read in one round trip on Redis (docs/cache.md#one-round-trip): a miss
sets its token in the script, its row travels with the thread's next read, and is stored only
while its token is current. A real ``redis-server`` on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from schemaless_store import entity_cache
from schemaless_store.models import Entity
from tests.support import STORE, buckets

pytestmark = STORE

_REDIS = None


@pytest.fixture
def redis_cache() -> Iterator[entity_cache.EntityRedisCache]:
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
