"""A move's verification after the flip (docs/design.md#moves, docs/resharding.md#escaped-writes).

Two questions, answered from the sources' change logs (:mod:`..tables.move_log`, whose
triggers stay on until the verdict is saved) and the target as it was at the flip (a
snapshot; a mover resumed after the flip has none, see :meth:`Verification.run`):

- **Did a write escape the fence?** The final replay, under the fence, emptied the logs; so
  every entry logged since is a change to a source after it stopped taking writes. Any such
  change to a row of the moved buckets in ``entities``, ``cell`` or ``cell_head`` is an
  escaped write, whatever it changed; so is an index row of the moved buckets that a source
  has and the target had not. Those keys are named and the move is held: the sources' copies
  are kept. One change only is let pass: an index row a source *lost* (a stale row's removal),
  because index rows are hints every read checks against its entity (the proof is in
  docs/design.md#moves).
- **Do the copies agree?** Rows and checksums of every table in the moved buckets, on the
  sources and on the target's snapshot, but for the keys logged after the flip (their rows
  differ by the change, which the first question judged). A mover resumed after the flip has
  no snapshot: it compares key by key with the target as it is now, leaving out the keys the
  target's own change log names (its owner wrote them since the flip).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..config.indexes import Index
from ..exceptions import CorruptBody, IndexValueError
from ..tables import entities as entity_table
from ..tables import move_log as capture
from ..tables.moved_rows import MovedTable, digest, row_hash, rows_of_keys, walk
from ..values.codec import decode_body

# Keys of one table kept in the move's record (the message names fewer).
RECORDED = 1000
NAMED = 10


@dataclass
class Verdict:
    """What the verification found."""

    problems: list[str] = field(default_factory=list)  # how the copies differ
    escaped: dict[str, list[str]] = field(default_factory=dict)  # table: keys (hex), sorted
    changed: int = 0  # keys logged on the sources after the flip, escaped or not
    escaped_count: int = 0  # keys escaped, in every table (``escaped`` keeps RECORDED each)
    compared: bool = False  # the copies were compared (with a snapshot, or by the target's log)
    # A resumed mover's keys that differ but were left out (written since the flip): table:
    # keys (hex), sorted, RECORDED each. What a copy missed hides there (docs/resharding.md).
    left_out: dict[str, list[str]] = field(default_factory=dict)

    def held_message(self, pk: int, sources: list[str], target: str) -> str:
        """What a move held for these escaped writes tells the operator."""
        names = ", ".join(sources)
        writes = "write" if self.escaped_count == 1 else "writes"
        message = (
            f"move #{pk}: {self.escaped_count} {writes} reached {names} after the flip "
            f"(they escaped the fence): {self.named()}. The move is held and the sources' "
            f"copies are kept. Next: compare these keys' rows on {names} with the owner's "
            f"on {target}, write through the store what must be kept (it goes to {target}), "
            f"then run `manage.py movebuckets --release {pk}` to delete the sources' copies "
            "(docs/resharding.md#escaped-writes)"
        )
        if self.problems:
            message += "; the copies also differ: " + "; ".join(self.problems)
        return message

    def named(self) -> str:
        """``entities 0a1b..., cell 0a1b...`` and how many more."""
        pairs = [(table, key) for table, keys in self.escaped.items() for key in keys]
        text = ", ".join(f"{table} {key}" for table, key in pairs[:NAMED])
        more = self.escaped_count - min(len(pairs), NAMED)
        return text + (f" and {more} more" if more > 0 else "")


def failed_message(move: Any, problems: str) -> str:
    """What a move whose copies differ after the flip says (its record's message: a rerun
    of the move says it again)."""
    sources = ", ".join(move.sources)
    return (
        f"verification failed: {problems}. The move is stopped and the sources' copies are "
        f"kept. Next: compare the moved rows on {sources} with the owner's on {move.target}, "
        f"write through the store what must be kept (it goes to {move.target}), then run "
        f"`manage.py movebuckets --release {move.pk}` to delete the sources' copies "
        "(docs/resharding.md#when-a-move-fails)"
    )


def unjudged_message(pk: int, missing: list[str], target: str) -> str:
    """What a move held because a source's change log was gone before it was read says."""
    names = ", ".join(missing)
    return (
        f"move #{pk}: the change log on {names} is gone before the verification could read "
        "it, so writes that reached it after the flip cannot be judged. The move is held and "
        f"the sources' copies are kept. Next: compare the moved rows on {names} with the "
        f"owner's on {target}, then run `manage.py movebuckets --release {pk}` "
        "(docs/resharding.md#escaped-writes)"
    )


