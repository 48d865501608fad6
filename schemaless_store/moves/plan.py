"""Planning a bucket move: which buckets, from which sources, what the move would copy, and
the checks that refuse a move with nothing changed (:class:`MoveRefused`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from django.db import connections, transaction

from ..config import conf
from ..config.metadata import BucketMove
from ..exceptions import MoveRefused
from ..tables import buckets as bucket_table
from ..tables.moved_rows import moved_tables, page
from ..topology import bucket_map, shards

# Rows read per batch of a copy (and of the dry run's count, five times that).
COPY_BATCH = 1000


def parse_buckets(spec: str) -> list[int]:
    """``"0-1364,2000"`` as bucket numbers, checked against ``SCHEMALESS["BUCKETS"]``."""
    total = conf.get().buckets
    found: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise MoveRefused(
                f"--buckets: '{part}' is not a bucket number or a range like 0-1364"
            ) from None
        if first > last:
            raise MoveRefused(
                f"--buckets: the range {part} is backwards; write the lower number first "
                f"({last}-{first})"
            )
        if not 0 <= first <= last < total:
            raise MoveRefused(
                f"--buckets: {part} is outside 0-{total - 1} (the store has {total} buckets)"
            )
        found.update(range(first, last + 1))
    if not found:
        raise MoveRefused("--buckets: no bucket numbers given")
    return sorted(found)


def as_ranges(numbers: Iterable[int]) -> list[list[int]]:
    return bucket_map.spans(numbers)


def from_ranges(spans: Iterable[Sequence[int]]) -> list[int]:
    return [n for low, high in spans for n in range(low, high + 1)]


@dataclass
class Plan:
    """What a move of ``buckets`` to ``target`` does: which buckets leave which source."""

    target: str
    buckets: list[int]
    sources: dict[str, list[int]]
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # source -> table -> rows


def last_done() -> BucketMove | None:
    """The latest move that finished."""
    return BucketMove.objects.filter(phase="done").order_by("-pk").first()


def owners_of(buckets: Sequence[int]) -> list[str]:
    """The shard that owns each of ``buckets`` by the stored map."""
    owners = bucket_map.refresh().owners
    return [owners[n] for n in buckets]


def plan(target: str, buckets: Sequence[int]) -> Plan:
    """Check a move and say what it moves; :class:`MoveRefused` (nothing changed) if it
    cannot be made."""
    if target not in shards.shard_aliases():
        raise MoveRefused(
            f"--to: '{target}' is not a shard alias; the shards are "
            f"{', '.join(shards.shard_aliases())}"
        )
    owners = bucket_map.refresh().owners
    already = [n for n in buckets if owners[n] == target]
    if already:
        spans = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in as_ranges(already))
        raise MoveRefused(f"{target} owns buckets {spans} already; leave them out of the move")
    _require_migrated(target)
    sources: dict[str, list[int]] = defaultdict(list)
    for number in buckets:
        sources[owners[number]].append(number)
    return Plan(target, list(buckets), dict(sources))


def _require_migrated(alias: str) -> None:
    conn = connections[alias]
    try:
        with shards.errors_named(alias), conn.cursor() as cursor:
            tables = set(conn.introspection.table_names(cursor))
    except Exception as exc:
        raise MoveRefused(f"{alias} cannot be reached: {exc}") from exc
    missing = [
        t for t in (bucket_table.TABLE, *(t.name for t in moved_tables())) if t not in tables
    ]
    if missing:
        raise MoveRefused(
            f"{alias} is not migrated (no {', '.join(missing[:3])}): run manage.py migrateall"
        )


def count_rows(found: Plan, progress: Callable[[str], None] | None = None) -> Plan:
    """Fill ``found.rows``: the rows of the moving buckets per source and table (a full read of
    each source: the dry run's numbers)."""
    wanted = set(found.buckets)
    for source in found.sources:
        for table in moved_tables():
            total, last = 0, None
            while True:
                names = (table.routed_by,)
                step = page(source, table, last, COPY_BATCH * 5, wanted, names=names)
                if step.last is None:
                    break
                total += len(step.rows)
                last = step.last
            found.rows.setdefault(source, {})[table.name] = total
            if progress:
                progress(f"{source} {table.name}: {total}")
    return found


def unfinished() -> BucketMove | None:
    return BucketMove.objects.exclude(phase__in=BucketMove.FINISHED).order_by("pk").first()


def start(found: Plan) -> BucketMove:
    """Record a new move (refused while another is not finished: one move at a time)."""
    with transaction.atomic():
        other = unfinished()
        if other is not None:
            raise MoveRefused(
                f"move #{other.pk} to {other.target} is {other.phase}: finish it (run the same "
                "movebuckets command again) or abort it (--abort) first"
            )
        return BucketMove.objects.create(
            target=found.target,
            buckets=as_ranges(found.buckets),
            sources={alias: as_ranges(numbers) for alias, numbers in found.sources.items()},
        )
