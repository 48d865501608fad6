"""Index health, for the admin: what each index holds, how far its backfill got, what the cleaner
last did, a sampled consistency check, and the index rows of one entity.

Everything here reads; the only writes an operator can trigger go through the store's public write
path (``entity.save()``/``delete()``) in :mod:`.admin`. Rows per shard are exact (``COUNT(*)``)
unless MySQL's estimate in ``information_schema`` says a table holds at least
:data:`EXACT_COUNT_BELOW` rows, where counting would scan the table on every page load: then the
estimate is shown, marked as one.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError
from django.db.models import Max
from django.utils import timezone

from . import consistency, lifecycle, shards
from .exceptions import CorruptBody, IndexValueError, SchemalessError, ShardUnavailable
from .indexes import Index, is_identifier, registry
from .jsonview import dumps_value

EXACT_COUNT_BELOW = 100_000
ENTITIES_TABLE = "entities"
CHECK_PREFIX = "Check now:"
DEFAULT_SAMPLE = 100
MAX_SAMPLE = 5000


# --- counting rows ----------------------------------------------------------------------------


@dataclass
class TableCount:
    rows: int | None = None  # None: unknown (see error)
    estimated: bool = False
    error: str = ""

    @property
    def text(self) -> str:
        if self.rows is None:
            return self.error
        return ("≈ " if self.estimated else "") + f"{self.rows:,}"


def count_tables(alias: str, tables: Iterable[str]) -> dict[str, TableCount]:
    """Rows of each table on one shard: exact, or MySQL's estimate for big tables.

    A missing table or an unreachable shard is reported in ``error``, never raised.
    """
    wanted = [t for t in dict.fromkeys(tables) if is_identifier(t)]
    result = {t: TableCount(error="not a valid table name") for t in tables if t not in wanted}
    conn = shards.connection(alias)
    quote = conn.ops.quote_name
    try:
        with shards.errors_named(alias), conn.cursor() as cursor:
            existing = set(conn.introspection.table_names(cursor))
            estimates: dict[str, int] = {}
            if conn.vendor == "mysql":
                cursor.execute(
                    "SELECT TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = DATABASE()"
                )
                estimates = {name: int(rows or 0) for name, rows in cursor.fetchall()}
            for table in wanted:
                if table not in existing:
                    result[table] = TableCount(error="table missing")
                elif table in estimates and estimates[table] >= EXACT_COUNT_BELOW:
                    result[table] = TableCount(rows=estimates[table], estimated=True)
                else:
                    cursor.execute(f"SELECT COUNT(*) FROM {quote(table)}")
                    result[table] = TableCount(rows=int(cursor.fetchone()[0]))
    except ShardUnavailable as exc:
        return {t: TableCount(error=str(exc)) for t in tables}
    except DatabaseError as exc:
        return {t: TableCount(error=f"database error: {exc}") for t in tables}
    return result


# --- the health of each index -----------------------------------------------------------------


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
    from .models import CleanerCheckpoint, CleanerPass, IndexState

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
        rep = IndexReport(
            name=name,
            state=state.state if state else None,
            properties=list(index.properties if index else state.properties),
            shard_on=index.shard_on if index else state.shard_on,
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
    from django.contrib.admin.models import LogEntry
    from django.contrib.contenttypes.models import ContentType

    return (
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(type(state)),
            object_id=state.pk,
            change_message__startswith=CHECK_PREFIX,
        )
        .order_by("-action_time", "-id")
        .first()
    )


# --- the index rows of one entity -------------------------------------------------------------


def decode_column(index: Index, prop: str, value: Any) -> Any:
    """The property value an index column value stands for (for display).

    Raises ``ValueError`` for a value that no column type of this store produces.
    """
    column = index.columns.get(prop)
    if column is None:
        return bytes(value) if isinstance(value, bytearray | memoryview) else value
    return column.from_db(value)


@dataclass
class RowView:
    cells: list[tuple[str, str]]  # (property, value as JSON)
    alias: str  # the shard that holds (or should hold) the row
    status: str  # "ok", "missing" (implied but absent) or "stale" (present, not implied)


@dataclass
class EntityRows:
    index: Index
    state: str | None
    rows: list[RowView] = field(default_factory=list)
    note: str = ""
    error: str = ""

    @property
    def problems(self) -> int:
        return sum(1 for row in self.rows if row.status != "ok") + bool(self.error)


def row_view(index: Index, values: tuple[Any, ...], status: str) -> RowView:
    cells = []
    for prop, value in zip(index.properties, values, strict=True):
        try:
            shown = dumps_value(decode_column(index, prop, value))
        except (ValueError, TypeError, OverflowError):
            raw = bytes(value) if isinstance(value, bytes | bytearray | memoryview) else value
            shown = dumps_value(raw) + " (raw column value)"
        cells.append((prop, shown))
    alias = shards.alias_for(index.routing_key(values[index.shard_position]))
    return RowView(cells=cells, alias=alias, status=status)


def entity_rows(entity: Any) -> list[EntityRows]:
    """For each maintained index: the rows that point at ``entity``, each marked ok, missing or
    stale against what the entity's current properties imply."""
    entity_id = bytes(entity.row_id)
    try:
        props: dict[str, Any] | None = entity.body_properties()
    except CorruptBody:
        props = None
    states = lifecycle.states()
    result = []
    for index in registry.valid():
        if index.column is not None:
            continue  # an index over cells: it never points at entities
        view = EntityRows(index=index, state=states.get(index.name))
        try:
            if props is None:
                view.error = "the body cannot be decoded: every row is shown as stale"
                diff = consistency.compare(index, {entity_id: None})
                implied: set[tuple[Any, ...]] = set()
            else:
                diff = consistency.compare(index, {entity_id: props})
                try:
                    implied = index.rows_for(props)
                except IndexValueError as exc:
                    implied = set()
                    view.error = f"the entity's values do not fit this index: {exc}"
        except SchemalessError as exc:
            view.error = str(exc)
            result.append(view)
            continue
        missing = {values for values, _ in diff.missing}
        for values in sorted(implied, key=repr):
            view.rows.append(row_view(index, values, "missing" if values in missing else "ok"))
        for values, _ in diff.stale:
            view.rows.append(row_view(index, values, "stale"))
        if not view.rows and props is not None and not view.error:
            lacking = [p for p in index.properties if p not in props]
            view.note = "no rows: the entity has no " + ", ".join(lacking or index.properties)
        result.append(view)
    return result