class Verification:
    """The verification of one move's copies (see the module docs)."""

    def __init__(
        self,
        tables: Sequence[MovedTable],
        sources: dict[str, set[int]],
        target: str,
        buckets: set[int],
        batch: int,
    ) -> None:
        self.tables = tables
        self.sources = sources
        self.target = target
        self.buckets = buckets
        self.batch = batch
        self.left_out: dict[str, set[bytes]] = {}  # by compare_now(): differ, not compared

    def run(self, snapshot: BaseDatabaseWrapper | None) -> Verdict:
        """The verdict, against the target's ``snapshot``. None (a mover resumed after the
        flip): the target as it is now stands for it, and the target's own change log (its
        triggers installed at the flip) names what its owner has written since: those keys
        are left out of the comparison (:meth:`compare_now`), and in the escape check an
        index row the target lacks now for such a key counts only while the entity implies
        it (:func:`_still_implied`). Without the target's log (a move flipped by an older
        mover) the copies are not compared, and every key gets that allowance."""
        problems: list[str] = []
        late: dict[str, set[bytes]] = {}
        compared = snapshot is not None or self.target_logged()
        if snapshot is None and compared:
            problems = self.compare_now()
        if snapshot is not None:
            for _attempt in range(3):
                problems = self.compare(snapshot, late)
                seen = self.late_keys()
                if not problems or seen == late:
                    break
                late = seen
        # Read last, after every comparison and with the triggers still on: a change made
        # while the copies were compared is judged too.
        late = self.late_keys()
        escaped = self.escaped(late, snapshot)
        return Verdict(
            problems=problems,
            escaped={t: sorted(k.hex() for k in keys)[:RECORDED] for t, keys in escaped.items()},
            changed=len(set().union(*late.values())) if late else 0,
            escaped_count=sum(len(keys) for keys in escaped.values()),
            compared=compared,
            left_out={
                t: sorted(k.hex() for k in keys)[:RECORDED] for t, keys in self.left_out.items()
            },
        )

    def compare(self, snapshot: BaseDatabaseWrapper, late: dict[str, set[bytes]]) -> list[str]:
        problems = []
        for table in self.tables:
            skip = late.get(table.name, set())
            sources = [(a, n, None) for a, n in self.sources.items()]
            ours = digest(table, sources, skip, self.batch)
            theirs = digest(table, [(self.target, self.buckets, snapshot)], skip, self.batch)
            if ours != theirs:
                problems.append(
                    f"{table.name}: sources {ours[0]} rows, target {theirs[0]} rows"
                    + ("" if ours[0] != theirs[0] else " (contents differ)")
                )
        return problems

    def compare_now(self) -> list[str]:
        """Compare the moved rows on the sources (frozen since the flip) with the target as
        it is now, key by key, leaving out the keys the target's log names (its owner wrote
        them since the flip) or the sources' (judged as escaped writes). The logs are read
        after the rows: a key whose new row was read has its entry committed by then. Keeps
        one number per moved key of a table (the limit: docs/resharding.md#limits)."""
        problems = []
        for table in self.tables:
            keyed = table.columns.index(table.log_key())
            sums: dict[bytes, int] = defaultdict(int)
            for values in walk(table, [(a, n, None) for a, n in self.sources.items()], self.batch):
                sums[bytes(values[keyed])] += row_hash(values) + 2**64
            for values in walk(table, [(self.target, self.buckets, None)], self.batch):
                sums[bytes(values[keyed])] -= row_hash(values) + 2**64
            differ = {key for key, total in sums.items() if total}
            if not differ:
                continue
            written = self.target_keys().get(table.name, set())
            if differ & written:  # the owner's since the flip: not compared
                self.left_out[table.name] = differ & written
            differ -= written | self.late_keys().get(table.name, set())
            if differ:
                first = ", ".join(sorted(key.hex() for key in differ)[:NAMED])
                problems.append(
                    f"{table.name}: {len(differ)} key(s) differ between the sources and the "
                    f"target with no write since the flip ({first})"
                )
        return problems

    def late_keys(self) -> dict[str, set[bytes]]:
        """The keys the sources' change logs name now (changes since the final replay)."""
        return _logged(list(self.sources))

    def target_logged(self) -> bool:
        return capture.installed(self.target)

    def target_keys(self) -> dict[str, set[bytes]]:
        """The keys the target's change log names: written there since the flip."""
        return _logged([self.target])

    def escaped(
        self, late: dict[str, set[bytes]], snapshot: BaseDatabaseWrapper | None
    ) -> dict[str, set[bytes]]:
        """Of the ``late`` keys, those of writes that escaped the fence, by table."""
        found: dict[str, set[bytes]] = {}
        for table in self.tables:
            keys = sorted(late.get(table.name, ()))
            if not keys:
                continue
            if table.index is None:
                # The key places the row: any change to a moved one is an escaped write.
                hits = {
                    key
                    for key, number in zip(keys, table.buckets_of(keys), strict=True)
                    if number in self.buckets
                }
            else:
                hits = self._added_index_rows(table, keys, snapshot)
            if hits:
                found[table.name] = hits
        return found

    def _added_index_rows(
        self, table: MovedTable, keys: list[bytes], snapshot: BaseDatabaseWrapper | None
    ) -> set[bytes]:
        """Entity ids with an index row of the moved buckets on a source that the target had
        not at the flip (a row the source lost is no escaped write)."""
        keyed = table.columns.index(table.log_key())
        theirs = {
            r
            for r in rows_of_keys(self.target, table, keys, snapshot)
            if table.bucket(r) in self.buckets
        }
        missing = [
            row
            for source, numbers in self.sources.items()
            for row in rows_of_keys(source, table, keys)
            if table.bucket(row) in numbers and row not in theirs
        ]
        if snapshot is None and table.index is not None:
            if not self.target_logged():
                missing = _still_implied(table.index, missing)
            else:  # a key its owner has not written since the flip has the rows of then
                written = self.target_keys().get(table.name, set())
                frozen = [r for r in missing if bytes(r[keyed]) not in written]
                fresh = [r for r in missing if bytes(r[keyed]) in written]
                missing = frozen + _still_implied(table.index, fresh)
        return {bytes(row[keyed]) for row in missing}


