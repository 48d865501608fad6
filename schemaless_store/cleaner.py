"""The cleaner: backfills new indexes and keeps every index exact (DESIGN section 5).

For each index, one pass over the chosen shards:

- **backfill** (only while the index is ``building``): walk ``entities`` by ``added_id``, in
  batches, up to the highest ``added_id`` seen when the backfill started (later entities were
  written by writers that maintain the index), inserting the rows each entity implies with
  idempotent statements, and saving a checkpoint after every batch. A killed backfill resumes
  from its checkpoint. When every shard is done the index becomes ``ready``.
- **repair**: walk ``entities`` newest ``updated`` first, compare each batch with the index
  (:func:`.consistency.compare`), insert missing rows, remove stale ones through
  :func:`.writes.remove_stale` (the write protocol's locked re-check).
- **sweep**: walk the index table on the shard by primary key and remove rows whose entity no
  longer exists (orphans) or no longer implies them (stale), again through ``remove_stale``;
  rows on the wrong shard (after buckets moved) are re-added where they belong, then deleted.

Entities are read with plain reads (no locks): a batch never blocks a writer. A row inserted
from such a read can race with a writer that changes the entity meanwhile, so after inserting,
the batch re-reads ``updated`` of those entities, and hands the rows of any entity that changed
to ``remove_stale``, which keeps only what the entity (locked, current) still implies.

One cleaner works a given (index, shard) at a time (:mod:`.cleaner_lock`); a second one skips it
(or waits, ``lock_wait``) and says so. Each pass is recorded in :class:`~.models.CleanerPass`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections, transaction
from django.utils import timezone
from tqdm import tqdm

from . import lifecycle, shards, writes
from .cleaner_lock import CleanerLock
from .codec import decode_body
from .consistency import compare
from .exceptions import ConfigurationError, CorruptBody, IndexValueError, UniqueViolation
from .indexes import Index, Source, registry

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 2000
# Index rows per INSERT statement: a statement holds its row (and gap) locks until it ends, so a
# long one can stall a writer inserting next to those rows.
INSERT_CHUNK = 500
DEFAULT_INTERVAL = 60.0
# Pass records are saved at most this often while a pass runs (and always at its end).
RECORD_EVERY_SECONDS = 2.0
# Problems kept verbatim in a pass record's message; the rest are counted.
MAX_NOTES = 20
# Rows per DELETE statement (row-value IN lists).
DELETE_CHUNK = 200

DONE, INTERRUPTED, FAILED, SKIPPED = "done", "interrupted", "failed", "skipped"
BACKFILL, REPAIR, SWEEP = "backfill", "repair", "sweep"

Row = tuple[Index, tuple[Any, ...], bytes]  # (index, column values, entity id)
# How the cleaner reads ``updated``: as text. It is only compared for equality (a version) and
# passed back as a keyset bound, and text costs no Python datetime per row (profiled: building
# them was 15% of a backfill's CPU).
UPDATED = "CAST(updated AS CHAR)"

# One entity read from a shard: (added_id, id, updated as read, body).
EntityRow = tuple[int, bytes, Any, bytes]
# What a row was read at: (added_id, updated). Every write changes updated; a delete and
# re-create changes added_id.
Version = tuple[int, Any]


@dataclass
class PassResult:
    """What one pass did on one (index, shard)."""

    index: str
    shard: str
    kind: str
    status: str = DONE
    scanned: int = 0  # entities (backfill, repair) or index rows (sweep) looked at
    inserted: int = 0  # rows written (backfill: including rows writers had already added)
    stale_removed: int = 0
    orphans_removed: int = 0
    errors: int = 0  # entities skipped: corrupt body, values that do not fit, unique conflicts
    seconds: float = 0.0
    message: str = ""
    failure: str = field(default="", repr=False)
    notes: list[str] = field(default_factory=list, repr=False)  # the first MAX_NOTES problems
    record: Any = field(default=None, repr=False)
    saved_at: float = field(default=0.0, repr=False)

    def describe(self) -> str:
        counts = (
            f"{self.scanned} scanned, {self.inserted} inserted, {self.stale_removed} stale "
            f"removed, {self.orphans_removed} orphans removed, {self.errors} errors"
        )
        text = f"{self.kind} of {self.index} on {self.shard}: {self.status}"
        if self.status != SKIPPED:
            text += f" in {self.seconds:.1f}s ({counts})"
        return text + (f": {self.message}" if self.message else "")


COUNTS = ("scanned", "inserted", "stale_removed", "orphans_removed", "errors")


@dataclass
class Summary:
    """What a run did: every pass of its last round, and totals over all its rounds (a
    long-running cleaner keeps counts, not every pass it ever ran)."""

    passes: list[PassResult] = field(default_factory=list)  # of the last round
    problems: list[str] = field(default_factory=list)  # index-level, last round: e.g. no state
    seconds: float = 0.0
    rounds: int = 0
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    failures: int = 0  # failed passes over all rounds
    skips: int = 0  # passes skipped over all rounds (another cleaner held the lock)

    def start_round(self) -> None:
        self.rounds += 1
        self.passes, self.problems = [], []

    def add(self, results: Iterable[PassResult]) -> None:
        for result in results:
            self.passes.append(result)
            for name in COUNTS:
                self.totals[name] += getattr(result, name)
            self.failures += result.status == FAILED
            self.skips += result.status == SKIPPED

    def total(self, name: str) -> int:
        return self.totals[name]

    @property
    def failed(self) -> list[PassResult]:
        return [p for p in self.passes if p.status == FAILED]

    @property
    def skipped(self) -> list[PassResult]:
        return [p for p in self.passes if p.status == SKIPPED]

    def describe(self) -> str:
        text = (
            f"Cleaner finished in {self.seconds:.1f}s: {self.total('inserted')} rows inserted, "
            f"{self.total('stale_removed')} stale removed, {self.total('orphans_removed')} "
            f"orphans removed ({self.total('scanned')} scanned, {self.total('errors')} errors"
        )
        if self.rounds > 1:
            text += f", {self.rounds} rounds"
        if self.skips:
            text += f", {self.skips} skipped: locked by another cleaner"
        if self.failures:
            text += f", {self.failures} failed"
        return text + ")."


class Cleaner:
    """Backfills and repairs indexes; ``run()`` until done (``once``) or until stopped.

    ``indexes`` and ``shards`` (names and aliases) default to every declared index and every
    shard. Two throttles: ``sleep`` pauses a fixed time after each batch, ``duty`` (a share
    of wall time, above 0 and at most 1) pauses after each batch for as long as keeps the
    cleaner working at most that share of the time. ``interval`` is the pause between rounds
    when not ``once``, ``lock_wait`` is how long to wait for another cleaner's lock before skipping.
    SIGINT/SIGTERM (when run in the main thread) or :meth:`stop` finish the current batch and
    end the run.
    """

    def __init__(
        self,
        *,
        indexes: Sequence[str] | None = None,
        shards: Sequence[str] | None = None,
        once: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        sleep: float = 0.0,
        duty: float = 1.0,
        interval: float = DEFAULT_INTERVAL,
        lock_wait: float = 0.0,
        progress: bool = False,
        progress_file: TextIO | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a whole number of at least 1, not {batch_size!r}")
        for name, value in (("sleep", sleep), ("interval", interval), ("lock_wait", lock_wait)):
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number of seconds (0 or more), not {value!r}")
        if isinstance(duty, bool) or not isinstance(duty, int | float) or not 0 < duty <= 1:
            raise ValueError(
                f"duty must be a share of the time above 0 and at most 1, not {duty!r}"
            )
        self.indexes = _resolve_indexes(indexes)
        self.aliases = _resolve_aliases(shards)
        self.once = once
        self.batch_size = batch_size
        self.sleep = float(sleep)
        self.duty = float(duty)
        self.interval = float(interval)
        self.lock_wait = float(lock_wait)
        self.progress = progress
        self.progress_file = progress_file
        self._stop = threading.Event()
        self._signalled = False  # set by the signal handler, which must not take a lock
        self._wakeups: queue.SimpleQueue[int | None] | None = None  # see _handle_signals

    # --- running and stopping ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        return not (self._signalled or self._stop.is_set())

    @running.setter
    def running(self, value: bool) -> None:
        if value:
            self._signalled = False
            self._stop.clear()
        else:
            self._stop.set()

    def stop(self) -> None:
        """Finish the current batch, then end the run."""
        self._stop.set()

    def run(self) -> Summary:
        """Run rounds (each: backfill, repair, sweep of every index) until done or stopped."""
        summary = Summary()
        started = time.monotonic()
        restore = self._handle_signals()
        try:
            while self.running:
                self.run_round(summary)
                if self.once:
                    break
                logger.debug("round done; next one in %.0fs", self.interval)
                self._stop.wait(self.interval)
        finally:
            restore()
            shards.close_index_connections()
            summary.seconds = time.monotonic() - started
        return summary

    def run_round(self, summary: Summary | None = None) -> Summary:
        """One full pass over every chosen index and shard."""
        summary = summary if summary is not None else Summary()
        summary.start_round()
        try:
            states = lifecycle.states(refresh=True)
        except Exception as exc:  # the metadata database: a long-running cleaner tries again
            problem = f"cannot read the index states: {_one_line(exc)}"
            logger.exception("%s", problem)
            summary.problems.append(problem)
            return summary
        for index in self.indexes:
            if not self.running:
                break
            try:
                self._clean_index(index, states.get(index.name), summary)
            except Exception as exc:  # outside any pass: checkpoints or states unreadable
                problem = f"cleaning {index.name} failed: {_one_line(exc)}"
                logger.exception("%s", problem)
                summary.problems.append(problem)
        return summary

    def _handle_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        # A handler runs in the main thread between two bytecodes, perhaps while that thread
        # holds a lock: the stop event's own, inside the throttle's Event.wait() (runcleaner
        # hung after "SIGTERM received" when the handler called Event.set()), or threading's,
        # inside a Thread.start(). So the handler takes no lock: it sets a flag and puts the
        # signal on a SimpleQueue (documented as safe in signal handlers), and this thread
        # sets the event, which wakes a wait in progress.
        wakeups: queue.SimpleQueue[int | None] = queue.SimpleQueue()

        def relay() -> None:
            while wakeups.get() is not None:
                self._stop.set()

        relayer = threading.Thread(target=relay, name="cleaner-signals", daemon=True)
        relayer.start()
        self._wakeups = wakeups
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._wakeups = None
            wakeups.put(None)
            relayer.join(timeout=5)

        return restore

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and not self.running:
            raise KeyboardInterrupt  # a second Ctrl-C: the operator does not want to wait
        self._signalled = True  # what `running` reads from now on
        logger.info(
            "%s received: finishing the current batch, then stopping", signal.Signals(signum).name
        )
        wakeups = self._wakeups
        if wakeups is not None:
            wakeups.put(signum)  # never self.stop() here: see _handle_signals

    # --- one index ------------------------------------------------------------------------

    def _clean_index(self, index: Index, state: str | None, summary: Summary) -> None:
        if state is None or state == lifecycle.RETIRED:
            problem = (
                f"index {index.name!r} has no state yet"
                if state is None
                else f"index {index.name!r} is declared but still marked retired"
            ) + ": run `manage.py migrateall` first (it creates its tables and records it)"
            logger.error(problem)
            summary.problems.append(problem)
            return
        if state == lifecycle.BUILDING:
            for alias in self.aliases:
                summary.add(self._run_passes(index, alias, [BACKFILL]))
                if not self.running:
                    return
            waiting = self._shards_to_backfill(index)
            if waiting:
                # Not a failure of this run: those shards were not ours (--shard), another
                # cleaner holds them, or their pass failed (reported with the pass).
                logger.info(
                    "index %s is still building: %s not backfilled yet; it is repaired once "
                    "every shard is",
                    index.name,
                    ", ".join(waiting),
                )
                return
            if lifecycle.mark_ready(index.name):
                logger.info("index %s is backfilled on every shard: it is ready", index.name)
        for alias in self.aliases:
            if not self.running:
                return
            summary.add(self._run_passes(index, alias, [REPAIR, SWEEP]))

    def _shards_to_backfill(self, index: Index) -> list[str]:
        from .models import CleanerCheckpoint

        done = set(
            CleanerCheckpoint.objects.using(DEFAULT_DB_ALIAS)
            .filter(index_name=index.name, done=True)
            .values_list("shard", flat=True)
        )
        return [alias for alias in shards.shard_aliases() if alias not in done]

    def _run_passes(self, index: Index, alias: str, kinds: Sequence[str]) -> list[PassResult]:
        """Take the (index, shard) lock, run the passes, release it."""
        lock = CleanerLock(index.name, alias)
        try:
            got = lock.acquire(self.lock_wait, keep_waiting=lambda: self.running)
        except Exception as exc:
            failure = f"cannot take the lock: {_one_line(exc)}"
            logger.error("%s of %s on %s: %s", "/".join(kinds), index.name, alias, failure)
            return [self._unrun(index, alias, kind, FAILED, failure) for kind in kinds]
        if not got:
            message = (
                f"another cleaner is working on {index.name} on {alias} (it holds "
                f"{lock.describe()}); skipped"
            )
            logger.warning("%s", message)
            return [self._unrun(index, alias, kind, SKIPPED, message) for kind in kinds]
        results: list[PassResult] = []
        try:
            self._close_abandoned_passes(index.name, alias)
            for kind in kinds:
                if not self.running:
                    break
                results.append(self._run_pass(index, alias, kind))
        except Exception as exc:  # the metadata database failed us before a pass began
            logger.exception("cleaning %s on %s failed", index.name, alias)
            results.append(self._unrun(index, alias, kinds[len(results)], FAILED, _one_line(exc)))
        finally:
            lock.release()
        return results

    @staticmethod
    def _unrun(index: Index, alias: str, kind: str, status: str, message: str) -> PassResult:
        return PassResult(index=index.name, shard=alias, kind=kind, status=status, message=message)

    def _run_pass(self, index: Index, alias: str, kind: str) -> PassResult:
        result = PassResult(index=index.name, shard=alias, kind=kind)
        started = time.monotonic()
        _close_old_connections()
        try:
            walk = {BACKFILL: self._backfill, REPAIR: self._repair, SWEEP: self._sweep}[kind]
            walk(index, alias, result)
        except Exception as exc:
            result.status, result.failure = FAILED, _one_line(exc)
            logger.exception("%s of %s on %s failed", kind, index.name, alias)
            _close_broken_connections()
        finally:
            result.seconds = time.monotonic() - started
            result.message = _message(result)
            try:
                self._save_record(result, final=True)
            except Exception:
                logger.exception(
                    "could not record the %s pass of %s on %s", kind, index.name, alias
                )
        busy = result.inserted or result.stale_removed or result.orphans_removed or result.errors
        level = logging.INFO if busy or result.status != DONE else logging.DEBUG
        if result.record is not None or result.status != DONE:
            logger.log(level, "%s", result.describe())
        return result

    # --- backfill -------------------------------------------------------------------------

    def _backfill(self, index: Index, alias: str, result: PassResult) -> None:
        from .models import CleanerCheckpoint

        checkpoint, _ = CleanerCheckpoint.objects.using(DEFAULT_DB_ALIAS).get_or_create(
            index_name=index.name, shard=alias
        )
        if checkpoint.done:
            return  # nothing to record: an earlier pass finished this shard
        self._start_record(result)
        source = index.source
        extra, extra_params = source.where()
        if checkpoint.target_added_id is None:
            target = (
                self._scalar(
                    alias,
                    f"SELECT MAX(added_id) FROM {source.table} WHERE 1 = 1{extra}",
                    extra_params,
                )
                or 0
            )
            checkpoint.target_added_id = target
            checkpoint.entities_total = self._scalar(
                alias,
                f"SELECT COUNT(*) FROM {source.table} WHERE added_id <= %s{extra}",
                [target, *extra_params],
            )
            checkpoint.save(update_fields=["target_added_id", "entities_total", "changed"])
        elif checkpoint.last_added_id:
            logger.info(
                "backfill of %s on %s resumes after added_id %d (%d of %s entities done)",
                index.name,
                alias,
                checkpoint.last_added_id,
                checkpoint.entities_done,
                checkpoint.entities_total,
            )
        with self._bar(
            f"backfill {index.name} {alias}",
            checkpoint.entities_total,
            checkpoint.entities_done,
            "entities",
        ) as bar:
            for batch in self._batches(
                lambda _previous: self._entities_after(
                    source, alias, checkpoint.last_added_id, checkpoint.target_added_id
                ),
                result,
            ):
                self._index_entities(index, alias, batch, result)
                checkpoint.last_added_id = batch[-1][0]
                checkpoint.entities_done += len(batch)
                checkpoint.save(update_fields=["last_added_id", "entities_done", "changed"])
                bar.update(len(batch))
        if result.status == DONE:
            checkpoint.done = True
            checkpoint.save(update_fields=["done", "changed"])

    def _index_entities(
        self, index: Index, alias: str, batch: list[EntityRow], result: PassResult
    ) -> None:
        rows: list[Row] = []
        seen: dict[bytes, Version] = {}
        for added_id, entity_id, updated, body in batch:
            properties = self._decode(alias, entity_id, body, result)
            if properties is None:
                continue
            try:
                implied = index.rows_for(properties)
            except IndexValueError as exc:
                self._note(result, f"entity {entity_id.hex()}: {exc}; it is not indexed")
                continue
            seen[entity_id] = (added_id, updated)
            rows.extend((index, values, entity_id) for values in implied)
        result.inserted += self._insert_checked(index, alias, rows, seen, result)

    # --- repair ---------------------------------------------------------------------------

    def _repair(self, index: Index, alias: str, result: PassResult) -> None:
        self._start_record(result)
        # Counting a big table takes a while: only for a progress bar someone watches.
        source = index.source
        extra, extra_params = source.where()
        total = (
            self._scalar(
                alias, f"SELECT COUNT(*) FROM {source.table} WHERE 1 = 1{extra}", extra_params
            )
            if self.progress
            else None
        )

        def fetch(previous: list[EntityRow] | None) -> list[EntityRow]:
            bound = None if previous is None else (previous[-1][2], previous[-1][0])
            return self._entities_newest_first(source, alias, bound)

        with self._bar(f"repair {index.name} {alias}", total, 0, "entities") as bar:
            for batch in self._batches(fetch, result):
                self._repair_entities(index, alias, batch, result)
                bar.update(len(batch))

    def _repair_entities(
        self, index: Index, alias: str, batch: list[EntityRow], result: PassResult
    ) -> None:
        properties: dict[bytes, Any] = {}
        seen: dict[bytes, Version] = {}
        for added_id, entity_id, updated, body in batch:
            decoded = self._decode(alias, entity_id, body, result)
            if decoded is not None:
                properties[entity_id] = decoded
                seen[entity_id] = (added_id, updated)
        diff = compare(index, properties)
        for entity_id in diff.unindexable:
            self._note(
                result, f"entity {entity_id.hex()}: its values do not fit index {index.name}"
            )
        missing = [(index, values, entity_id) for values, entity_id in diff.missing]
        result.inserted += self._insert_checked(index, alias, missing, seen, result)
        for entity_alias, candidates in diff.stale_by_entity_shard().items():
            result.stale_removed += writes.remove_stale(entity_alias, candidates, index.source)

    # --- sweep ----------------------------------------------------------------------------

    def _sweep(self, index: Index, alias: str, result: PassResult) -> None:
        self._start_record(result)
        table = shards.connection(alias).ops.quote_name(index.name)
        total = self._scalar(alias, f"SELECT COUNT(*) FROM {table}") if self.progress else None

        def fetch(previous: list[tuple[Any, ...]] | None) -> list[tuple[Any, ...]]:
            return self._index_rows_after(index, alias, None if previous is None else previous[-1])

        with self._bar(f"sweep {index.name} {alias}", total, 0, "rows") as bar:
            for batch in self._batches(fetch, result):
                self._sweep_rows(index, alias, batch, result)
                bar.update(len(batch))

    def _sweep_rows(
        self, index: Index, alias: str, batch: list[tuple[Any, ...]], result: PassResult
    ) -> None:
        found = self._current_entities(index.source, {row[-1] for row in batch})
        implied: dict[bytes, set[tuple[Any, ...]] | None] = {}
        orphans: dict[str, dict[bytes, set[tuple[Index, tuple[Any, ...]]]]] = _nested()
        stale: dict[str, dict[bytes, set[tuple[Index, tuple[Any, ...]]]]] = _nested()
        rehome: dict[str, list[Row]] = defaultdict(list)
        seen: dict[bytes, Version] = {}
        misplaced_orphans, misplaced_other = [], []
        for row in batch:
            values, entity_id = tuple(row[:-1]), row[-1]
            entity_alias = shards.alias_for(entity_id)
            home = shards.alias_for(index.routing_key(values[index.shard_position]))
            if entity_id not in found:
                if home == alias:
                    orphans[entity_alias][entity_id].add((index, values))
                else:
                    misplaced_orphans.append(row)
                continue
            if entity_id not in implied:
                added_id, updated, body = found[entity_id]
                implied[entity_id] = self._implied(index, entity_id, body, result)
                seen[entity_id] = (added_id, updated)
            rows = implied[entity_id]
            if home != alias:
                # Wrong shard (its buckets moved): deleting it is always safe once the entity's
                # row, if it still needs one, exists where queries look for it.
                misplaced_other.append(row)
                if rows is not None and values in rows:
                    rehome[entity_alias].append((index, values, entity_id))
            elif rows is not None and values not in rows:
                stale[entity_alias][entity_id].add((index, values))
            # rows is None: undecodable body; its rows are left alone (reported)
        for entity_alias, candidates in orphans.items():
            result.orphans_removed += writes.remove_stale(entity_alias, candidates, index.source)
        for entity_alias, candidates in stale.items():
            result.stale_removed += writes.remove_stale(entity_alias, candidates, index.source)
        for entity_alias, rows_to_add in rehome.items():
            result.inserted += self._insert_checked(index, entity_alias, rows_to_add, seen, result)
        result.orphans_removed += self._delete_on(index, alias, misplaced_orphans)
        result.stale_removed += self._delete_on(index, alias, misplaced_other)

    def _implied(
        self, index: Index, entity_id: bytes, body: bytes, result: PassResult
    ) -> set[tuple[Any, ...]] | None:
        properties = self._decode(shards.alias_for(entity_id), entity_id, body, result)
        if properties is None:
            return None
        try:
            return index.rows_for(properties)
        except IndexValueError:
            return set()  # the entity cannot be in this index: any row of it is stale

    # --- batches ----------------------------------------------------------------------------

    def _batches(
        self, fetch: Callable[[Any], list[Any]], result: PassResult
    ) -> Iterator[list[Any]]:
        """Batches from ``fetch(previous batch or None)`` until it returns none (``done``) or
        the cleaner is stopped (``interrupted``, after the current batch). Throttles and
        records between batches.

        Connections stay open from batch to batch (reconnecting per batch cost a fifth of a
        backfill's time); they are renewed between passes (:meth:`_run_pass`), so one that
        broke fails its pass only.
        """
        batch = None
        while True:
            if not self.running:
                result.status = INTERRUPTED
                return
            began = time.monotonic()
            batch = fetch(batch)
            if not batch:
                result.status = DONE
                return
            yield batch
            result.scanned += len(batch)
            self._save_record(result)
            pause = self.sleep
            if self.duty < 1:
                pause += (time.monotonic() - began) * (1 - self.duty) / self.duty
            if pause:
                self._stop.wait(pause)

    def _bar(self, desc: str, total: int | None, initial: int, unit: str) -> tqdm:
        return tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=f" {unit}",
            disable=not self.progress,
            file=self.progress_file,
            dynamic_ncols=True,
            mininterval=0.5,
        )

    # --- SQL: reads -------------------------------------------------------------------------

    def _scalar(self, alias: str, sql: str, params: Sequence[Any] = ()) -> Any:
        with shards.errors_named(alias), shards.connection(alias).cursor() as cursor:
            cursor.execute(sql, list(params))
            return cursor.fetchone()[0]

    def _entity_rows(self, alias: str, sql: str, params: Sequence[Any]) -> list[EntityRow]:
        with shards.errors_named(alias), shards.connection(alias).cursor() as cursor:
            cursor.execute(sql, list(params))
            return [
                (added_id, bytes(entity_id), updated, None if body is None else bytes(body))
                for added_id, entity_id, updated, body in cursor.fetchall()
            ]

    def _entities_after(self, source: Source, alias: str, after: int, upto: int) -> list[EntityRow]:
        extra, extra_params = source.where()
        return self._entity_rows(
            alias,
            f"SELECT added_id, {source.id_column}, {UPDATED}, body FROM {source.table} "
            f"WHERE added_id > %s AND added_id <= %s{extra} "
            f"ORDER BY added_id LIMIT {self.batch_size}",
            [after, upto, *extra_params],
        )

    def _entities_newest_first(
        self, source: Source, alias: str, bound: tuple[Any, int] | None
    ) -> list[EntityRow]:
        extra, params = source.where()
        where = f"WHERE 1 = 1{extra} "
        if bound is not None:
            updated = _as_param(alias, bound[0])
            # The leading "<=" lets the server seek the updated index; the OR breaks ties.
            where += "AND updated <= %s AND (updated < %s OR added_id < %s) "
            params = [*params, updated, updated, bound[1]]
        return self._entity_rows(
            alias,
            f"SELECT added_id, {source.id_column}, {UPDATED}, body FROM {source.table} {where}"
            f"ORDER BY updated DESC, added_id DESC LIMIT {self.batch_size}",
            params,
        )

    def _index_rows_after(
        self, index: Index, alias: str, last: tuple[Any, ...] | None
    ) -> list[tuple[Any, ...]]:
        conn = shards.connection(alias)
        columns = [conn.ops.quote_name(c) for c in (*index.properties, "entity_id")]
        where, params = "", []
        if last is not None:
            after, params = _keyset_after(columns, last)
            where = f" WHERE {after}"
        sql = (
            f"SELECT {', '.join(columns)} FROM {conn.ops.quote_name(index.name)}{where} "
            f"ORDER BY {', '.join(columns)} LIMIT {self.batch_size}"
        )
        with shards.errors_named(alias), conn.cursor() as cursor:
            cursor.execute(sql, params)
            return [tuple(_plain(v) for v in row) for row in cursor.fetchall()]

    def _current_entities(
        self, source: Source, ids: Iterable[bytes]
    ) -> dict[bytes, tuple[int, Any, bytes | None]]:
        """``{id: (added_id, updated, body)}`` of the ids that exist, read (unlocked)."""
        extra, extra_params = source.where()
        by_alias: dict[str, list[bytes]] = defaultdict(list)
        for entity_id in ids:
            by_alias[shards.alias_for(entity_id)].append(entity_id)
        found: dict[bytes, tuple[int, Any, bytes | None]] = {}
        key = source.id_column
        for alias, alias_ids in by_alias.items():
            for chunk in _chunks(alias_ids, 500):
                marks = ", ".join(["%s"] * len(chunk))
                with shards.errors_named(alias), shards.connection(alias).cursor() as cursor:
                    cursor.execute(
                        f"SELECT added_id, {key}, {UPDATED}, body FROM {source.table} "
                        f"WHERE {key} IN ({marks}){extra}",
                        [*chunk, *extra_params],
                    )
                    for added_id, entity_id, updated, body in cursor.fetchall():
                        found[bytes(entity_id)] = (
                            added_id,
                            updated,
                            None if body is None else bytes(body),
                        )
        return found

    def _current_versions(
        self, source: Source, alias: str, added_ids: list[int]
    ) -> dict[bytes, Version]:
        """``{id: (added_id, updated)}`` of these rows now: a primary-key range when they are
        (nearly) contiguous, as a backfill batch is, else primary-key lookups."""
        added_ids = sorted(set(added_ids))
        found: dict[bytes, Version] = {}
        if not added_ids:
            return found
        low, high = added_ids[0], added_ids[-1]
        if high - low < 2 * len(added_ids):
            queries = [("added_id BETWEEN %s AND %s", [low, high])]
        else:
            queries = [
                (f"added_id IN ({', '.join(['%s'] * len(chunk))})", list(chunk))
                for chunk in _chunks(added_ids, 500)
            ]
        extra, extra_params = source.where()
        with shards.errors_named(alias), shards.connection(alias).cursor() as cursor:
            for where, params in queries:
                cursor.execute(
                    f"SELECT {source.id_column}, added_id, {UPDATED} FROM {source.table} "
                    f"WHERE {where}{extra}",
                    [*params, *extra_params],
                )
                found.update((bytes(i), (a, u)) for i, a, u in cursor.fetchall())
        return found

    # --- SQL: writes ------------------------------------------------------------------------

    def _write(self, operation: Callable[[], Any]) -> Any:
        """Run index writes briefly under the store's write lock (it serializes SQLite shards),
        retried after a deadlock. On SQLite the batch is one transaction per shard file: index
        rows share Django's connection there, and a commit per row would be slow."""
        sqlite_aliases = [a for a in shards.shard_aliases() if shards.vendor(a) == "sqlite"]

        def attempt() -> Any:
            with contextlib.ExitStack() as stack:
                for alias in sqlite_aliases:
                    stack.enter_context(transaction.atomic(using=alias))
                return operation()

        with shards.write_lock():
            return shards.with_retries(attempt)

    def _insert_checked(
        self,
        index: Index,
        alias: str,
        rows: list[Row],
        seen: dict[bytes, Version],
        result: PassResult,
    ) -> int:
        """Insert rows computed from unlocked reads of entities on ``alias`` (``seen``: the
        version each was read at); then hand the rows of every entity that changed since, or is
        gone, to ``remove_stale``.

        A writer that changed the entity before our insert may already have removed the old
        row, which our insert would then bring back; one that changes it after our re-read
        removes the row itself. Returns the number of rows written and not taken back.
        """
        if not rows:
            return 0
        written = self._insert(index, rows, result)
        if not written:
            return 0
        ids = {entity_id for _, _, entity_id in written}
        now = self._current_versions(index.source, alias, [seen[entity_id][0] for entity_id in ids])
        changed: dict[bytes, set[tuple[Index, tuple[Any, ...]]]] = defaultdict(set)
        for row_index, values, entity_id in written:
            if now.get(entity_id) != seen[entity_id]:
                changed[entity_id].add((row_index, values))
        taken_back = writes.remove_stale(alias, changed, index.source) if changed else 0
        return len(written) - taken_back

    def _insert(self, index: Index, rows: list[Row], result: PassResult) -> list[Row]:
        if not index.unique:
            for chunk in _chunks(rows, INSERT_CHUNK):
                self._write(lambda chunk=chunk: writes.add_index_rows(chunk))
            return rows
        # A unique claim can collide with another entity's: report that entity, go on.
        written = []
        for row in rows:
            try:
                self._write(lambda row=row: writes.add_index_rows([row]))
            except UniqueViolation as exc:
                self._note(result, f"entity {row[2].hex()} is not indexed: {exc}")
                continue
            written.append(row)
        return written

    def _delete_on(self, index: Index, alias: str, rows: list[tuple[Any, ...]]) -> int:
        """Delete these exact rows from the index table on ``alias`` (not where they route)."""
        if not rows:
            return 0
        conn = shards.index_connection(alias)
        quote = conn.ops.quote_name
        columns = ", ".join(quote(c) for c in (*index.properties, "entity_id"))
        one = "(" + ", ".join(["%s"] * (len(index.properties) + 1)) + ")"

        def delete() -> int:
            deleted = 0
            with shards.errors_named(alias), conn.cursor() as cursor:
                for chunk in _chunks(rows, DELETE_CHUNK):
                    cursor.execute(
                        f"DELETE FROM {quote(index.name)} WHERE ({columns}) IN "
                        f"({', '.join([one] * len(chunk))})",
                        [value for row in chunk for value in row],
                    )
                    deleted += cursor.rowcount
            return deleted

        return self._write(delete)

    # --- reporting --------------------------------------------------------------------------

    def _decode(
        self, alias: str, entity_id: bytes, body: bytes | None, result: PassResult
    ) -> dict[str, Any] | None:
        if body is None:  # a cell version without a body: it implies no index row
            return {}
        try:
            return decode_body(body)
        except CorruptBody as exc:
            self._note(
                result,
                f"entity {entity_id.hex()} on {alias} has a corrupt body ({exc}); skipped",
            )
            return None

    def _note(self, result: PassResult, problem: str) -> None:
        result.errors += 1
        if len(result.notes) < MAX_NOTES:
            result.notes.append(problem)
        logger.warning("%s (%s of %s on %s)", problem, result.kind, result.index, result.shard)

    def _start_record(self, result: PassResult) -> None:
        from .models import CleanerPass

        result.record = CleanerPass.objects.using(DEFAULT_DB_ALIAS).create(
            index_name=result.index, shard=result.shard, kind=result.kind, status="running"
        )
        result.saved_at = time.monotonic()

    def _save_record(self, result: PassResult, final: bool = False) -> None:
        record = result.record
        if record is None:
            return
        if not final and time.monotonic() - result.saved_at < RECORD_EVERY_SECONDS:
            return
        record.entities_scanned = result.scanned
        record.rows_inserted = result.inserted
        record.stale_removed = result.stale_removed
        record.orphans_removed = result.orphans_removed
        record.errors = result.errors
        fields = ["entities_scanned", "rows_inserted", "stale_removed", "orphans_removed"]
        fields.append("errors")
        if final:
            record.status = result.status
            record.finished = timezone.now()
            record.message = result.message
            fields += ["status", "finished", "message"]
        record.save(using=DEFAULT_DB_ALIAS, update_fields=fields)
        result.saved_at = time.monotonic()

    def _close_abandoned_passes(self, index_name: str, alias: str) -> None:
        """Passes still ``running`` while we hold the lock belong to a cleaner that died."""
        from .models import CleanerPass

        CleanerPass.objects.using(DEFAULT_DB_ALIAS).filter(
            index_name=index_name, shard=alias, status="running"
        ).update(
            status=INTERRUPTED,
            finished=timezone.now(),
            message="its cleaner stopped without finishing (killed?)",
        )


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _resolve_indexes(names: Sequence[str] | None) -> list[Index]:
    if names is None:
        return registry.valid()
    chosen = []
    for name in dict.fromkeys(names):
        if name not in registry:
            if name in lifecycle.retired_names():
                raise ConfigurationError(
                    f"index {name!r} is retired (no longer declared), so the cleaner does not "
                    f"maintain it; drop its tables with `manage.py dropindex {name}`"
                )
            declared = ", ".join(sorted(i.name for i in registry.all())) or "none"
            raise ConfigurationError(f"no index {name!r} is declared; declared indexes: {declared}")
        index = registry.get(name)
        index.require_valid()
        chosen.append(index)
    return chosen


def _resolve_aliases(aliases: Sequence[str] | None) -> list[str]:
    if aliases is None:
        return list(shards.shard_aliases())
    for alias in aliases:
        shards.check_alias(alias)
    return list(dict.fromkeys(aliases))


def _close_old_connections() -> None:
    # Django closes connections it considers obsolete (CONN_MAX_AGE) or broken; never do that
    # under a caller's open transaction.
    if not any(c.in_atomic_block for c in connections.all(initialized_only=True)):
        close_old_connections()


def _close_broken_connections() -> None:
    """After a failed pass: the index writers, and any connection that errored and no longer
    answers, are opened afresh by the next pass."""
    shards.close_index_connections()
    for conn in connections.all(initialized_only=True):
        if conn.errors_occurred and not conn.in_atomic_block and not conn.is_usable():
            conn.close()


def _as_param(alias: str, updated: Any) -> Any:
    """``updated`` as read back, as a query parameter that compares like the stored value."""
    if hasattr(updated, "year"):
        return shards.connection(alias).ops.adapt_datetimefield_value(updated)
    return updated


def _keyset_after(columns: list[str], last: tuple[Any, ...]) -> tuple[str, list[Any]]:
    """``(c1, c2, ...) > (v1, v2, ...)`` spelled out so every backend can seek with it."""
    ors, params = [], []
    for n in range(len(columns)):
        parts = [f"{columns[m]} = %s" for m in range(n)] + [f"{columns[n]} > %s"]
        ors.append("(" + " AND ".join(parts) + ")")
        params.extend(last[: n + 1])
    return f"{columns[0]} >= %s AND ({' OR '.join(ors)})", [last[0], *params]


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _nested() -> dict[str, dict[bytes, set[tuple[Index, tuple[Any, ...]]]]]:
    return defaultdict(lambda: defaultdict(set))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _message(result: PassResult) -> str:
    if result.status == SKIPPED:
        return result.message
    parts = [result.failure] if result.failure else []
    parts += result.notes
    if result.errors > len(result.notes):
        parts.append(f"... and {result.errors - len(result.notes)} more problems")
    return "; ".join(parts)
