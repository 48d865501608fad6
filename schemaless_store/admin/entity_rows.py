"""The index rows of one entity, for its admin page: each row that points at it, marked ok,
missing (implied but absent) or stale (present, not implied)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..cleaner import consistency
from ..config.indexes import Index, registry
from ..exceptions import CorruptBody, IndexValueError, SchemalessError
from ..sql.values import plain
from ..tables import index_rows as index_table
from ..tables import lifecycle
from ..values.jsonview import dumps_value
from .common import entity_url
from .values_html import value_html


def decode_column(index: Index, prop: str, value: Any) -> Any:
    """The property value an index column value stands for (for display).

    Raises ``ValueError`` for a value that no column type of this store produces.
    """
    column = index.columns.get(prop)
    if column is None:
        return plain(value)
    return column.from_db(value)


@dataclass
class RowView:
    cells: list[tuple[str, str]]  # (property, value as JSON: HTML, ids linked, or plain text)
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
        shown: str
        try:
            shown = value_html(prop, decode_column(index, prop, value), link=entity_url)
        except (ValueError, TypeError, OverflowError):
            raw = plain(value)
            shown = dumps_value(raw) + " (raw column value)"
        cells.append((prop, shown))
    return RowView(cells=cells, alias=index_table.home(index, values), status=status)


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
