"""Moving buckets to another shard while writers and readers run (docs/resharding.md).

A move goes through phases, each recorded in its :class:`BucketMove` row before the next
starts, and each safe to run again, so a killed mover resumes where it was:

1. **copying**: the target marks the buckets ``incoming`` (it serves none of them) and drops
   any rows of them a failed earlier attempt left; each source gets change-capture triggers
   (:mod:`..tables.move_log`), each proven by a probe write; then every table of each source
   is walked in key order and the rows of the moving buckets are written to the target,
   throttled as the cleaner is (:mod:`..guards.throttle`), with a checkpoint per batch.
2. **catching up**: the logged changes are replayed (the target's rows of each changed key
   made what the source's are) until a pass finds few.
3. **fenced**: each source marks the buckets ``fenced`` and, on MariaDB, ends every other
   session on its database, of any user (:mod:`..guards.fence`; once per move): a
   transaction begun before cannot commit, and every later write to the buckets is refused
   (writers wait for the flip); the last changes are replayed.
4. **flipped**: the sources mark the buckets ``gone``, the target ``owned``, and a new map
   version names the target. Writers waiting since the fence go on, on the target.
5. **verify** (:mod:`.verification`): a change logged on a source since the final replay
   escaped the fence: the move is **held**, the sources' copies kept, until the operator
   releases it (:meth:`Mover.release`). Otherwise rows and checksums of the moved buckets are
   compared between the sources and the target as it was at the flip (:mod:`.at_flip`; a
   resumed mover: the target now, each row its owner changed since put back as the target's
   triggers recorded it). The verdict is saved before the sources' triggers and logs are
   dropped (a held move keeps them).
6. **cleaning**: the logs are dropped if they are still there, then the sources' copies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..config import conf
from ..config.metadata import BucketMove, ShardMap
from ..exceptions import MoveRefused
from ..guards import fence
from ..guards.throttle import LatencyProbe, Throttle
from ..tables import buckets as bucket_table
from ..tables import move_log as capture
from ..tables import pre_images
from ..tables.capture_probe import prove
from ..tables.moved_rows import (
    moved_tables,
    snapshot,
)
from ..topology import bucket_map, servers
from ..topology.write_lock import write_lock
from .at_flip import AtFlip
from .copying import RowMoves
from .plan import COPY_BATCH, from_ranges
from .verification import Verdict, Verification, failed_message, unjudged_message

logger = logging.getLogger("schemaless_store.moves")

# A catch-up pass that handles fewer log entries than this ends the catching up: the fence
# replays the rest while writes to the buckets wait.
CONVERGED = 500
# Keys of a table a warning names (the move's record keeps up to verification.RECORDED).
# Tables copied at the same time (MariaDB): two measured faster than one on a 2-core machine
# (docs/performance-history.md).
COPY_WORKERS = 2


class Mover(RowMoves):
    """Runs one recorded move through its phases (see the module docs)."""

    def __init__(
        self,
        move: BucketMove,
        *,
        batch: int = COPY_BATCH,
        throttle: Throttle | None = None,
        workers: int = COPY_WORKERS,
        report: Callable[[str, int], None] | None = None,
        phase: Callable[[str], None] | None = None,
    ) -> None:
        self.move = move
        # Rows per copy transaction: under a Galera write-set limit on either side.
        limits = [servers.write_set_limit(a) for a in (move.target, *move.sources)]
        self.batch = min([batch, *(limit for limit in limits if limit)])
        self.throttle = throttle or Throttle()
        self.workers = workers
        self._latency: LatencyProbe | None = None  # the probe thread, while run() runs
        self._record = threading.Lock()  # the record's checkpoints and counts, across copies
        self._stopping = threading.Event()
        self.report = report or (lambda _what, _rows: None)
        # Called as each phase starts: copy, catch-up, flip, verify, delete (progress only).
        self.phase = phase or (lambda _name: None)
        self.buckets = set(from_ranges(move.buckets))
        self.sources = {a: set(from_ranges(s)) for a, s in move.sources.items()}
        self.tables = moved_tables()
        self.pause = 0.0
        self._fenced = False  # this mover ended the sources' sessions (one fence per move)
        self._proven = False  # this mover proved the sources' triggers by a probe write
        self._target_proven = False  # ... and the target's (pre-images)
        self._saved = 0.0  # when the record was last saved (time.monotonic())
        self._triggers_checked = 0.0  # ... and the tables' cached triggers checked
        # The target as it was at the flip, for the verification (None after a resume: the
        # target's pre-images stand for it).
        self.snapshot: BaseDatabaseWrapper | None = None

    # --- the phases ----------------------------------------------------------------------

    def run(self) -> BucketMove:
        steps: dict[str, Callable[[], None]] = {
            "copying": self.copy,
            "catching up": self.catch_up,
            "fenced": self.flip,
            "flipped": self.verify,
            "cleaning": self.clean,
        }
        if self.move.phase in ("held", "failed"):  # the operator compares, then releases it
            raise MoveRefused(self.move.message)
        if self.throttle.max_latency is not None:
            aliases = [*self.sources, self.move.target]
            self._latency = LatencyProbe(
                lambda: servers.probe_latency(aliases), on_exit=connections.close_all
            ).start()
        try:
            # A mover resumed: a KILL may have cut a parse of its triggers (its own DDL's).
            self._reload_triggers(always=bool(self.move.checkpoints))
            while self.move.phase in steps:
                steps[self.move.phase]()
        finally:
            if self._latency is not None:
                self._latency.stop()
                self._latency = None
        return self.move

    def copy(self) -> None:
        self.phase("copy")
        target = self.move.target
        if not self.move.checkpoints.get("prepared"):
            with write_lock():
                bucket_table.set_states(target, sorted(self.buckets), bucket_table.INCOMING)
            self._purge(target, "purged on target")
            for source in self.sources:
                capture.install(source, self.tables)
            # Readers confirm their reads of these buckets with the shard from now on; the flip
            # waits until every process has read this version (a read bound after it).
            stored = bucket_map.stored()
            bucket_map.publish(
                stored.owners,
                note=f"move #{self.move.pk}: buckets moving to {target}",
                moving=stored.moving | self.buckets,
            )
            self._save(
                checkpoints={**self.move.checkpoints, "prepared": True, "marked_at": time.time()}
            )
            self._proven = True  # install proved each trigger by a probe write
        self._prove_capture()
        self._copy_all()
        self._save(phase="catching up")

    def catch_up(self) -> None:
        self.phase("catch-up")
        self._prove_capture()
        if self.move.phase == "copying":
            return  # copied again: run() goes on from there
        while True:
            handled = sum(self._replay(source) for source in self.sources)
            if handled < CONVERGED:
                break
        # The target's pre-image triggers, from before the fence (their DDL waits for the
        # target's open transactions: never in the writers' pause); emptied at the flip.
        capture.install(self.move.target, self.tables, pre_images=True)
        self._target_proven = True
        marked_at = float(self.move.checkpoints.get("marked_at", 0.0))
        wait = bucket_map.read_bound(conf.get().map_max_age) - (time.time() - marked_at)
        if wait > 0:  # a copy this short: let every process see the moving mark first
            time.sleep(wait)
        self.phase("flip")
        pre_images.clear(self.move.target, self.tables, self.batch)  # the flip's clear: the rest
        started = time.monotonic()
        self._fence()
        self._save(phase="fenced", checkpoints={**self.move.checkpoints, "fenced_at": time.time()})
        self.pause = time.monotonic() - started
        self.flip()

    def flip(self) -> None:
        """Replay what is left (writes to the buckets are refused now), then hand them over."""
        self.phase("flip")
        started = time.monotonic()
        if self._published():  # resumed after the flip was published: never flip again
            return
        self._prove_capture()
        if not self._fenced:  # a mover resumed after the fence: it may not have happened
            self._fence()
        while any(self._replay(source) for source in self.sources):
            pass
        buckets = sorted(self.buckets)
        # The target records each row's first change from here to the verdict, for a mover
        # resumed after the flip (its snapshot gone). A resumed mover proves the triggers
        # again, as the sources'; a move caught up by an older mover has none yet.
        target = self.move.target
        if not self._target_proven and (
            not capture.pre_images_kept(target, self.tables)
            or prove(target, self.tables, pre_images=True)
        ):
            capture.install(target, self.tables, pre_images=True)
        pre_images.clear(target, self.tables, self.batch)  # the replays', other buckets' writes
        self.snapshot = snapshot(target)  # nothing has written them there yet
        with write_lock():
            for source in self.sources:
                bucket_table.set_states(source, sorted(self.sources[source]), bucket_table.GONE)
            bucket_table.set_states(self.move.target, buckets, bucket_table.OWNED)
        stored = bucket_map.stored()
        owners = list(stored.owners)
        for number in buckets:
            owners[number] = self.move.target
        published = bucket_map.publish(
            owners,
            note=f"move #{self.move.pk} to {self.move.target}",
            moving=stored.moving - self.buckets,
        )
        fenced_at = self.move.checkpoints.get("fenced_at")
        pause = self.pause + (time.monotonic() - started)
        if fenced_at is not None:
            pause = max(pause, time.time() - float(fenced_at))
        self._save(
            phase="flipped",
            flipped=timezone.now(),
            longest_pause=pause,
            checkpoints={**self.move.checkpoints, "map_version": published.version},
        )

    def _prove_capture(self) -> None:
        """Once per mover, before its copy or replays count: prove the sources' triggers by a
        probe write (:func:`..tables.move_log.install`, which recreates one that logs
        nothing or refuses). A trigger recreated on a resumed move may have missed changes
        since the copy began: before the fence the copy starts again (the target's copies
        purged); once fenced (the buckets refused to writers) the move is refused, to be
        aborted and run again."""
        if self._proven:
            return
        # What logged nothing is recorded before it is repaired: a mover killed once it has
        # recreated a trigger, but before it started the copy again, would otherwise find
        # every trigger logging when resumed, and take a copy that missed changes for whole.
        repaired = list(self.move.checkpoints.get("capture lost", []))
        if not repaired:
            repaired = [
                name for source in self.sources for name in capture.silent(source, self.tables)
            ]
            if repaired:
                self._save(checkpoints={**self.move.checkpoints, "capture lost": repaired})
        if repaired:
            for source in self.sources:
                capture.install(source, self.tables)
        self._proven = True
        if not repaired:
            return
        if self.move.phase == "fenced":
            raise MoveRefused(
                f"move #{self.move.pk}: the change-capture triggers {', '.join(repaired)} "
                "logged nothing when this mover resumed (they were created again), so changes "
                "since the copy began may be missing from the target. Next: run movebuckets "
                "--abort, then the same move again (docs/resharding.md#left-over-triggers)"
            )
        logger.warning(
            "move #%s: triggers %s logged nothing and were created again; copying again",
            self.move.pk,
            ", ".join(repaired),
        )
        self._purge(self.move.target, "purged on target")
        kept = {  # not what was copied, nor the lost capture (the copy starts again)
            k: v for k, v in self.move.checkpoints.items() if "/" not in k and k != "capture lost"
        }
        self._save(phase="copying", checkpoints=kept)

    def _published(self) -> bool:
        """Whether a flip of this move was published already (its mover died before it
        recorded the phase): then the target has served writes by the new map, so neither the
        flip (its snapshot, its replays of the sources' logs) is made again; the phase is
        recorded, with the flip's time and pause as the published version says."""
        stored = bucket_map.stored()
        if not self._flip_published(stored):
            return False
        note = f"move #{self.move.pk} to {self.move.target}"
        row = ShardMap.objects.filter(note=note).order_by("version").first()
        flipped = row.created if row is not None else timezone.now()
        fenced_at = self.move.checkpoints.get("fenced_at")
        pause = self.move.longest_pause
        if fenced_at is not None:
            pause = max(0.0, flipped.timestamp() - float(fenced_at))
        logger.warning("move #%s: resumed after its flip was published", self.move.pk)
        self._save(
            phase="flipped",
            flipped=flipped,
            longest_pause=pause,
            checkpoints={**self.move.checkpoints, "map_version": stored.version},
        )
        return True

    def _flip_published(self, stored: Any) -> bool:
        """Whether the map ``stored`` names the target for every moved bucket: the plan
        refuses buckets the target owns, so only this move's flip can have published that."""
        return all(stored.owners[number] == self.move.target for number in self.buckets)

    def verify(self) -> None:
        """Judge the changes logged on the sources since the final replay and compare the
        moved rows with the target's at the flip (:mod:`.verification`; a resumed mover has
        no snapshot of the flip: it reads the target now with the pre-images its triggers
        recorded since, :mod:`.at_flip`). An escaped write holds the move: the sources'
        copies are kept and the operator told what to do."""
        self.phase("verify")
        self._reload_triggers()  # the target's writers since the flip: none held up by a KILL
        snapshot, self.snapshot = self.snapshot, None
        target = self.move.target
        at_flip: AtFlip | None = None
        try:
            self._require_logs()
            if snapshot is not None:
                at_flip = AtFlip(target, self.buckets, snapshot)
            elif capture.pre_images_kept(target, self.tables):
                at_flip = AtFlip.resumed(target, self.tables, self.buckets, self.batch)
            check = Verification(self.tables, self.sources, target, self.buckets, self.batch)
            verdict = check.run(at_flip)
        finally:
            if at_flip is not None:
                at_flip.close()
            elif snapshot is not None:
                snapshot.close()
        # The verdict is saved before any log is dropped, the target's pre-images too: a
        # mover that dies in between resumes past the verification, never into one with no
        # logs to judge or compare by (with neither the snapshot nor the pre-images, a
        # resumed mover would compare nothing and pass a copy that differs).
        counts = {**self.move.counts, "changed after the flip": verdict.changed}
        if verdict.escaped:
            self._hold(verdict, counts)  # the logs stay until the operator releases it
        compared = verdict.compared
        if compared and verdict.problems:
            problems = "; ".join(verdict.problems)
            self._save(phase="failed", message=failed_message(self.move, problems))
            self._drop_logs()
            raise MoveRefused(
                f"move #{self.move.pk}: the copies differ after the flip ({problems});"
                " the sources' copies are kept"
            )
        verified = True if compared else None
        self._save(phase="cleaning", counts={**counts, "verified": verified})
        self._drop_logs()

    def _require_logs(self) -> None:
        """Hold the move if a source's log is gone unjudged (only a saved verdict drops one):
        writes after the flip cannot be judged, so the sources' copies are kept."""
        missing = [source for source in self.sources if not capture.installed(source)]
        if not missing:
            return
        message = unjudged_message(self.move.pk, missing, self.move.target)
        self._save(phase="held", message=message, counts={**self.move.counts, "verified": False})
        raise MoveRefused(message)

    def _drop_logs(self) -> None:
        """Drop the sources' and the target's triggers and change logs (idempotent)."""
        for alias in (*self.sources, self.move.target):
            capture.remove(alias, self.tables)

    def _hold(self, verdict: Verdict, counts: dict[str, Any]) -> None:
        """Record the escaped writes and stop: the sources' copies are kept."""
        message = verdict.held_message(self.move.pk, list(self.sources), self.move.target)
        self._save(
            phase="held",
            message=message,
            counts={**counts, "verified": False, "escaped": verdict.escaped},
        )
        capture.remove(self.move.target, self.tables)  # judged: its writes log no more
        raise MoveRefused(message)

    def release(self) -> BucketMove:
        """Finish a held or failed move once the operator has dealt with its keys: delete
        the sources' copies (the cleaning phase)."""
        if self.move.phase not in ("held", "failed"):
            raise MoveRefused(
                f"move #{self.move.pk} is {self.move.phase}, not held or failed: only a move "
                "that writes escaped or whose copies differ is released"
            )
        self._save(phase="cleaning", message=self.move.message + " [released by the operator]")
        return self.run()

    def clean(self) -> None:
        """Delete the sources' copies once no process can still read them by an old map."""
        self.phase("delete")
        flipped = self.move.flipped or timezone.now()
        settle = 2 * conf.get().map_max_age
        wait = settle - (timezone.now() - flipped).total_seconds()
        if wait > 0:
            time.sleep(wait)
        self._drop_logs()  # a released move's, or a mover's that died after its verdict
        for source in self.sources:
            self._purge(source, f"deleted on {source}")
        self._save(phase="done", finished=timezone.now())

    def abort(self) -> BucketMove:
        """Undo a move that has not flipped: the sources serve the buckets again."""
        if self.move.phase not in ("copying", "catching up", "fenced"):
            raise MoveRefused(
                f"move #{self.move.pk} is {self.move.phase}: it can no longer be aborted"
            )
        if self._flip_published(bucket_map.stored()):  # its mover died before recording it
            raise MoveRefused(
                f"move #{self.move.pk}: its flip was published (the mover died before it "
                f"recorded the phase), so {self.move.target} serves the buckets and has taken "
                "writes: it can no longer be aborted. Next: run the same movebuckets again to "
                "finish it"
            )
        with write_lock():
            for source, numbers in self.sources.items():
                bucket_table.set_states(source, sorted(numbers), bucket_table.OWNED)
        for alias in (*self.sources, self.move.target):  # the target's: a flip that died
            capture.remove(alias, self.tables)
        self._purge(self.move.target, "purged on target")
        with write_lock():
            bucket_table.set_states(self.move.target, sorted(self.buckets), None)
        stored = bucket_map.stored()
        if stored.moving & self.buckets:
            bucket_map.publish(
                stored.owners,
                note=f"move #{self.move.pk} aborted",
                moving=stored.moving - self.buckets,
            )
        self._save(phase="aborted", finished=timezone.now())
        return self.move

    # --- steps ---------------------------------------------------------------------------

    def _fence(self) -> None:
        """Mark the buckets fenced on every source and end the connections there that may
        still take them for served (:func:`..guards.fence.withdraw`): from then on every write to
        them is refused, and a transaction begun before cannot commit. Run again after a
        resume, it ends the connections again (the kill may not have happened); otherwise
        once per move: each round kills every session on the sources and holds the writers."""
        for source, numbers in self.sources.items():
            fence.withdraw(source, sorted(numbers), bucket_table.FENCED, end_connections=True)
        self._fenced = True
        self._reload_triggers()  # a session it ended may have been parsing a table's triggers
