"""The row-moving steps of a bucket move (:class:`..moves.mover.Mover` runs them in its
phases): the copy of every table of each source, the replay of the change log, the
reconciling of keys, and the purge of a side's copies; with the move's record kept as they go.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from django.db import connections

from ..config.metadata import BucketMove
from ..exceptions import MoveRefused
from ..guards.throttle import LatencyProbe, Throttle
from ..tables import move_log as capture
from ..tables import trigger_reload
from ..tables.moved_rows import (
    MovedTable,
    decode_key,
    delete,
    encode_key,
    page,
    rows_of_keys,
    write,
)
from ..topology import bucket_map, servers, shards

LOG_BATCH = 1000
# The copy's checkpoint is saved at most this often (seconds): saving it after every batch
# was a seventh of the copy's time.
CHECKPOINT_EVERY = 1.0
# The tables' cached triggers are checked at most this often while the mover copies or catches
# up (seconds; a check is a rolled-back write per table and shard: tables/trigger_reload.py).
TRIGGERS_CHECKED_EVERY = 5.0


class RowMoves:
    """The steps that move rows; a :class:`~.mover.Mover` sets these attributes."""

    move: BucketMove
    batch: int
    throttle: Throttle
    workers: int
    buckets: set[int]
    sources: dict[str, set[int]]
    tables: list[MovedTable]
    report: Callable[[str, int], None]
    _latency: LatencyProbe | None
    _record: threading.Lock
    _stopping: threading.Event
    _saved: float
    _triggers_checked: float

    def _copy_all(self) -> None:
        """Copy every table of every source: ``workers`` tables at a time on MariaDB (each on
        its own connections; the servers work while the client renders), one at a time on
        SQLite (whose writes the store serializes)."""
        jobs = [(s, table, numbers) for s, numbers in self.sources.items() for table in self.tables]
        aliases = [*self.sources, self.move.target]
        if self.workers <= 1 or not all(shards.dialect(a).parallel_connections for a in aliases):
            for job in jobs:
                self._copy_table(*job)
            return
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="movebuckets-copy")
        try:
            for future in as_completed([pool.submit(self._copy_on_a_thread, *j) for j in jobs]):
                future.result()
        except BaseException:
            self._stopping.set()  # the other copies stop after their current batch
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _copy_on_a_thread(self, source: str, table: MovedTable, numbers: set[int]) -> None:
        try:
            self._copy_table(source, table, numbers)
        finally:
            connections.close_all()  # this thread's own

    def _copy_table(self, source: str, table: MovedTable, numbers: set[int]) -> None:
        mark = f"{source}/{table.name}"
        checkpoint = self.move.checkpoints.get(mark)
        if checkpoint == "done":
            return
        last = None if checkpoint is None else decode_key(checkpoint)
        while True:
            if self._stopping.is_set():
                raise MoveRefused(f"move #{self.move.pk}: the copy stopped (another copy failed)")
            began = time.monotonic()
            found = page(source, table, last, self.batch, numbers)
            if found.last is None:
                break
            moving = found.rows
            write(self.move.target, table, moving)
            last = found.last
            with self._record:
                self._count(f"copied {table.name}", len(moving))
                self.move.checkpoints = {**self.move.checkpoints, mark: encode_key(last)}
                if time.monotonic() - self._saved >= CHECKPOINT_EVERY:
                    self._save()  # a resumed copy writes some batches again: they are upserts
                self.report(f"copy {source} {table.name}", len(moving))
            self._reload_triggers(every=TRIGGERS_CHECKED_EVERY)
            self.throttle.after(began, probe=self._probe)
        with self._record:
            self._save(checkpoints={**self.move.checkpoints, mark: "done"})

    def _replay(self, source: str) -> int:
        """Replay one batch of the source's log; the number of entries handled."""
        self._reload_triggers(every=TRIGGERS_CHECKED_EVERY)
        entries = capture.read(source, LOG_BATCH)
        if not entries:
            return 0
        by_table: dict[str, set[bytes]] = defaultdict(set)
        for _seq, name, key in entries:
            by_table[name].add(key)
        numbers = self.sources[source]
        for table in self.tables:
            keys = sorted(by_table.get(table.name, ()))
            if table.index is None:
                keys = [k for k in keys if bucket_map.bucket_for(k) in numbers]
            if keys:
                self._reconcile(source, table, keys, numbers)
        capture.forget(source, [seq for seq, _name, _key in entries])
        self._count("replayed", len(entries))
        self.report(f"catch up {source}", len(entries))
        return len(entries)

    def _reconcile(
        self, source: str, table: MovedTable, keys: list[bytes], numbers: set[int]
    ) -> None:
        """Make the target's rows of ``keys`` in the moving buckets what the source's are."""
        theirs = [r for r in rows_of_keys(source, table, keys) if table.bucket(r) in numbers]
        ours = [
            r for r in rows_of_keys(self.move.target, table, keys) if table.bucket(r) in numbers
        ]
        positions = [table.columns.index(c) for c in table.natural_key]
        kept = {tuple(r[p] for p in positions) for r in theirs}
        extra = [r for r in ours if tuple(r[p] for p in positions) not in kept]
        delete(self.move.target, table, extra)  # first: a unique value may pass between them
        write(self.move.target, table, theirs)

    def _probe(self) -> float:
        """How busy the servers of the move are (its throttle's ``max_latency``): the recent
        answers of the probe thread :meth:`run` keeps, or one probe now."""
        if self._latency is not None:
            return self._latency.recent()
        return servers.probe_latency([*self.sources, self.move.target])

    def _purge(self, alias: str, what: str) -> None:
        """Delete every row of the moving buckets on ``alias`` (a walk of each table)."""
        on_target = alias == self.move.target
        numbers = self.buckets if on_target else self.sources[alias]
        for table in self.tables:
            if table.kept_on_source and not on_target:
                continue
            last: tuple[Any, ...] | None = None
            while True:
                began = time.monotonic()
                found = page(alias, table, last, self.batch, numbers, names=table.natural_key)
                if found.last is None:
                    break
                deleted = delete(alias, table, found.rows, table.natural_key)
                last = found.last
                self._count(what, deleted)
                self.report(f"{what} {table.name}", deleted)
                self.throttle.after(began, probe=self._probe)

    def _reload_triggers(self, every: float = 0.0, *, always: bool = False) -> None:
        """Reopen each moved table whose cached triggers failed to load on a source or the
        target (every one, ``always``: :mod:`..tables.trigger_reload`); every write to it
        fails until then. At most once per ``every`` seconds (the copy's threads share it)."""
        now = time.monotonic()
        if every and now - self._triggers_checked < every:
            return
        self._triggers_checked = now
        for alias in [*self.sources, self.move.target]:
            trigger_reload.repair(alias, self.tables, always=always)

    # --- the record ----------------------------------------------------------------------

    def _count(self, what: str, rows: int) -> None:
        self.move.counts[what] = self.move.counts.get(what, 0) + rows

    def _save(self, **changes: Any) -> None:
        for name, value in changes.items():
            setattr(self.move, name, value)
        self.move.save()
        self._saved = time.monotonic()
