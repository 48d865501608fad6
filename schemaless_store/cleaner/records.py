"""What the cleaner did: a :class:`PassResult` per pass on one (index, shard), a
:class:`Summary` per run, and the :class:`~schemaless_store.models.CleanerPass` records the
admin shows (saved while a pass runs, at most every :data:`RECORD_EVERY_SECONDS`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone

from ..config.metadata import CleanerPass

logger = logging.getLogger("schemaless_store.cleaner")

DONE, INTERRUPTED, FAILED, SKIPPED = "done", "interrupted", "failed", "skipped"
BACKFILL, REPAIR, SWEEP = "backfill", "repair", "sweep"
# Pass records are saved at most this often while a pass runs (and always at its end).
RECORD_EVERY_SECONDS = 2.0
# Problems kept verbatim in a pass record's message; the rest are counted.
MAX_NOTES = 20
COUNTS = ("scanned", "inserted", "stale_removed", "orphans_removed", "errors")


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
            text += f" in {self.seconds:.1f} s ({counts})"
        return text + (f": {self.message}" if self.message else "")

    def note(self, problem: str) -> None:
        """Count a problem (an entity skipped) and keep its text among the first few."""
        self.errors += 1
        if len(self.notes) < MAX_NOTES:
            self.notes.append(problem)
        logger.warning("%s (%s of %s on %s)", problem, self.kind, self.index, self.shard)

    def final_message(self) -> str:
        if self.status == SKIPPED:
            return self.message
        parts = [self.failure] if self.failure else []
        parts += self.notes
        if self.errors > len(self.notes):
            parts.append(f"... and {self.errors - len(self.notes)} more problems")
        return "; ".join(parts)


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
            f"Cleaner finished in {self.seconds:.1f} s: {self.total('inserted')} rows inserted, "
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


def start_record(result: PassResult) -> None:
    result.record = CleanerPass.objects.using(DEFAULT_DB_ALIAS).create(
        index_name=result.index, shard=result.shard, kind=result.kind, status="running"
    )
    result.saved_at = time.monotonic()


def save_record(result: PassResult, final: bool = False) -> None:
    """Save the pass's counts (at most every few seconds, unless ``final``)."""
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
    fields = ["entities_scanned", "rows_inserted", "stale_removed", "orphans_removed", "errors"]
    if final:
        record.status = result.status
        record.finished = timezone.now()
        record.message = result.message
        fields += ["status", "finished", "message"]
    record.save(using=DEFAULT_DB_ALIAS, update_fields=fields)
    result.saved_at = time.monotonic()


def close_abandoned(index_name: str, alias: str) -> None:
    """Passes still ``running`` while we hold the lock belong to a cleaner that died."""
    CleanerPass.objects.using(DEFAULT_DB_ALIAS).filter(
        index_name=index_name, shard=alias, status="running"
    ).update(
        status=INTERRUPTED,
        finished=timezone.now(),
        message="its cleaner stopped without finishing (killed?)",
    )


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
