"""The entity cache: ``get`` and ``get_many`` read through a Django cache (Redis in production),
and every write of an entity invalidates it after its commit (docs/cache.md).

Stale fills are prevented with **generations**, the version scheme of Facebook's memcache paper
("Scaling Memcache at Facebook", section 3.2.1, done with versions rather than leases):

- each id has a generation key holding a random token, and a value key holding
  ``(token, row)``; a value counts only while its token is the id's current token;
- a reader reads both keys in one round trip (``get_many``). On a miss it makes sure a token
  exists (setting a new random one if none does) **before** it reads the database, then stores
  the row under that token;
- a writer deletes the generation key **after** its commit, before the write returns.

A reader that read the database before a commit C stored its row under a token that existed
before C's invalidation, which deleted it: every later token is new and random, so that row is
never served again, whenever the reader gets round to storing it. A writer's own process never
reads a value older than its write: the invalidation is done when the write returns.

A hit must also name the shard the reader's map says owns the id (a bucket move changes the
owner, never the row); reads inside a transaction on the shard bypass the cache both ways (they
may see the transaction's own writes, or an old snapshot). When the cache fails, reads go to
the database; when an invalidation fails, this process stops using the cache for
``SCHEMALESS["CACHE_TIMEOUT"]`` seconds, the longest any entry lives, so the stale window of
every other process is bounded by that timeout too.

With ``SCHEMALESS["NEAR_CACHE"]`` set, :class:`Lookup` asks this process's
:class:`~.near_cache.NearCache` first and copies Redis's hits into it (under the mark it took
before asking Redis); :func:`invalidate` drops this process's copies once its ``DEL`` is
answered.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.db import connections, transaction

from ..config import conf
from ..exceptions import ConfigurationError
from . import near_cache
from .backend import TAG as _TAG
from .backend import ReusedClientRedisCacheClient, carries_near_cache
from .near_cache import NearCache

logger = logging.getLogger("schemaless_store.cache")

_GEN = "sls:g:"  # + the id's hex: the id's current token
_VAL = "sls:v:"  # + the id's hex: (token, row)
_HEAD = struct.Struct("<2sqBqB")  # tag, token, exists, added_id, len(alias)
_TOKEN_BITS = 62  # a token: 1 .. 2**62


@dataclass(frozen=True)
class Row:
    """An entity row as the cache keeps it: where it lives and what it holds. ``exists`` is
    False for an id known to have no entity (a negative entry)."""

    alias: str
    exists: bool
    added_id: int = 0
    updated: dt.datetime | None = None
    body: bytes = b""


@dataclass
class Stats:
    """What this process's reads and writes did with the cache (approximate under threads): the
    health page's cache panel (:mod:`..admin.cache_panel`), the bench's hit rate, the tests."""

    hits: int = 0
    misses: int = 0
    near_hits: int = 0  # of the hits, those served from process memory (the near cache)
    invalidated: int = 0  # ids whose tokens were deleted after a commit
    failures: int = 0  # cache operations that raised (reads went to the database)


stats = Stats()


def reset_stats() -> None:
    global stats
    stats = Stats()


def _backend() -> BaseCache | None:
    alias = conf.get().cache
    return None if alias is None else caches[alias]


_suspended_until = 0.0
_suspend_lock = threading.Lock()


def _usable() -> BaseCache | None:
    backend = _backend()
    if backend is None or time.monotonic() < _suspended_until:
        return None
    return backend


def enabled() -> bool:
    """Whether reads may use the cache in this process now."""
    if _dropped:
        _settle_dropped()
    return _usable() is not None


def _suspend(reason: BaseException) -> None:
    global _suspended_until
    timeout = conf.get().cache_timeout
    with _suspend_lock:
        _suspended_until = time.monotonic() + timeout
    logger.error(
        "entity cache invalidation failed (%s); this process reads the database only for the "
        "next %.0f s (SCHEMALESS['CACHE_TIMEOUT'])",
        reason,
        timeout,
    )


def distrust(reason: str) -> None:
    """Read the database only, in this process, for ``CACHE_TIMEOUT`` seconds: a write whose
    outcome is unknown may still commit after its invalidation (docs/cache.md)."""
    global _suspended_until
    if _backend() is None:
        return
    timeout = conf.get().cache_timeout
    with _suspend_lock:
        _suspended_until = time.monotonic() + timeout
    logger.error("%s; this process reads the database only for the next %.0f s", reason, timeout)


def resume() -> None:
    """Use the cache again at once after a failed invalidation (tests, an operator's shell)."""
    global _suspended_until
    with _suspend_lock:
        _suspended_until = 0.0


def _encode(token: int, row: Row) -> bytes:
    alias = row.alias.encode()
    head = _HEAD.pack(_TAG, token, row.exists, row.added_id, len(alias))
    if not row.exists:
        return head + alias
    assert row.updated is not None
    stamp = row.updated.isoformat().encode()
    return b"".join((head, alias, bytes((len(stamp),)), stamp, row.body))


def _valid(token: int, value: bytes, owner: str) -> Row | None:
    """The row in ``value`` if it was filled under ``token`` and names ``owner``."""
    try:
        stored, row = _decode(value)
    except (ValueError, struct.error, UnicodeDecodeError):
        return None
    return row if stored == token and row.alias == owner else None


def _decode(value: bytes) -> tuple[int, Row]:
    tag, token, exists, added_id, alias_len = _HEAD.unpack_from(value)
    if tag != _TAG:
        raise ValueError("not an entity cache value")
    at = _HEAD.size
    alias = value[at : at + alias_len].decode()
    at += alias_len
    if not exists:
        return token, Row(alias, False)
    stamp_len = value[at]
    updated = dt.datetime.fromisoformat(value[at + 1 : at + 1 + stamp_len].decode())
    return token, Row(alias, True, added_id, updated, value[at + 1 + stamp_len :])


class Lookup:
    """One read through the cache: :meth:`find` the hits, read the misses from the database
    yourself, then :meth:`fill` with what you found. Tokens are made sure of in ``find``,
    before the database read, as the scheme above needs."""

    def __init__(self, backend: BaseCache, near: NearCache | None = None) -> None:
        self.backend = backend
        self.near = near
        self.tokens: dict[bytes, int] = {}
        self.mark: near_cache.Mark | None = None
        self.failed = False

    def find(self, keys: Sequence[bytes], owner_of: Any) -> dict[bytes, Row]:
        """The rows cached for ``keys`` whose shard is ``owner_of(key)``; for the others, a
        token to fill them under. The near cache, when on, answers first; Redis's hits are
        copied into it."""
        hexes = {key: key.hex() for key in keys}
        hits: dict[bytes, Row] = {}
        near, mark = self.near, None
        if near is not None:
            mark, held = near.get_many(hexes.values())
            for key, h in hexes.items():
                copy = held.get(h)
                if copy is not None:
                    if copy[1].alias == owner_of(key):
                        hits[key] = copy[1]
                    else:  # filled before a move: Redis may hold the owner's row
                        near.discard(h)
            stats.near_hits += len(hits)
        asked = [key for key in hexes if key not in hits] if hits else list(hexes)
        if not asked:
            stats.hits += len(hits)
            return hits
        try:
            got = self._ask([hexes[key] for key in asked])
        except Exception as exc:
            self._failure(exc)
            return hits
        copies: dict[str, tuple[int, Row]] = {}
        for key in asked:
            h = hexes[key]
            token, value, _created = got[h]
            if value is not None:
                row = _valid(token, value, owner_of(key))
                if row is not None:
                    hits[key] = row
                    if mark is not None:
                        copies[h] = (token, row)
                    continue
            self.tokens[key] = token
        self.mark = mark
        if copies:
            near.put(mark, copies)  # type: ignore[union-attr, arg-type]
        stats.hits += len(hits)
        stats.misses += len(keys) - len(hits)
        return hits

    def _ask(self, hexes: list[str]) -> dict[str, tuple[int, bytes | None, bool]]:
        """Each id's token (made sure of: a new random one set where there was none) and value,
        as Redis holds them now: one script on an :class:`EntityRedisCache`, else ``get_many``
        then ``set_many`` of the new tokens."""
        timeout = conf.get().cache_timeout
        fresh = [random.getrandbits(_TOKEN_BITS) + 1 for _ in hexes]
        scripted = getattr(self.backend, "scripted", None)
        if scripted is not None:
            names = [(_GEN + h, _VAL + h) for h in hexes]
            answers = scripted.ask(names, fresh, timeout)
            return dict(zip(hexes, answers, strict=True))
        got = self.backend.get_many([_GEN + h for h in hexes] + [_VAL + h for h in hexes])
        out: dict[str, tuple[int, bytes | None, bool]] = {}
        new_tokens: dict[str, int] = {}
        for h, new in zip(hexes, fresh, strict=True):
            token, value = got.get(_GEN + h), got.get(_VAL + h)
            if type(token) is not int:
                token = new_tokens[_GEN + h] = new
                value = None
            out[h] = (token, value if type(value) is bytes else None, _GEN + h in new_tokens)
        if new_tokens:
            self.backend.set_many(new_tokens, timeout)
        return out

    def fill(self, rows: Iterable[tuple[bytes, Row]]) -> None:
        """Store rows read from the database (after :meth:`find`) under their tokens."""
        if self.failed:
            return
        rows = [(key, row) for key, row in rows if key in self.tokens]
        # No near-cache copy of a row read from the database: the push of the token this read
        # set may carry another write's DEL in the same Redis turn, and nothing would tell
        # them apart (docs/cache.md#no-copy-from-a-first-read). The next read's hit copies it.
        values = {key: _encode(self.tokens[key], row) for key, row in rows}
        if not values:
            return
        scripted = getattr(self.backend, "scripted", None)
        try:
            if scripted is not None:  # travels with this thread's next read
                fills = [
                    (_GEN + key.hex(), _VAL + key.hex(), self.tokens[key], value)
                    for key, value in values.items()
                ]
                scripted.fill(fills, conf.get().cache_timeout)
            else:
                self.backend.set_many(
                    {_VAL + key.hex(): value for key, value in values.items()},
                    conf.get().cache_timeout,
                )
        except Exception as exc:
            self._failure(exc)

    def _failure(self, exc: BaseException) -> dict[bytes, Row]:
        stats.failures += 1
        logger.warning("entity cache read failed (%s); reading the database", exc)
        self.failed = True
        self.tokens.clear()
        return {}


def lookup() -> Lookup | None:
    """A :class:`Lookup` if reads may use the cache now, else None."""
    if _dropped:
        _settle_dropped()
    backend = _usable()
    if backend is None:
        return None
    resolved = conf.get()
    if resolved.near_cache is None:
        return Lookup(backend)
    return Lookup(backend, near_cache.current(_near_key(resolved), lambda: _near(backend)))


_near_key_memo: tuple[Any, Any] = (None, None)


def _near_key(resolved: conf.StoreSettings) -> Any:
    """What the near cache is built from: the same values keep the same near cache (and its
    copies) across ``override_settings``; other values build another."""
    global _near_key_memo
    if _near_key_memo[0] is resolved:  # holding it: its id is never another's
        return _near_key_memo[1]
    assert resolved.cache is not None
    key = (
        resolved.cache,
        resolved.near_cache,
        resolved.cache_timeout,
        repr(sorted(settings.CACHES[resolved.cache].items(), key=str)),
    )
    _near_key_memo = (resolved, key)
    return key


def _near(backend: BaseCache) -> NearCache:
    resolved = conf.get()
    near = resolved.near_cache
    assert near is not None
    if not carries_near_cache(type(backend)):
        raise ConfigurationError(
            "SCHEMALESS['NEAR_CACHE'] needs the entity cache to be an EntityRedisCache "
            f"(cache_from_url), not {type(backend).__name__}"
        )
    client: ReusedClientRedisCacheClient = backend._cache  # type: ignore[attr-defined]
    prefix = backend.make_key(_GEN)
    if backend.make_key(_GEN + "0f") != prefix + "0f":
        raise ConfigurationError(
            "SCHEMALESS['NEAR_CACHE'] needs the entity cache's KEY_FUNCTION to put the key "
            "last (Redis tracks the token keys by their common prefix)"
        )
    return NearCache(
        client.tracking_connection,
        prefix,
        max_entries=near.max_entries,
        drop_timeout=near.drop_timeout,
        entry_timeout=resolved.cache_timeout,
    )


def invalidate_on_commit(keys: list[bytes], using: str) -> None:
    """Inside a caller's ``transaction.atomic()`` on ``using``: invalidate ``keys`` once the
    block commits (Django's ``on_commit``). Django drops a hook it does not run: after a
    rollback, after a ``COMMIT`` that failed (whose answer may have been lost after it
    landed), and every hook after a caller's own hook that raised. Dropped, the hook is
    still invalidated, by this process's next read or write through the cache
    (:func:`_settle_dropped`), and when the connection had failed (the block's outcome
    unknown, its session perhaps still committing) this process then reads the shards only
    for ``CACHE_TIMEOUT`` (docs/cache.md#a-callers-transaction)."""
    transaction.on_commit(_OnCommit(keys, using), using=using)


# Hooks of invalidate_on_commit() dropped unrun: (ids, whether their connection had failed).
# A finalizer only appends here (deque.append takes no lock: it may run inside a garbage
# collection, wherever this thread is); readers and writers do the rest.
_dropped: deque[tuple[list[bytes], bool]] = deque()


class _OnCommit:
    """The hook :func:`invalidate_on_commit` registers: run, or dropped unrun (CPython
    frees it as Django lets it go: a failed commit's ``close()``, a rollback, the end of
    the traceback of a hook that raised)."""

    __slots__ = ("keys", "ran", "using")

    def __init__(self, keys: list[bytes], using: str) -> None:
        self.keys = keys
        self.using = using
        self.ran = False

    def __call__(self) -> None:
        self.ran = True
        invalidate(self.keys)

    def __del__(self) -> None:
        if self.ran:
            return
        try:
            failed = bool(connections[self.using].errors_occurred)
        except Exception:  # interpreter shutdown: assume the worst
            failed = True
        _dropped.append((self.keys, failed))


def _settle_dropped() -> None:
    """Invalidate the ids of hooks dropped unrun; distrust the cache if any had failed."""
    while _dropped:
        try:
            keys, failed = _dropped.popleft()
        except IndexError:  # another thread took the last
            return
        _invalidate(keys)
        if failed:
            distrust(
                "a transaction.atomic() around store writes ended with its connection "
                "failed: its commit may have landed"
            )


def invalidate(keys: Iterable[bytes]) -> None:
    """After a commit that changed these entities: delete their tokens (one round trip). On
    failure this process stops reading the cache for ``CACHE_TIMEOUT`` (see above)."""
    if _dropped:
        _settle_dropped()
    _invalidate(keys)


def _invalidate(keys: Iterable[bytes]) -> None:
    hexes = [key.hex() for key in keys]
    backend = _backend()
    if backend is not None and hexes:
        try:
            scripted = getattr(backend, "scripted", None)
            if scripted is not None:  # on this thread's own connection (cache/script.py)
                scripted.delete([_GEN + h for h in hexes])
            else:
                backend.delete_many([_GEN + h for h in hexes])
        except Exception as exc:
            stats.failures += 1
            _suspend(exc)
        else:
            stats.invalidated += len(hexes)
    # After the DEL's answer (or with the cache off now, perhaps on again later): this
    # process's copies go now, whenever Redis's push comes.
    near = near_cache.existing()
    if near is not None:
        near.evict(hexes)
