"""What ``movebuckets`` shows while a move runs: one line per phase (copy, catch-up, flip,
verify, delete), each a progress bar that stays on the screen when its phase ends.

The copy's and the delete's bars have a total: the rows of the moving buckets, counted as
the dry run counts them (:func:`.plan.count_rows`) before the copy starts. The catch-up counts
the changes it replays (their number is not known ahead); the flip and the verify show how
long they took. Nothing is drawn when ``enabled`` is false (not a terminal, or
``--verbosity 0``), and then nothing is counted either.

The mover calls :meth:`MoveProgress.phase` as each phase starts and :meth:`MoveProgress.report`
after each batch (``"copy shard_0 entities"``, ``"catch up shard_0"``, ``"deleted on shard_0
entities"``, ``"purged on target cell"``, with a number of rows or changes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from ..config.metadata import BucketMove
from ..tables.moved_rows import moved_tables
from .plan import Plan, count_rows, from_ranges
from .record import describe, duration, pause

PHASES = ("copy", "catch-up", "flip", "verify", "delete")
WIDTH = max(len(name) for name in PHASES)
UNITS = {"copy": " rows", "catch-up": " changes", "delete": " rows"}
BAR_FORMAT = (
    "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{unit} [{elapsed}<{remaining}{postfix}]"
)
OPEN_FORMAT = "{desc}: {n_fmt}{unit} [{elapsed}{postfix}]"
TEXT_FORMAT = "{desc}"  # the flip's and the verify's lines: words, no number
WORKING = {
    "flip": "fencing the buckets, replaying the last changes, flipping the map",
    "verify": "comparing the moved rows of the sources and the target",
}


def row_totals(move: BucketMove) -> dict[str, int]:
    """The rows a move copies and then deletes, counted now on its sources (a read of each
    source's tables, as ``--dry-run`` does): ``{"copy": n, "delete": m}``."""
    found = count_rows(
        Plan(
            move.target,
            from_ranges(move.buckets),
            {alias: from_ranges(spans) for alias, spans in move.sources.items()},
        )
    )
    kept = {table.name for table in moved_tables() if table.kept_on_source}
    copy = sum(n for rows in found.rows.values() for n in rows.values())
    delete = sum(n for rows in found.rows.values() for t, n in rows.items() if t not in kept)
    return {"copy": copy, "delete": delete}


class MoveProgress:
    """The phase lines of one move (see the module docs). ``count`` gives the totals of the
    phases that have one (:func:`row_totals`); it is called once, as the copy starts."""

    def __init__(
        self,
        move: BucketMove,
        *,
        file: Any,
        enabled: bool,
        count: Callable[[BucketMove], dict[str, int]] = row_totals,
    ) -> None:
        self.move = move
        self.file = file
        self.enabled = enabled
        self.count = count
        self.totals: dict[str, int] | None = None
        self.current = ""
        self.bar: tqdm | None = None
        self.began = 0.0
        self.replayed = 0  # changes replayed during the flip
        self._lock = threading.Lock()  # the copy reports from several threads

    def phase(self, name: str) -> None:
        with self._lock:
            if name == self.current:  # the flip says so twice (after a resume, once)
                return
            self._end()
            self.current, self.began, self.replayed = name, time.monotonic(), 0
            if not self.enabled:
                return
            self.bar = self._open(name)

    def report(self, what: str, rows: int) -> None:
        with self._lock:
            bar = self.bar
            if bar is None:
                return
            prefix = {"copy": "copy ", "delete": "deleted on "}.get(self.current)
            if prefix and what.startswith(prefix):
                # "shard_0 entities": the table goes with the rows it counts (set first,
                # drawn once by the update).
                bar.set_postfix_str(what.removeprefix(prefix), refresh=False)
                self._grow(bar, rows)
            elif self.current == "copy":  # "purged on target T": an earlier attempt's rows
                bar.set_postfix_str("preparing the target")
            elif self.current == "catch-up":
                bar.update(rows)
            elif self.current == "flip":
                self.replayed += rows
                self._say(bar, f"{WORKING['flip']}: {self.replayed:,} changes replayed")

    def close(self, *, failed: bool = False) -> None:
        """End the last phase's line (call it once the move returns, or ``failed``)."""
        with self._lock:
            self._end(failed=failed)
            self.current = ""

    # --- the bars ----------------------------------------------------------------------------

    def _open(self, name: str) -> tqdm:
        if name in WORKING:
            bar = tqdm(total=None, file=self.file, leave=True, bar_format=TEXT_FORMAT)
            self._say(bar, WORKING[name] + " ...")
            return bar
        total = None
        counting = name in ("copy", "delete") and self.totals is None
        bar = tqdm(
            desc=name.ljust(WIDTH),
            total=None,
            unit=UNITS.get(name, ""),
            file=self.file,
            leave=True,
            dynamic_ncols=True,
            mininterval=0.2,
            bar_format=OPEN_FORMAT,
        )
        if counting:
            bar.set_postfix_str("counting the rows to move")
            self.totals = self.count(self.move)
            bar.set_postfix_str("", refresh=False)
        if self.totals is not None and name in self.totals:
            total = self.totals[name]
        if total is not None:
            bar.total = total
            bar.bar_format = BAR_FORMAT
            bar.n = min(self._done_before(name), total)
        if name == "delete":
            bar.set_postfix_str("waiting for every process to read the new map")
        bar.refresh()
        return bar

    def _done_before(self, name: str) -> int:
        """Rows a resumed move did in this phase before it was stopped."""
        prefix = {"copy": "copied ", "delete": "deleted on "}.get(name)
        if prefix is None:
            return 0
        counts = self.move.counts or {}
        return sum(n for key, n in counts.items() if key.startswith(prefix) and isinstance(n, int))

    @staticmethod
    def _grow(bar: tqdm, rows: int) -> None:
        if bar.total is not None and bar.n + rows > bar.total:
            bar.total = bar.n + rows  # rows written since the count: the total was low
        bar.update(rows)

    def _say(self, bar: tqdm, text: str) -> None:
        bar.set_description_str(f"{self.current.ljust(WIDTH)}: {text}")

    def _end(self, failed: bool = False) -> None:
        bar, self.bar = self.bar, None
        if bar is None:
            return
        took = duration(time.monotonic() - self.began)
        if failed:
            bar.set_postfix_str(f"stopped after {took}", refresh=False)
            if self.current in WORKING:
                self._say(bar, f"stopped after {took}")
        elif self.current == "flip":
            paused = pause(self.move.longest_pause)
            self._say(bar, f"done in {took}" + (f"; writes paused {paused}" if paused else ""))
        elif self.current == "verify":
            verified = describe(self.move).verified or "no"
            self._say(bar, f"verified: {verified}, in {took}")
        else:
            bar.set_postfix_str("", refresh=False)
            if bar.total is not None:
                bar.total = bar.n  # what it did is the whole of it: a full bar
        bar.close()
