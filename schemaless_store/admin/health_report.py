"""Index health, for the admin: what each index holds, how far its backfill got and what the
cleaner last did. Rows per shard are exact (``COUNT(*)``) unless MariaDB's estimate says a table
is large (:mod:`schemaless_store.tables.counts`); then the estimate is shown, marked as one.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Max
from django.utils import timezone

from ..config.indexes import is_identifier, registry
from ..config.metadata import CleanerCheckpoint, CleanerPass, IndexState
from ..tables import lifecycle
from ..tables.counts import TableCount, count_tables
from ..topology import shards

ENTITIES_TABLE = "entities"
CHECK_PREFIX = "Check now:"
CHECK_OK_SUFFIX = "no problems."


KIND_ORDER = ("backfill", "repair", "sweep")


@dataclass
class PassView:
    """The latest cleaner pass of one kind on one (index, shard)."""

    record: Any  # CleanerPass

    @property
    def duration(self) -> str:
        """How long the pass took (or has been running), in words."""
        end = self.record.finished or timezone.now()
        return human_duration(end - self.record.started)

    @property
    def failed(self) -> bool:
        return self.record.status in ("failed", "interrupted") or self.record.errors > 0


@dataclass
class ShardStatus:
    alias: str
    count: TableCount
    entities: TableCount
    checkpoint: Any = None  # CleanerCheckpoint | None
    passes: list[PassView] = field(default_factory=list)  # latest of each kind

    @property
    def progress(self) -> float | None:
        """Backfill progress on this shard, 0..1, from the cleaner's checkpoint."""
        return checkpoint_progress(self.checkpoint)

    @property
    def percent(self) -> int | None:
        progress = self.progress
        return None if progress is None else int(progress * 100)

    @property
    def row_span(self) -> int:
        return max(1, len(self.passes))


def human_duration(delta: dt.timedelta) -> str:
    seconds = max(0.0, delta.total_seconds())
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} days {hours % 24} h"


def checkpoint_progress(checkpoint: Any) -> float | None:
    if checkpoint is None:
        return None
    if checkpoint.done:
        return 1.0
    if checkpoint.entities_total:
        return min(1.0, checkpoint.entities_done / checkpoint.entities_total)
    if checkpoint.target_added_id:
        return min(1.0, checkpoint.last_added_id / checkpoint.target_added_id)
    return 0.0


@dataclass
class IndexReport:
    name: str
    state: str | None
    properties: list[str]
    shard_on: str
    declared: bool
    errors: list[str]
    shards: list[ShardStatus] = field(default_factory=list)
    last_check: Any = None  # LogEntry | None

    @property
    def building(self) -> bool:
        return self.state == lifecycle.BUILDING

    @property
    def progress(self) -> float | None:
        """Overall backfill progress, 0..1 (None when the index is not building)."""
        if not self.building:
            return None
        done = total = 0
        fractions = []
        for status in self.shards:
            cp = status.checkpoint
            if cp is not None and cp.entities_total and not cp.done:
                done += cp.entities_done
                total += cp.entities_total
            else:
                fractions.append(status.progress or 0.0)
        # Weight shards by their entities when the cleaner knows them, else evenly.
        if total and not fractions:
            return min(1.0, done / total)
        parts = [*fractions]
        if total:
            parts.append(done / total)
        return sum(parts) / len(parts) if parts else 0.0

    @property
    def percent(self) -> int | None:
        progress = self.progress
        return None if progress is None else int(progress * 100)

    @property
    def total_rows(self) -> str:
        """Rows over every shard, in words (``≈`` when a shard's count is an estimate)."""
        counts = [status.count for status in self.shards if status.count.rows is not None]
        if not counts:
            return "—"
        estimated = any(c.estimated for c in counts) or len(counts) < len(self.shards)
        return ("≈ " if estimated else "") + f"{sum(c.rows or 0 for c in counts):,}"

    @property
    def latest_pass(self) -> Any:
        """The most recently started cleaner pass on any shard (a CleanerPass), or None."""
        records = [view.record for status in self.shards for view in status.passes]
        return max(records, key=lambda r: r.started, default=None)

    @property
    def backfill_started(self) -> bool:
        return any(status.checkpoint is not None for status in self.shards)

    @property
    def last_check_failed(self) -> bool:
        entry = self.last_check
        return entry is not None and not entry.change_message.endswith(CHECK_OK_SUFFIX)

    @property
    def problems(self) -> list[str]:
        """What an operator must look at, in words (shown in red)."""
        found = list(self.errors)
        if self.declared and self.state is None:
            found.append("no state recorded: run `manage.py migrateall`")
        if self.declared and self.state == lifecycle.RETIRED:
            found.append("declared again but still marked retired: run `manage.py migrateall`")
        if self.state != lifecycle.RETIRED and not self.errors:
            for status in self.shards:
                if status.count.error:
                    found.append(f"{status.alias}: {status.count.error}")
        for status in self.shards:
            for view in status.passes:
                if view.failed:
                    p = view.record
                    found.append(
                        f"{status.alias}: last {p.kind} pass {p.status}"
                        + (f" with {p.errors} errors" if p.errors else "")
                    )
        if self.last_check_failed:
            found.append("the last check found problems")
        return found

    @property
    def leftover_tables(self) -> list[str]:
        """Shards where a retired index still has its table (``manage.py dropindex``)."""
        if self.state != lifecycle.RETIRED:
            return []
        return [s.alias for s in self.shards if s.count.rows is not None]


