"""The entity cache's read on Redis in one round trip: a Lua script (docs/cache.md#one-round-trip).

Without it a miss costs three Redis round trips around the shard read: ``MGET`` of the id's
token and value, a pipeline setting the new token, a pipeline storing the row. The script does
the first two at once, atomically, for every id asked, and carries this thread's **pending
fills** (rows read from the shards after earlier misses) along:

1. each pending fill is stored (``SET ... PX``) only if its token is still the id's current one
   (a fill whose token a write deleted is dropped there, not stored to be ignored);
2. for each id asked: its token; if it has none, a new random token is set (``PX`` the cache
   timeout) before anything else can read it; its value, when it had a token.

So a miss is one round trip before the shard read, and its fill travels with this thread's next
read. Storing a row late is as safe as storing it at once: it counts only under its token, which
existed before the shard was read (the generation argument of :mod:`.entity_cache`); the script
checks the token first so that a late fill never overwrites a newer row. A thread that never
reads again leaves its fills unstored (at most :data:`MAX_PENDING`; a fuller queue is sent at
once): a later reader misses, as after an eviction.

The script is sent on a connection of this thread's own (:meth:`Scripted._connection`), made
with the options of the entity cache's pool (address, timeouts, password, TLS), not through
``redis.Redis``: its command path (taking a connection from the pool and checking it has no
data pending, retries, redis-py 8's observability hooks) cost as much as the round trip itself
(docs/performance.md#a-near-cache-miss-issue-35). A connection found closed is made again and the
script sent once more; any other error closes it and the read goes to the shard.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

from django.core.cache.backends.base import default_key_func

try:  # the `cache` extra (redis-py): the entity cache needs it, the rest of the store does not
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import NoScriptError
except ImportError:  # no Redis cache can be configured, so nothing raises these

    class RedisConnectionError(Exception):  # type: ignore[no-redef]
        """Stands for redis-py's, which is not installed."""

    class NoScriptError(Exception):  # type: ignore[no-redef]
        """Stands for redis-py's, which is not installed."""


try:  # redis-py's own packer with hiredis, without its per-argument checks
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis comes with the `cache` extra (redis[hiredis])
    _hiredis_pack = None  # type: ignore[assignment]

MAX_PENDING = 256

LUA = """
local nf = tonumber(ARGV[1])
local ttl = ARGV[2]
for i = 1, nf do
  if redis.call('GET', KEYS[2 * i - 1]) == ARGV[2 + 2 * i - 1] then
    redis.call('SET', KEYS[2 * i], ARGV[2 + 2 * i], 'PX', ttl)
  end
end
local out = {}
local at = 2 * nf
local n = (#KEYS - at) / 2
for i = 1, n do
  local gen = KEYS[at + 2 * i - 1]
  local token = redis.call('GET', gen)
  if token then
    out[2 * i - 1] = token
    out[2 * i] = redis.call('GET', KEYS[at + 2 * i]) or ''
  else
    token = ARGV[2 + at + i]
    redis.call('SET', gen, token, 'PX', ttl)
    out[2 * i - 1] = token
    out[2 * i] = ''
  end
end
return out
"""

# A pending fill: the token key's and value key's full names, the token, the value's bytes.
Fill = tuple[str, str, int, bytes]


SHA = hashlib.sha1(LUA.encode()).hexdigest()