# --- "check now": a sampled consistency check -------------------------------------------------

CHECK_OK_SUFFIX = "no problems."


@dataclass
class CheckResult:
    index: str
    state: str | None
    sampled: int = 0
    missing: int = 0
    stale: int = 0
    unindexable: int = 0
    undecodable: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        if self.error or self.stale or self.unindexable or self.undecodable:
            return False
        # A building index lacks rows for entities the backfill has not reached: expected.
        return self.missing == 0 or self.state == lifecycle.BUILDING

    def summary(self, per_shard: int) -> str:
        text = (
            f"{CHECK_PREFIX} {self.index}: sampled {self.sampled} entities "
            f"(up to {per_shard} per shard): {self.missing} missing and {self.stale} stale "
            "index rows"
        )
        if self.unindexable:
            text += f", {self.unindexable} entities whose values do not fit the index"
        if self.undecodable:
            text += f", {self.undecodable} undecodable bodies"
        if self.error:
            text += f"; failed: {self.error}"
        if self.state == lifecycle.BUILDING and self.missing:
            text += " (building: rows are missing until the backfill finishes)"
        return text + ("; " + CHECK_OK_SUFFIX if self.ok else "; PROBLEMS.")


def sample_entities(alias: str, per_shard: int, rng: random.Random) -> list[Any]:
    """Up to ``per_shard`` entities of one shard: the most recently written half (where a crashed
    write would show) and a run of consecutive rows from a random place (everything else)."""
    from .models import Entity

    on_shard = Entity.objects.using(alias)
    newest = list(on_shard.order_by("-row_updated", "-added_id")[: (per_shard + 1) // 2])
    picked = {e.added_id: e for e in newest}
    want = per_shard - len(picked)
    top = on_shard.aggregate(top=Max("added_id"))["top"]
    if want > 0 and top:
        start = rng.randint(1, top)
        window = list(on_shard.filter(added_id__gte=start).order_by("added_id")[: want * 2])
        if len(window) < want * 2:  # wrap around to the first rows
            window += list(on_shard.order_by("added_id")[: want * 2 - len(window)])
        for entity in window:
            if len(picked) >= per_shard:
                break
            picked.setdefault(entity.added_id, entity)
    return list(picked.values())


def check(
    names: Iterable[str] | None = None,
    per_shard: int = DEFAULT_SAMPLE,
    rng: random.Random | None = None,
) -> list[CheckResult]:
    """Compare sampled entities with the rows of each maintained index (``names``: all)."""
    rng = rng or random.Random()
    per_shard = max(1, min(MAX_SAMPLE, per_shard))
    states = lifecycle.states(refresh=True)
    wanted = None if names is None else set(names)
    # Entities are sampled: indexes over cell columns are checked by the cleaner's passes.
    indexes = [
        i for i in registry.valid() if i.column is None and (wanted is None or i.name in wanted)
    ]
    props: dict[bytes, dict[str, Any]] = {}
    undecodable = 0
    unavailable = []
    for alias in shards.shard_aliases():
        try:
            with shards.errors_named(alias):
                sample = sample_entities(alias, per_shard, rng)
        except (ShardUnavailable, DatabaseError) as exc:
            unavailable.append(f"{alias}: {exc}")
            continue
        for entity in sample:
            try:
                props[bytes(entity.row_id)] = entity.body_properties()
            except CorruptBody:
                undecodable += 1
    results = []
    for index in indexes:
        result = CheckResult(
            index=index.name,
            state=states.get(index.name),
            sampled=len(props) + undecodable,
            undecodable=undecodable,
            error="; ".join(unavailable),
        )
        try:
            diff = consistency.compare(index, props)
        except (SchemalessError, DatabaseError) as exc:
            result.error = "; ".join([*unavailable, str(exc)])
        else:
            result.missing, result.stale = len(diff.missing), len(diff.stale)
            result.unindexable = len(diff.unindexable)
        results.append(result)
    return results
