"""The near cache as the tests build it, in one place: one real ``redis-server`` for the
session (:func:`redis_server`), and a near cache on it either way the tests need one, the
process's own, through the settings (:func:`near_on`), or one of its own on a key prefix, its
pushes fed by hand (:func:`standalone`); what the tests do to it (:func:`sneak`,
:func:`held`, :func:`token_key`) and a second process reading through one (:class:`Other`)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from schemaless_store.cache import entity_cache, near_cache
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from tests.support import buckets, child

_REDIS = None


def redis_server() -> Any:
    global _REDIS
    if _REDIS is None:
        from schemaless_store.testing.redis import start_redis

        _REDIS = start_redis()
    return _REDIS


@contextlib.contextmanager
def near_on(**near: Any) -> Iterator[Any]:
    """The entity cache on a real Redis with the near cache on (``near``: its settings)."""
    caches_setting = {**settings.CACHES, "entities": redis_server().cache_config()}
    raw = {**settings.SCHEMALESS, "CACHE": "entities", "MAP_MAX_AGE": 0.05, "NEAR_CACHE": near}
    with override_settings(CACHES=caches_setting, SCHEMALESS=raw), buckets.restored_afterwards():
        caches["entities"].clear()
        entity_cache.reset_stats()
        entity_cache.resume()
        try:
            yield running()
        finally:
            near_cache.shut()
            entity_cache.resume()


def running() -> near_cache.NearCache:
    """This process's near cache, its tracking connection live."""
    through = entity_cache.lookup()
    assert through is not None and through.near is not None
    return usable(through.near)


def usable(near: near_cache.NearCache) -> near_cache.NearCache:
    """``near`` once its tracking connection is up."""
    deadline = time.monotonic() + 10
    while not near.usable():
        assert time.monotonic() < deadline, "the tracking connection never came up"
        time.sleep(0.01)
    return near


@contextlib.contextmanager
def standalone(prefix: str, **options: Any) -> Iterator[near_cache.NearCache]:
    """A near cache of its own on :func:`redis_server`, tracking the keys under ``prefix``
    (``options``: :class:`~schemaless_store.cache.near_cache.NearCache`'s), closed after."""
    from redis.connection import Connection

    port = redis_server().port
    near = near_cache.NearCache(
        lambda: Connection(host="127.0.0.1", port=port, protocol=2, socket_timeout=1),
        prefix,
        **options,
    )
    try:
        yield usable(near)
    finally:
        near.close()


def sneak(entity_id: uuid.UUID, **properties: Any) -> None:
    """Change an entity's row behind the store's back: a read that still shows the old value
    was served from a cache."""
    from django.db import connections

    from schemaless_store.writes.rows import encode_body

    alias = bucket_map.alias_for(entity_id.bytes)
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "UPDATE entities SET body = %s WHERE id = %s",
            [encode_body(properties, entity_id.bytes), entity_id.bytes],
        )


def held(entity_id: uuid.UUID) -> None:
    """Read an entity until the near cache holds it: a miss fills Redis, a Redis hit is copied.
    The push for the miss's own new token may refuse the copy, or drop it if it comes after:
    held once every push queued before the copy was applied (a later PING answered). Up to
    10 s: on a loaded machine the pushes that refuse a copy can keep coming for a while (a
    count of 20 reads once ran out in a suite run beside a soak)."""
    h = entity_id.bytes.hex()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        Entity.objects.get(id=entity_id)
        near = near_cache.existing()
        if near is None or not near.holds(h):
            time.sleep(0.005)
            continue
        copied = time.monotonic()
        while near.heard() <= copied:
            time.sleep(0.005)
        if near.holds(h):
            return
    raise AssertionError("the near cache never held it")


def token_key(entity_id: uuid.UUID) -> str:
    return caches["entities"].make_key("sls:g:" + entity_id.bytes.hex())


class Other:
    """The second process: ``ask`` sends it a request and returns its answer."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.near_child"],
            cwd=child.ROOT,
            env=child.child_env(),  # the entity cache and the near cache as this process has them
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, op: str, entity_id: uuid.UUID | None = None, **more: Any) -> dict[str, Any]:
        request = {"op": op, "id": entity_id.hex if entity_id else None, **more}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert "error" not in answer, answer
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
