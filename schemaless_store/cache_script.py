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
"""

from __future__ import annotations

from typing import Any

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


class Scripted:
    """The script bound to one ``EntityRedisCache`` instance (Django makes one per thread, so
    its pending fills are this thread's)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.pending: list[Fill] = []
        self._script: Any = None

    def ask(
        self, names: list[tuple[str, str]], new_tokens: list[int], timeout: float
    ) -> list[tuple[int, bytes | None, bool]]:
        """For each ``(token key, value key)`` (short names, as the entity cache spells them):
        ``(token, value or None, created)``; ``created``: the token is ``new_tokens``' one, set
        now. Pending fills are stored first, in the same round trip."""
        make = self.cache.make_key
        keys = [make(name) for pair in names for name in pair]
        return self._call(keys, [str(t) for t in new_tokens], timeout, new_tokens)

    def fill(self, fills: list[Fill], timeout: float) -> None:
        """Queue these rows to go with the next :meth:`ask`, or send them now if too many
        wait."""
        self.pending.extend(fills)
        if len(self.pending) > MAX_PENDING:
            self._call([], [], timeout, [])

    def _call(
        self, keys: list[str], tokens: list[str], timeout: float, new_tokens: list[int]
    ) -> list[tuple[int, bytes | None, bool]]:
        fills, self.pending = self.pending, []  # sent once: a failure drops them (a miss later)
        make = self.cache.make_key
        fill_keys = [make(name) for gen, val, _t, _v in fills for name in (gen, val)]
        fill_args: list[Any] = [x for _g, _v, token, value in fills for x in (str(token), value)]
        if self._script is None:
            client = self.cache._cache.get_client(write=True)
            self._script = client.register_script(LUA)
        ms = max(1, int(timeout * 1000))
        reply = self._script(keys=fill_keys + keys, args=[len(fills), ms, *fill_args, *tokens])
        out = []
        for i, new in enumerate(new_tokens):
            token, value = int(reply[2 * i]), reply[2 * i + 1]
            out.append((token, value or None, token == new and not value))
        return out