def report(check_entries: bool = True) -> list[IndexReport]:
    """A report per declared or recorded index, retired ones included, by name."""
    states = {s.name: s for s in IndexState.objects.using(DEFAULT_DB_ALIAS).all()}
    declared = {index.name: index for index in registry.all()}
    names = sorted(set(states) | set(declared))
    aliases = list(shards.shard_aliases())

    counts = {
        alias: count_tables(alias, [ENTITIES_TABLE, *(n for n in names if is_identifier(n))])
        for alias in aliases
    }
    checkpoints = {
        (c.index_name, c.shard): c
        for c in CleanerCheckpoint.objects.using(DEFAULT_DB_ALIAS).filter(index_name__in=names)
    }
    last_ids = (
        CleanerPass.objects.using(DEFAULT_DB_ALIAS)
        .filter(index_name__in=names)
        .values("index_name", "shard", "kind")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    passes: dict[tuple[str, str], list[PassView]] = defaultdict(list)
    latest = CleanerPass.objects.using(DEFAULT_DB_ALIAS).filter(id__in=list(last_ids))
    for record in sorted(latest, key=lambda p: _kind_rank(p.kind)):
        passes[record.index_name, record.shard].append(PassView(record))

    reports = []
    for name in names:
        index, state = declared.get(name), states.get(name)
        if index is not None:
            properties, shard_on = list(index.properties), index.shard_on
        else:  # recorded, no longer declared: what its state recorded
            assert state is not None
            properties, shard_on = list(state.properties), state.shard_on
        rep = IndexReport(
            name=name,
            state=state.state if state else None,
            properties=properties,
            shard_on=shard_on,
            declared=index is not None,
            errors=list(index.errors) if index else [],
        )
        for alias in aliases:
            rep.shards.append(
                ShardStatus(
                    alias=alias,
                    count=counts[alias].get(name, TableCount(error="not a valid table name")),
                    entities=counts[alias][ENTITIES_TABLE],
                    checkpoint=checkpoints.get((name, alias)),
                    passes=passes.get((name, alias), []),
                )
            )
        if check_entries and state is not None:
            rep.last_check = last_check(state)
        reports.append(rep)
    return reports


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def last_check(state: Any) -> Any:
    """The admin log entry of the latest "check now" of an index, or None."""
    return (
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(type(state)),
            object_id=state.pk,
            change_message__startswith=CHECK_PREFIX,
        )
        .order_by("-action_time", "-id")
        .first()
    )
