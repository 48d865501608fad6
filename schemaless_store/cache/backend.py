"""The Django cache backend the entity cache runs on: Django's ``RedisCache`` with one client
reused per connection pool (:class:`EntityRedisCache`), a serializer that never builds objects
from what it reads (:class:`EntityCacheSerializer`), and the ``CACHES`` entry that configures
both (:func:`cache_from_url`); docs/cache.md."""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

from .script import Scripted

TAG = b"E1"  # first bytes of a value: never an int's digits, so the serializer keeps it bytes


class EntityCacheSerializer:
    """A serializer for Django's ``RedisCache`` (``OPTIONS["serializer"]``) that never builds
    objects from what it reads: the entity cache stores ints (tokens) and bytes (rows) only, and
    reads them back as they are. Django's default serializer rebuilds any Python object from the
    bytes it reads, so anyone who can write to Redis could make a process run code."""

    def dumps(self, obj: Any) -> Any:
        if type(obj) is int or type(obj) is bytes:
            return obj
        raise TypeError(
            f"the entity cache stores ints and bytes only, not {type(obj).__name__}: give it a "
            "cache alias of its own (SCHEMALESS['CACHE'])"
        )

    def loads(self, data: bytes) -> int | bytes:
        if data[:2] == TAG:  # a row (most of what is read): no int() that raises
            return data
        try:
            return int(data)
        except ValueError:
            return data


class ReusedClientRedisCacheClient(RedisCacheClient):
    """Django's client, keeping one ``redis.Redis`` per connection pool. Django builds a new one
    for every operation, and building one costs more than the round trip it makes (redis-py
    fills a dict of ~170 response callbacks per instance: 175 us of a 260 us cached ``get`` in
    the bench's profile). A ``redis.Redis`` is safe to share between threads: it takes a
    connection from the pool for each command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)  # type: ignore[attr-defined]
        return client

    def tracking_connection(self) -> Any:
        """A new, unconnected RESP2 connection to the primary (the near cache's tracking
        connection: RESP2 so that invalidations come as pub/sub messages)."""
        pool = self._get_connection_pool(True)  # type: ignore[attr-defined]
        return pool.connection_class(**{**pool.connection_kwargs, "protocol": 2})


class EntityRedisCache(RedisCache):
    """Django's ``RedisCache`` for the entity cache (what :func:`cache_from_url` configures):
    the same commands and options, with one ``redis.Redis`` reused per connection pool instead
    of one built per operation, and without the memcached key check (``validate_key`` warns
    about keys memcached refuses; the entity cache's keys are short and plain, and Redis takes
    any key). Nothing else differs: it may serve other uses too."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusedClientRedisCacheClient
        self.scripted = Scripted(self)  # the one-round-trip read (cache/script.py)

    def validate_key(self, key: str) -> None:
        pass


def carries_near_cache(backend: type | None) -> bool:
    """Whether a cache backend class can carry the near cache (an :class:`EntityRedisCache`):
    the one predicate of check ``schemaless.E009`` and of the near cache as it is built."""
    return isinstance(backend, type) and issubclass(backend, EntityRedisCache)


def cache_from_url(url: str, timeout: float = 0.5) -> dict[str, Any]:
    """A ``CACHES`` entry for the entity cache on one Redis server (``redis://host:6379/0``):
    :class:`EntityRedisCache` with :class:`EntityCacheSerializer`, and socket timeouts of
    ``timeout`` seconds, so that a hung server delays a read by that much, not forever."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"the entity cache needs a redis:// URL, not {url!r}")
    return {
        "BACKEND": "schemaless_store.cache.backend.EntityRedisCache",
        "LOCATION": url,
        "OPTIONS": {
            "serializer": "schemaless_store.cache.backend.EntityCacheSerializer",
            "socket_connect_timeout": timeout,
            "socket_timeout": timeout,
        },
    }
