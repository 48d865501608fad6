"""Checking a batch of import items before anything of it is written.

:func:`check` turns each entity item into an entity and its change (encoded body, index rows:
:func:`~schemaless_store.writes.entity_writes.prepare`), noting why an item cannot be one; it runs
ahead of the writes, on the importer's reading thread. :func:`check_claims` then looks up the
values the batch claims in unique indexes (one query per index and shard), just before the
batch is written, so that a batch written before it is seen.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..config.indexes import Index
from ..exceptions import SchemalessError
from ..tables.index_rows import Row
from ..writes.entity_writes import prepare
from ..writes.index_writes import unique_conflicts
from ..writes.protocol import Change
from .items import Item
from .lines import CellLine, End, EntityLine, Header
from .summary import Rejected, reason


@dataclass
class Checked:
    """A batch read and checked, not yet written."""

    items: list[Item]
    bad: list[tuple[int, Rejected]] = field(default_factory=list)  # (position, why), in order
    entities: list[Any] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    owners: list[tuple[int, Item]] = field(default_factory=list)  # of each entity
    cells: list[tuple[Item, CellLine]] = field(default_factory=list)
    header: Header | None = None
    end: End | None = None
    entity_lines: int = 0

    @property
    def size(self) -> int:
        return sum(item.size for item in self.items)


def check(items: list[Item], model: Any) -> Checked:
    """Each item as an entity and its change, a cell line, or the reason it is bad."""
    checked = Checked(items)
    for position, item in enumerate(items):
        line = item.line
        if line is None:
            checked.bad.append((position, Rejected(item, item.error)))
        elif isinstance(line, EntityLine):
            checked.entity_lines += 1
            try:
                entity = model(id=line.key, **line.properties)
                change = prepare(entity)
            except (SchemalessError, ValueError, TypeError) as exc:
                checked.bad.append((position, Rejected(item, reason(exc))))
                continue
            checked.entities.append(entity)
            checked.changes.append(change)
            checked.owners.append((position, item))
        elif isinstance(line, CellLine):
            checked.cells.append((item, line))
        elif isinstance(line, Header):
            checked.header = line
        else:
            checked.end = line
    return checked


def check_claims(checked: Checked) -> None:
    """Move the entities whose unique values are taken (by an earlier item of the batch for
    another entity, or by another entity in the store) to the bad items."""
    taken = _taken(checked.changes, checked.owners)
    for position in sorted(taken, reverse=True):
        owner = checked.owners[position]
        checked.bad.append((owner[0], Rejected(owner[1], taken[position])))
        del checked.entities[position], checked.changes[position], checked.owners[position]
    checked.bad.sort(key=lambda found: found[0])


def _taken(changes: list[Change], owners: list[tuple[int, Item]]) -> dict[int, str]:
    found: dict[int, str] = {}
    first: dict[tuple[Index, tuple[Any, ...]], tuple[bytes, int]] = {}
    rows: list[Row] = []
    for position, change in enumerate(changes):
        for index, values in change.rows:
            if not index.unique:
                continue
            claim = first.setdefault((index, values), (change.key, position))
            if claim[0] != change.key:
                found.setdefault(
                    position,
                    f"UniqueViolation: {_value(index, values)} is claimed by "
                    f"{owners[claim[1]][1].describe()} of the same batch (entity "
                    f"{uuid.UUID(bytes=claim[0])})",
                )
            elif claim[1] == position:
                rows.append((index, values, change.key))
    if rows:
        for (index, values), holder in unique_conflicts(rows).items():
            found.setdefault(
                first[index, values][1],
                f"UniqueViolation: {_value(index, values)} is already taken by entity "
                f"{uuid.UUID(bytes=holder)}",
            )
    return found


def _value(index: Index, values: tuple[Any, ...]) -> str:
    return f"index {index.name!r}: {', '.join(index.properties)} = {index.describe(values)}"
