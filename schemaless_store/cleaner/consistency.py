"""Compare what entities imply with what an index holds: the cleaner repairs with it, the
admin's "check now" samples with it.

A row is *missing* when an entity's current properties imply it and the index lacks it, and
*stale* when the index holds it but the entity (or its absence) does not imply it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config.indexes import Index
from ..exceptions import IndexValueError
from ..tables import index_rows as index_table
from ..topology import bucket_map

Row = tuple[tuple[Any, ...], bytes]  # (column values, entity id)


@dataclass
class Diff:
    index: Index
    missing: list[Row] = field(default_factory=list)
    stale: list[Row] = field(default_factory=list)
    unindexable: list[bytes] = field(default_factory=list)  # entities whose values do not fit

    def stale_by_entity_shard(self) -> dict[str, dict[bytes, set[tuple[Index, tuple[Any, ...]]]]]:
        """Stale rows grouped as :func:`schemaless_store.writes.stale_rows.remove_stale` takes
        them."""
        grouped: dict[str, dict[bytes, set[tuple[Index, tuple[Any, ...]]]]] = defaultdict(
            lambda: defaultdict(set)
        )
        for values, entity_id in self.stale:
            grouped[bucket_map.alias_for(entity_id)][entity_id].add((self.index, values))
        return grouped


def implied_rows(
    index: Index, properties: Mapping[bytes, Mapping[str, Any] | None]
) -> tuple[set[Row], list[bytes]]:
    """Rows the given entities imply (``None`` properties: the entity does not exist)."""
    rows: set[Row] = set()
    unindexable = []
    for entity_id, props in properties.items():
        if props is None:
            continue
        try:
            rows.update((values, entity_id) for values in index.rows_for(props))
        except IndexValueError:
            unindexable.append(entity_id)
    return rows, unindexable


def compare(index: Index, properties: Mapping[bytes, Mapping[str, Any] | None]) -> Diff:
    """Missing and stale rows of ``index`` for these entities (read without locks)."""
    expected, unindexable = implied_rows(index, properties)
    return _diff(index, expected, list(properties), unindexable)


def compare_rows(
    index: Index, implied: Mapping[bytes, set[tuple[Any, ...]]], unindexable: list[bytes]
) -> Diff:
    """:func:`compare` for entities whose rows are known already (``{entity id: column
    values of its rows}``, as the server reads them out of JSON bodies)."""
    expected = {(values, entity_id) for entity_id, rows in implied.items() for values in rows}
    return _diff(index, expected, list(implied), unindexable)


def _diff(index: Index, expected: set[Row], ids: list[bytes], unindexable: list[bytes]) -> Diff:
    actual = index_table.of_entities(index, ids)
    return Diff(
        index=index,
        missing=sorted(expected - actual, key=_order),
        stale=sorted(actual - expected, key=_order),
        unindexable=unindexable,
    )


def _order(row: Row) -> tuple[bytes, str]:
    return row[1], repr(row[0])
