"""The near cache: the entity cache's hits served from process memory, kept exact by Redis's
server-assisted client-side caching (``CLIENT TRACKING``; docs/cache.md#the-near-cache).

A :class:`NearCache` holds copies of what Redis answered for ids (the id's token and its row as
the entity cache's own parser read it from the value's bytes: strings, numbers, a timestamp and
the body's bytes; never an object a deserializer built), at most ``MAX_ENTRIES``, least
recently used first out. One thread per process owns a *tracking connection*: ``CLIENT TRACKING ON
BCAST PREFIX <the token keys' prefix>`` redirected to itself and subscribed to
``__redis__:invalidate``, so Redis tells it every change of every token key (a write's
``DEL``, a reader's new token, an expiry, an eviction, a ``FLUSHDB``), and the thread drops
those ids. The rules that make it exact:

- **A copy is only taken of a Redis answer given while the tracking connection was live**,
  and is refused if an invalidation of that id (or a reconnection) came between the moment
  before the read was sent (a :class:`Mark`) and the copy: a change after the read reaches
  this process as a push, which either came before the copy (refused) or after (dropped).
- **The writer evicts its own process's copies** (:meth:`NearCache.evict`) once its ``DEL``
  is answered: another connection's push may arrive after that answer.
- **Copies are served only while the tracking connection is heard**: the thread sends a
  ``PING`` every quarter of ``DROP_TIMEOUT``; a ``PONG`` proves that every push Redis queued
  before that ``PING`` ran was read first (one connection, in order). A copy is served only if
  such a ``PING`` was sent less than ``DROP_TIMEOUT`` ago, so a connection that drops silently
  leaves another process's write unseen here for at most ``DROP_TIMEOUT``.
- **A connection that drops flushes every copy**; the new one starts empty.
- **A forked child never uses its parent's**: ``os.register_at_fork`` forgets the instance
  in the child, which starts its own thread and connection on its first read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed

logger = logging.getLogger("schemaless_store.cache")

CHANNEL = "__redis__:invalidate"
RECENT = 4096  # invalidated ids remembered for copies in flight: more in between refuses all


@dataclass(frozen=True)
class Mark:
    """The near cache's state just before a Redis read: what a copy of its answer is checked
    against (:meth:`NearCache.put`)."""

    epoch: int
    seq: int


@dataclass
class NearStats:
    """What this process's near cache did (approximate under threads): shown on the admin's
    health page (:mod:`..admin.cache_panel`), written by ``bench.ycsb`` into its results (its
    report's cache table shows ``refused`` and ``pushed``) and by ``bench.near_miss``, read by
    the tests. Its hits are ``entity_cache.stats.near_hits``, its own process's evictions
    ``entity_cache.stats.invalidated``."""

    pushed: int = 0  # ids dropped by pushes (every process's changes of token keys)
    refused: int = 0  # copies refused: an invalidation or a reconnection came in between
    flushes: int = 0  # connections dropped, FLUSHDB pushes
    connections: int = 0  # tracking connections made live


class NearCache:
    """Copies of Redis answers by id, exact as the module docstring says.

    ``connect()`` returns an unconnected ``redis.connection.Connection`` speaking RESP2 to the
    entity cache's server; ``prefix`` is the full Redis name of the token keys before the id's
    hex. The thread starts with the instance; :meth:`close` stops it."""

    def __init__(
        self,
        connect: Callable[[], Any],
        prefix: str,
        max_entries: int,
        drop_timeout: float,
        entry_timeout: float,
    ) -> None:
        self.prefix = prefix.encode()
        self.max_entries = max_entries
        self.drop_timeout = drop_timeout
        self.entry_timeout = entry_timeout
        self.pid = os.getpid()
        self.stats = NearStats()
        self.client_id: int | None = None  # the tracking connection's CLIENT ID, while live
        self._connect = connect
        self._lock = threading.Lock()
        # id -> (deadline, token, row, whether the next push of this id is the copier's own)
        self._entries: OrderedDict[str, tuple[float, int, Any, bool]] = OrderedDict()
        self._epoch = 0
        self._live = False
        self._heard = 0.0  # when the last PING that was answered was sent
        self._seq = 0
        self._recent: deque[tuple[int, str, bool]] = deque(maxlen=RECENT)  # (seq, id, evicted)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schemaless-near-cache", daemon=True)
        self._thread.start()

    # -- what readers and writers call ----------------------------------------------------------

    def usable(self) -> bool:
        """Whether copies may be served now: the tracking connection is live and was heard
        within ``DROP_TIMEOUT``, in the process that made it."""
        return (
            self._live and time.monotonic() - self._heard < self.drop_timeout and _pid == self.pid
        )

    def get_many(self, hexes: Iterable[str]) -> tuple[Mark | None, dict[str, tuple[int, Any]]]:
        """The copies held for these ids as ``(token, row)``, and the :class:`Mark` to copy
        Redis's answers for the others under; ``(None, {})`` when copies may not be used."""
        with self._lock:
            if not self.usable():
                return None, {}
            mark = Mark(self._epoch, self._seq)
            now = time.monotonic()
            found: dict[str, tuple[int, Any]] = {}
            entries = self._entries
            for h in hexes:
                entry = entries.get(h)
                if entry is None:
                    continue
                if entry[0] <= now:
                    del entries[h]
                    continue
                entries.move_to_end(h)
                found[h] = (entry[1], entry[2])
        return mark, found

    def put(
        self,
        mark: Mark,
        answers: dict[str, tuple[int, Any]],
        created: Collection[str] = (),
    ) -> None:
        """Copy Redis's answers (read after ``mark`` was taken), but none that an invalidation
        or a reconnection since ``mark`` may have made old.

        ``created`` is kept for callers' sake and must be empty: a copy that expected its own
        token's push was passed over by a push that also carried another write's ``DEL``
        (Redis names a key once per turn), so no copy ever allows a push
        (docs/cache.md#no-copy-from-a-first-read)."""
        if created:
            raise ValueError("a near-cache copy allows no push (docs/cache.md)")
        with self._lock:
            if mark.epoch != self._epoch or not self._live:
                self.stats.refused += len(answers)
                return
            pushes: dict[str, int] = {}
            if self._seq != mark.seq:
                if self._seq - mark.seq > len(self._recent):
                    self.stats.refused += len(answers)
                    return
                for seq, h, evicted in reversed(self._recent):
                    if seq <= mark.seq:
                        break
                    # This process's own eviction (a write returned): never copy over it.
                    pushes[h] = RECENT if evicted else pushes.get(h, 0) + 1
            deadline = time.monotonic() + self.entry_timeout
            entries = self._entries
            for h, (token, value) in answers.items():
                seen = pushes.get(h, 0)
                allowed = 0
                if seen > allowed:
                    self.stats.refused += 1
                    continue
                entries[h] = (deadline, token, value, seen < allowed)
                entries.move_to_end(h)
            while len(entries) > self.max_entries:
                entries.popitem(last=False)

    def evict(self, hexes: Iterable[str]) -> None:
        """Drop these ids' copies: this process's own invalidation, done (or failed)."""
        self._invalidate(hexes, evicted=True)

    def discard(self, h: str) -> None:
        """Drop one copy a reader found unusable (it names another shard than the owner)."""
        with self._lock:
            self._entries.pop(h, None)

    def heard(self) -> float:
        """When (``time.monotonic()``) the last ``PING`` that was answered was sent: every push
        Redis queued before then has been applied."""
        return self._heard

    def holds(self, h: str) -> bool:
        """Whether a copy of this id (its hex) is held."""
        return h in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:  # an empty near cache is still one
        return True

    def flush(self) -> None:
        with self._lock:
            self._flush()
            self.stats.flushes += 1

    def close(self) -> None:
        """Stop the thread (it closes the connection); copies are no longer served."""
        self._stop.set()
        with self._lock:
            self._live = False
            self._flush()
        if threading.current_thread() is not self._thread and os.getpid() == self.pid:
            self._thread.join(timeout=self.drop_timeout + 1)

    # -- the tracking connection's thread -------------------------------------------------------

    def _invalidate(self, hexes: Iterable[str], evicted: bool = False) -> int:
        count = 0
        entries = self._entries
        with self._lock:
            for h in hexes:
                self._seq += 1
                self._recent.append((self._seq, h, evicted))
                entry = entries.get(h)
                if entry is not None:
                    if entry[3] and not evicted:
                        # The push of the token this copy's own read set: the one it expects.
                        entries[h] = (entry[0], entry[1], entry[2], False)
                    else:
                        del entries[h]
                count += 1
        return count

    def _flush(self) -> None:  # under the lock
        self._entries.clear()
        self._epoch += 1

    def _run(self) -> None:
        pause = 0.05
        while not self._stop.is_set():
            try:
                conn = self._subscribe()
            except Exception as exc:
                if pause == 0.05:  # once per outage
                    logger.warning("near cache: no tracking connection (%s); reads use Redis", exc)
                self._stop.wait(pause)
                pause = min(pause * 2, self.drop_timeout)
                continue
            pause = 0.05
            try:
                self._listen(conn)
            except Exception as exc:
                if not self._stop.is_set():
                    logger.warning("near cache: tracking connection lost (%s); flushed", exc)
            finally:
                with self._lock:
                    self._live = False
                    self.client_id = None
                    self._flush()
                    self.stats.flushes += 1
                conn.disconnect()

    def _subscribe(self) -> Any:
        conn = self._connect()
        try:
            conn.connect()
            client_id = self._call(conn, "CLIENT", "ID")
            self._call(conn, "CLIENT", "SETNAME", f"schemaless-near-{os.getpid()}")
            self._call(
                conn, "CLIENT", "TRACKING", "ON", "REDIRECT", client_id, "BCAST", "PREFIX",
                self.prefix,
            )  # fmt: skip
            reply = self._call(conn, "SUBSCRIBE", CHANNEL)
            if not (isinstance(reply, list) and reply[:1] == [b"subscribe"]):
                raise ConnectionError(f"unexpected answer to SUBSCRIBE: {reply!r}")
        except BaseException:
            conn.disconnect()
            raise
        with self._lock:
            self._flush()  # empty already; the epoch refuses copies of answers from before
            self._live = True
            self._heard = time.monotonic()
            self.client_id = int(client_id)
            self.stats.connections += 1
        return conn

    def _call(self, conn: Any, *args: Any) -> Any:
        conn.send_command(*args)
        reply = conn.read_response()
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _listen(self, conn: Any) -> None:
        interval = self.drop_timeout / 4
        pinged: float | None = None  # when the PING not yet answered was sent
        next_ping = time.monotonic() + interval
        while not self._stop.is_set():
            now = time.monotonic()
            if pinged is not None and now - pinged >= self.drop_timeout:
                raise TimeoutError(f"no answer to PING in {self.drop_timeout} s")
            if pinged is None and now >= next_ping:
                conn.send_command("PING")
                pinged = now
            wait = (pinged + self.drop_timeout if pinged is not None else next_ping) - now
            if not conn.can_read(timeout=max(0.0, min(wait, interval))):
                continue
            reply = conn.read_response()
            kind = reply[0] if isinstance(reply, list) and reply else None
            if kind == b"pong" and pinged is not None:
                self._heard = pinged
                next_ping = pinged + interval
                pinged = None
            elif kind == b"message" and len(reply) == 3:
                self._pushed(reply[2])

    def _pushed(self, names: list[bytes] | None) -> None:
        if names is None:  # FLUSHDB / FLUSHALL: every key changed
            self.flush()
            return
        cut = len(self.prefix)
        hexes = [name[cut:].decode() for name in names if name.startswith(self.prefix)]
        self.stats.pushed += self._invalidate(hexes)


_instance: NearCache | None = None
_instance_key: Any = None
# This process's id, set again in a forked child (_forget_in_child): the readers' checks
# compare with it instead of asking os.getpid(), a system call, on every read.
_pid = os.getpid()
_instance_lock = threading.Lock()


def current(key: Any, build: Callable[[], NearCache]) -> NearCache:
    """This process's near cache for configuration ``key``, built (and the previous one
    closed) when the key changed or this is a forked child."""
    near = _instance
    if near is not None and _instance_key == key and near.pid == _pid:
        return near
    return _replace(key, build)


def _replace(key: Any, build: Callable[[], NearCache]) -> NearCache:
    global _instance, _instance_key
    with _instance_lock:
        near = _instance
        if near is not None and _instance_key == key and near.pid == os.getpid():
            return near
        if near is not None and near.pid == os.getpid():
            near.close()
        _instance, _instance_key = build(), key
        return _instance


def existing() -> NearCache | None:
    """This process's near cache if one runs."""
    near = _instance
    return near if near is not None and near.pid == _pid else None


def shut() -> None:
    """Close this process's near cache (tests; a setting turned off for good)."""
    global _instance, _instance_key
    with _instance_lock:
        if _instance is not None and _instance.pid == os.getpid():
            _instance.close()
        _instance, _instance_key = None, None


def _switched(*, setting: str, value: Any = None, **kwargs: Any) -> None:
    """``SCHEMALESS`` changed (``override_settings``, a test): with ``NEAR_CACHE`` or ``CACHE``
    off, this process's near cache is closed, its thread and connection with it (as
    django-debug-toolbar drops what it built from its settings). Switched on again, reads build
    a new one."""
    if setting == "SCHEMALESS" and (
        not isinstance(value, dict) or value.get("NEAR_CACHE") is None or not value.get("CACHE")
    ):
        shut()


setting_changed.connect(_switched, dispatch_uid="schemaless_near_cache_switched")


def _forget_in_child() -> None:
    # The parent's thread does not exist here and its connection is the parent's: never use
    # them, never close them (closing is the parent's); the child makes its own.
    global _instance, _instance_key, _instance_lock, _pid
    _instance, _instance_key = None, None
    _instance_lock = threading.Lock()
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forget_in_child)