class Scripted:
    """The script bound to one ``EntityRedisCache`` instance (Django makes one per thread, so
    its pending fills are this thread's), sent on a connection of this thread's own."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.pending: list[Fill] = []
        self._local = threading.local()
        # Django's default KEY_FUNCTION puts a fixed prefix before the name: add it directly.
        self._prefix = (
            f"{cache.key_prefix}:{cache.version}:" if cache.key_func is default_key_func else None
        )

    def _key(self, name: str) -> str:
        prefix = self._prefix
        return prefix + name if prefix is not None else self.cache.make_key(name)

    def ask(
        self, names: list[tuple[str, str]], new_tokens: list[int], timeout: float
    ) -> list[tuple[int, bytes | None, bool]]:
        """For each ``(token key, value key)`` (short names, as the entity cache spells them):
        ``(token, value or None, created)``; ``created``: the token is ``new_tokens``' one, set
        now. Pending fills are stored first, in the same round trip."""
        key = self._key
        keys = [key(name) for pair in names for name in pair]
        return self._call(keys, [str(t) for t in new_tokens], timeout, new_tokens)

    def fill(self, fills: list[Fill], timeout: float) -> None:
        """Queue these rows to go with the next :meth:`ask`, or send them now if too many
        wait."""
        self.pending.extend(fills)
        if len(self.pending) > MAX_PENDING:
            self._call([], [], timeout, [])

    def delete(self, names: list[str]) -> None:
        """``DEL`` of these keys (short names): a write's invalidation, on this thread's own
        connection and answered before it returns, without redis-py's command path (taking a
        pooled connection and polling it, its retry wrapper and hooks: as much Python as the
        round trip; docs/performance.md#the-near-cache-under-writes-issue-45-item-6). A
        connection found closed is made again and the ``DEL`` sent once more (deleting a token
        twice only invalidates twice); any other error closes it and is raised."""
        key = self._key
        command = ("DEL", *(key(name) for name in names))
        try:
            self._send_plain(self._connection(), command)
        except RedisConnectionError:  # found closed: made again, sent again
            self._send_plain(self._connection(), command)

    def _send_plain(self, conn: Any, command: tuple[Any, ...]) -> Any:
        try:
            if _hiredis_pack is not None:
                conn.send_packed_command([_hiredis_pack(command)], check_health=False)
            else:
                conn.send_packed_command(conn.pack_command(*command), check_health=False)
            return conn.read_response()
        except BaseException:
            conn.disconnect()
            raise

    def _call(
        self, keys: list[str], tokens: list[str], timeout: float, new_tokens: list[int]
    ) -> list[tuple[int, bytes | None, bool]]:
        fills, self.pending = self.pending, []  # sent once: a failure drops them (a miss later)
        key = self._key
        fill_keys = [key(name) for gen, val, _t, _v in fills for name in (gen, val)]
        fill_args: list[Any] = [x for _g, _v, token, value in fills for x in (str(token), value)]
        ms = max(1, int(timeout * 1000))
        reply = self._run(fill_keys + keys, [len(fills), ms, *fill_args, *tokens])
        out = []
        for i, new in enumerate(new_tokens):
            token, value = int(reply[2 * i]), reply[2 * i + 1]
            out.append((token, value or None, token == new and not value))
        return out

    def _connection(self) -> Any:
        """This thread's connection to the cache's primary (a forked child makes its own)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is None or local.pid != _pid:
            pool = self.cache._cache._get_connection_pool(True)
            conn = local.conn = pool.connection_class(**pool.connection_kwargs)
            local.pid = _pid
        return conn

    def _run(self, keys: list[str], args: list[Any]) -> Any:
        """``EVALSHA`` (``EVAL`` once if the server does not know the script: a restart, a
        ``SCRIPT FLUSH``). A connection found closed (a restarted Redis, a killed client) is
        made again and the script sent once more: running it twice is harmless (a fill is
        stored only under its current token; a token set by the first run is found by the
        second, which answers it as this read's own). Any other error, a timeout included,
        leaves the connection closed (no half-read answer is left on it) and is raised."""
        try:
            return self._send(self._connection(), keys, args)
        except RedisConnectionError:  # found closed: made again, sent again
            return self._send(self._connection(), keys, args)

    def _send(self, conn: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            try:
                packed = _pack(conn, "EVALSHA", SHA, keys, args)
                conn.send_packed_command(packed, check_health=False)
                return conn.read_response()
            except NoScriptError:  # its whole answer read: the connection is clean
                conn.send_packed_command(_pack(conn, "EVAL", LUA, keys, args), check_health=False)
                return conn.read_response()
        except BaseException:
            conn.disconnect()
            raise


def _pack(conn: Any, command: str, script: str, keys: list[str], args: list[Any]) -> Any:
    """The command as the connection sends it: str, int and bytes arguments only."""
    if _hiredis_pack is not None:
        return [_hiredis_pack((command, script, len(keys), *keys, *args))]
    return conn.pack_command(command, script, len(keys), *keys, *args)


# This process's id, set again in a forked child: compared on every read instead of calling
# os.getpid() (a system call) each time.
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)