def _logged(aliases: list[str]) -> dict[str, set[bytes]]:
    """The keys the change logs of ``aliases`` name now, by table."""
    found: dict[str, set[bytes]] = defaultdict(set)
    for alias in aliases:
        if capture.installed(alias):
            for _seq, name, key in capture.read(alias, 1_000_000):
                found[name].add(key)
    return dict(found)


def _still_implied(index: Index, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Of index rows a source has and the target lacks *now*, those the entity, as committed
    on its owner now, still implies. Without the target's snapshot of the flip, a row the
    target lacks may be one its owner removed since, as stale (the entity's value changed):
    the source's frozen copy of it is no write, and holding the move for it would stop every
    move after a resumed one. A row the entity still implies is kept, and so is every row of
    an entity whose body cannot be read (both hold the move).

    The limit (docs/design.md#moves): an escaped write whose index row reached the source
    after the flip while its entity's commit had not landed yet is passed over here; the
    entity would then lack that index row until the cleaner's missing-rows pass adds it. The
    entity itself is never at stake: ``entities`` and the cells hold on any logged change."""
    if not rows:
        return rows
    bodies = entity_table.current(index.source, {bytes(row[-1]) for row in rows})
    kept = []
    for row in rows:
        found = bodies.get(bytes(row[-1]))
        if found is None:
            continue  # the entity is gone: it implies no row
        try:
            implied = index.rows_for(decode_body(bytes(found[2]))) if found[2] else set()
        except (CorruptBody, IndexValueError):
            kept.append(row)
            continue
        if tuple(row[:-1]) in implied:
            kept.append(row)
    return kept
