"""The cleaner's run loop: rounds over the chosen indexes and shards, one cleaner per (index,
shard) at a time (:mod:`..guards.server_lock`), throttled batches, progress bars, and a
graceful stop on SIGINT/SIGTERM. The passes themselves are in :mod:`.passes`."""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from tqdm import tqdm

from ..config.indexes import Index, registry
from ..config.metadata import CleanerCheckpoint
from ..exceptions import ConfigurationError
from ..guards.server_lock import ServerLock
from ..guards.throttle import LatencyProbe, Throttle
from ..tables import lifecycle
from ..topology import servers, shards
from ..topology.shards import resolve_aliases
from ..values import bounds
from .passes import backfill, repair, sweep
from .records import (
    BACKFILL,
    DONE,
    FAILED,
    INTERRUPTED,
    REPAIR,
    SKIPPED,
    SWEEP,
    PassResult,
    Summary,
    close_abandoned,
    one_line,
    save_record,
)

logger = logging.getLogger("schemaless_store.cleaner")

DEFAULT_BATCH_SIZE = 2000
DEFAULT_INTERVAL = 60.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WALKS = {BACKFILL: backfill, REPAIR: repair, SWEEP: sweep}


class Cleaner:
    """Backfills and repairs indexes; ``run()`` until done (``once``) or until stopped.

    ``indexes`` and ``shards`` (names and aliases) default to every declared index and every
    shard. ``sleep``, ``duty`` and ``max_latency`` are its
    :class:`~schemaless_store.guards.throttle.Throttle` (a fixed pause after each batch; at most
    that
    share of wall time spent working; a hold while the shard servers answer a probe slower
    than ``max_latency`` seconds).
    ``interval`` is the pause between rounds when not ``once``, ``lock_wait`` is how long to
    wait for another cleaner's lock before skipping. SIGINT/SIGTERM (when run in the main
    thread) or :meth:`stop` finish the current batch and end the run.
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
        max_latency: float | None = None,
        interval: float = DEFAULT_INTERVAL,
        lock_wait: float = 0.0,
        progress: bool = False,
        progress_file: TextIO | None = None,
    ) -> None:
        if not bounds.whole(batch_size):
            raise ValueError(f"batch_size must be a whole number of at least 1, not {batch_size!r}")
        for name, value in (("interval", interval), ("lock_wait", lock_wait)):
            if not bounds.number(value, 0):
                raise ValueError(f"{name} must be a number of seconds (0 or more), not {value!r}")
        self.throttle = Throttle(sleep, duty, max_latency)
        self._latency: LatencyProbe | None = None  # the probe thread, while run() runs
        self.indexes = _resolve_indexes(indexes)
        self.aliases = resolve_aliases(shards)
        self.once = once
        self.batch_size = batch_size
        self.interval = float(interval)
        self.lock_wait = float(lock_wait)
        self.progress = progress
        self.progress_file = progress_file
        self._stop = threading.Event()
        self._signalled = False  # set by the signal handler, which must not take a lock
        self._lock: ServerLock | None = None  # the (index, shard) lock of the passes running
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
        if self.throttle.max_latency is not None:
            self._latency = LatencyProbe(
                lambda: servers.probe_latency(shards.shard_aliases()), on_exit=connections.close_all
            ).start()
        try:
            while self.running:
                self.run_round(summary)
                if self.once:
                    break
                logger.debug("round done; next one in %.0fs", self.interval)
                self._stop.wait(self.interval)
        finally:
            if self._latency is not None:
                self._latency.stop()
                self._latency = None
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
            problem = f"cannot read the index states: {one_line(exc)}"
            logger.exception("%s", problem)
            summary.problems.append(problem)
            return summary
        for index in self.indexes:
            if not self.running:
                break
            try:
                self._clean_index(index, states.get(index.name), summary)
            except Exception as exc:  # outside any pass: checkpoints or states unreadable
                problem = f"cleaning {index.name} failed: {one_line(exc)}"
                logger.exception("%s", problem)
                summary.problems.append(problem)
        return summary

    def _handle_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        # A handler runs in the main thread between two bytecodes, perhaps while that thread
        # holds a lock: the stop event's own, inside the throttle's Event.wait(), or
        # threading's, inside a Thread.start(). So the handler takes no lock: it sets a flag
        # and puts the signal on a SimpleQueue (documented as safe in signal handlers), and
        # this thread sets the event, which wakes a wait in progress.
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
                summary.add(self.run_passes(index, alias, [BACKFILL]))
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
            summary.add(self.run_passes(index, alias, [REPAIR, SWEEP]))

    def _shards_to_backfill(self, index: Index) -> list[str]:
        done = set(
            CleanerCheckpoint.objects.using(DEFAULT_DB_ALIAS)
            .filter(index_name=index.name, done=True)
            .values_list("shard", flat=True)
        )
        return [alias for alias in shards.shard_aliases() if alias not in done]

    def run_passes(self, index: Index, alias: str, kinds: Sequence[str]) -> list[PassResult]:
        """Take the (index, shard) lock, run the passes (``backfill``, ``repair``, ``sweep``),
        release it."""
        lock = ServerLock(index.name, alias)
        try:
            got = lock.acquire(self.lock_wait, keep_waiting=lambda: self.running)
        except Exception as exc:
            failure = f"cannot take the lock: {one_line(exc)}"
            logger.error("%s of %s on %s: %s", "/".join(kinds), index.name, alias, failure)
            return [_unrun(index, alias, kind, FAILED, failure) for kind in kinds]
        if not got:
            message = (
                f"another cleaner is working on {index.name} on {alias} (it holds "
                f"{lock.describe()}); skipped"
            )
            logger.warning("%s", message)
            return [_unrun(index, alias, kind, SKIPPED, message) for kind in kinds]
        results: list[PassResult] = []
        self._lock = lock
        try:
            close_abandoned(index.name, alias)
            for kind in kinds:
                if not self.running or not lock.held:
                    break
                results.append(self._run_pass(index, alias, kind))
        except Exception as exc:  # the metadata database failed us before a pass began
            logger.exception("cleaning %s on %s failed", index.name, alias)
            results.append(_unrun(index, alias, kinds[len(results)], FAILED, one_line(exc)))
        finally:
            self._lock = None
            lock.release()
        return results

    def _run_pass(self, index: Index, alias: str, kind: str) -> PassResult:
        result = PassResult(index=index.name, shard=alias, kind=kind)
        started = time.monotonic()
        _close_old_connections()
        try:
            _WALKS[kind](self, index, alias, result)
        except Exception as exc:
            result.status, result.failure = FAILED, one_line(exc)
            logger.exception("%s of %s on %s failed", kind, index.name, alias)
            _close_broken_connections()
        finally:
            result.seconds = time.monotonic() - started
            result.message = result.final_message()
            try:
                save_record(result, final=True)
            except Exception:
                logger.exception(
                    "could not record the %s pass of %s on %s", kind, index.name, alias
                )
        busy = result.inserted or result.stale_removed or result.orphans_removed or result.errors
        level = logging.INFO if busy or result.status != DONE else logging.DEBUG
        if result.record is not None or result.status != DONE:
            logger.log(level, "%s", result.describe())
        return result

    # --- what the passes use ------------------------------------------------------------------

    def batches(self, fetch: Callable[[Any], list[Any]], result: PassResult) -> Iterator[list[Any]]:
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
            if self._lock is not None and not self._lock.held:
                # A Galera lease that expired or was taken (guards/server_lock.py): another
                # cleaner may be working here now; stop before the next batch.
                result.status, result.failure = FAILED, f"lost {self._lock.describe()}"
                return
            began = time.monotonic()
            batch = fetch(batch)
            if not batch:
                result.status = DONE
                return
            yield batch
            result.scanned += len(batch)
            save_record(result)
            self.throttle.after(began, self._stop.wait, self._probe)

    def _probe(self) -> float:
        """How busy the shard servers are (a pass writes index rows to any of them): the
        recent answers of the probe thread :meth:`run` keeps, or one probe now."""
        if self._latency is not None:
            return self._latency.recent()
        return servers.probe_latency(shards.shard_aliases())

    def bar(self, desc: str, total: int | None, initial: int, unit: str) -> tqdm:
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


def _unrun(index: Index, alias: str, kind: str, status: str, message: str) -> PassResult:
    return PassResult(index=index.name, shard=alias, kind=kind, status=status, message=message)


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
