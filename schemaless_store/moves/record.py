"""A bucket move's record in words, for the people who read it: ``movebuckets --status``,
``shardmap`` and the admin's "Shards and buckets" page all show a move through
:func:`describe`, so they say the same thing the same way (docs/resharding.md).

The record keeps internal keys (``counts``: ``"copied entities"``, ``"deleted on shard_0"``,
``"verified"``...); what an operator asks is when the move ran, how long it took, how many rows
of each table it copied, whether the copies were verified and how long writes paused.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.utils import timezone

from ..config.metadata import BucketMove
from ..topology import bucket_map
from .plan import from_ranges

COPIED = "copied "


def ranges(spans: list[list[int]]) -> str:
    """``[[0, 99], [200, 200]]`` as ``0-99, 200``: how buckets are written everywhere."""
    return bucket_map.describe(from_ranges(spans))


def duration(seconds: float) -> str:
    """A duration to the second: ``5 s``, ``2 min 5 s``, ``1 h 0 min 3 s``."""
    whole = round(seconds)
    if whole < 1:
        return "under 1 s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min {secs} s"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def pause(seconds: float | None) -> str:
    """How long writes to the buckets waited at the flip: ``12 ms``, ``1.4 s``; ``""`` if the
    move has not flipped."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def when(moment: dt.datetime | None) -> str:
    """A time in the current time zone, to the second."""
    if moment is None:
        return ""
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class MoveRecord:
    """One move as the operators read it."""

    pk: int
    phase: str
    buckets: str  # "0-99, 200"
    bucket_count: int
    target: str
    sources: str  # "shard_0 (0-99)"
    started: dt.datetime
    finished: dt.datetime | None
    took: str  # "" while it runs
    paused: str  # "" before the flip
    verified: str  # "yes", "no (why)", "" (not yet, or aborted)
    copied: list[tuple[str, int]] = field(default_factory=list)  # (table, rows)
    replayed: int = 0
    deleted: int = 0
    message: str = ""

    @property
    def rows_copied(self) -> int:
        return sum(rows for _table, rows in self.copied)

    @property
    def copied_text(self) -> str:
        """``"35 rows (entities 6, cell 6, ...)"``."""
        tables = ", ".join(f"{table} {rows:,}" for table, rows in self.copied)
        unit = "row" if self.rows_copied == 1 else "rows"
        return f"{self.rows_copied:,} {unit}" + (f" ({tables})" if tables else "")

    @property
    def started_text(self) -> str:
        return when(self.started)


def _verified(move: BucketMove) -> str:
    if move.phase == "failed" and move.message.startswith("verification failed"):
        return "no (the copies differ)"
    escaped = move.counts.get("escaped")
    if escaped:
        count = sum(len(keys) for keys in escaped.values())
        return f"no ({count} escaped write{'' if count == 1 else 's'})"
    if "verified" not in move.counts:
        return ""
    if move.counts["verified"] is True:
        return "yes"
    return "no (resumed after the flip)"


def describe(move: BucketMove) -> MoveRecord:
    """:class:`MoveRecord` of ``move``."""
    counts = move.counts or {}
    copied = [
        (key[len(COPIED) :], int(rows))
        for key, rows in counts.items()
        if key.startswith(COPIED) and isinstance(rows, int)
    ]
    deleted = sum(
        int(rows)
        for key, rows in counts.items()
        if key.startswith("deleted on ") and isinstance(rows, int)
    )
    took = ""
    if move.finished is not None and move.started is not None:
        took = duration((move.finished - move.started).total_seconds())
    numbers = from_ranges(move.buckets)
    return MoveRecord(
        pk=move.pk,
        phase=move.phase,
        buckets=ranges(move.buckets),
        bucket_count=len(numbers),
        target=move.target,
        sources=", ".join(f"{alias} ({ranges(spans)})" for alias, spans in move.sources.items()),
        started=move.started,
        finished=move.finished,
        took=took,
        paused=pause(move.longest_pause),
        verified=_verified(move),
        copied=copied,
        replayed=int(counts.get("replayed", 0) or 0),
        deleted=deleted,
        message=move.message,
    )


STATUS_HEADERS = (
    "Move",
    "Phase",
    "Buckets",
    "To",
    "From",
    "Started",
    "Took",
    "Rows copied",
    "Writes paused",
    "Verified",
)


def status_row(record: MoveRecord) -> tuple[object, ...]:
    """A move's row in ``movebuckets --status`` (columns :data:`STATUS_HEADERS`)."""
    return (
        f"#{record.pk}",
        record.phase,
        record.buckets,
        record.target,
        record.sources,
        record.started_text,
        record.took,
        record.rows_copied,
        record.paused,
        record.verified,
    )
