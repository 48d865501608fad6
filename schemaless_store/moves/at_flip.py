"""The target's moved rows as they were at the flip, which a move's verification compares the
sources' with (:mod:`.verification`).

A mover that keeps running reads them from the snapshot of the target it took at the flip. A
mover resumed after the flip (that snapshot died with its predecessor) takes a snapshot of the
target now and reads, in that same snapshot, the pre-images the target's triggers recorded
since the flip (:mod:`..tables.pre_images`): the target at the flip is its rows now, each row
changed since put back as it was (or left out, if it was absent). Both are read in one
snapshot, so a change is seen in both or in neither: its pre-image commits with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..tables import pre_images
from ..tables.moved_rows import MovedTable, row_hash, rows_of_keys, snapshot, walk

# A row's natural key -> its hash at the flip, or None: the row was not there.
Before = dict[tuple[Any, ...], int | None]


class AtFlip:
    """The target's rows in the moved buckets as of the flip."""

    def __init__(
        self,
        target: str,
        buckets: set[int],
        conn: BaseDatabaseWrapper,
        before: dict[str, Before] | None = None,
    ) -> None:
        self.target = target
        self.buckets = buckets
        self.conn = conn  # a snapshot of the target: at the flip, or now (with ``before``)
        self.before = before or {}  # by table: the rows its owner changed since the flip

    @classmethod
    def resumed(
        cls, target: str, tables: Sequence[MovedTable], buckets: set[int], batch: int
    ) -> AtFlip:
        """A snapshot of the target now, with the pre-images recorded since the flip, kept
        for the moved buckets only (one entry per row changed there since the flip)."""
        conn = snapshot(target)
        try:
            before: dict[str, Before] = {}
            for table in tables:
                positions = [table.columns.index(c) for c in table.natural_key]
                entries = before.setdefault(table.name, {})
                for present, row in pre_images.read(target, table, batch, conn):
                    if table.bucket(row) in buckets:
                        key = tuple(row[p] for p in positions)
                        entries[key] = row_hash(row) if present else None
        except BaseException:
            conn.close()
            raise
        return cls(target, buckets, conn, before)

    def close(self) -> None:
        self.conn.close()

    def digest(self, table: MovedTable, skip: set[bytes], batch: int) -> tuple[int, int]:
        """(rows, order-free checksum) of ``table``'s rows at the flip, but for those whose
        log key is in ``skip`` (as :func:`..tables.moved_rows.digest`)."""
        before = self.before.get(table.name, {})
        keyed = table.columns.index(table.log_key())
        positions = [table.columns.index(c) for c in table.natural_key]
        count, total = 0, 0
        for values in walk(table, [(self.target, self.buckets, self.conn)], batch):
            if bytes(values[keyed]) in skip:
                continue
            if before and tuple(values[p] for p in positions) in before:
                continue  # changed since the flip: its pre-image stands for it
            count += 1
            total = (total + row_hash(values)) % 2**64
        logged = table.natural_key.index(table.log_key())
        for key, hashed in before.items():
            if hashed is not None and bytes(key[logged]) not in skip:
                count += 1
                total = (total + hashed) % 2**64
        return count, total

    def index_rows(self, table: MovedTable, keys: Sequence[bytes]) -> set[tuple[Any, ...]]:
        """An index table's rows of entities ``keys`` in the moved buckets at the flip (an
        index row's natural key is the whole row)."""
        before = self.before.get(table.name, {})
        found = {
            row
            for row in rows_of_keys(self.target, table, keys, self.conn)
            if table.bucket(row) in self.buckets and row not in before
        }
        wanted = set(keys)
        logged = table.natural_key.index(table.log_key())
        found.update(
            key
            for key, hashed in before.items()
            if hashed is not None and bytes(key[logged]) in wanted
        )
        return found
