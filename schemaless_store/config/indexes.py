"""Index declarations and the registry that discovers them.

An index is a table on every shard (:mod:`..tables.ddl`), one row per combination of property
values an entity has (:meth:`Index.rows_for`), placed on the shard of its ``shard_on`` value.
Declarations live in an ``indexes.py`` module of any installed app (``SCHEMALESS["INDEX_MODULE"]``)
and are found the way ``admin.py`` modules are: every module-level :class:`Index` counts.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.utils.module_loading import module_has_submodule

from ..exceptions import ConfigurationError, IndexValueError
from ..values.index_values import COLUMN_TYPES, ColumnType, KeyColumn, decode_key, encode_key

IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,63}")
RESERVED_COLUMNS = frozenset({"entity_id"})
# An entity whose multi-valued properties imply more index rows than this is refused.
MAX_ROWS_PER_ENTITY = 1000
# Column values a query's re-check remembers (values shared by many entities of a page).
MEMO_LIMIT = 4096
# The property that names an entity's kind (docs/kinds.md): an index declared on a kind holds
# rows only for the entities whose ``kind`` is that kind's name.
KIND_PROPERTY = "kind"
_MISSING = object()


def is_identifier(name: object) -> bool:
    """True for names safe to use unquoted-or-quoted as a MariaDB and SQLite identifier."""
    return isinstance(name, str) and IDENTIFIER.fullmatch(name) is not None


@dataclass(frozen=True)
class Source:
    """Where an index's rows come from: the ``entities`` table, or the latest version of one
    column of the cell store (``cell_head``, which has the same shape: ``added_id``, a 16-byte
    key, ``updated``, ``body``). The write protocol and the cleaner run the same way over both."""

    table: str
    id_column: str
    column: str | None = None

    @property
    def version_column(self) -> str | None:
        """The column that numbers the row's versions (``cell_head.ref_key``), if any."""
        return None if self.column is None else "ref_key"

    @property
    def noun(self) -> str:
        return "entity" if self.column is None else f"row (column {self.column!r})"

    def where(self) -> tuple[str, list[Any]]:
        """An ``AND ...`` to add to a ``WHERE`` over :attr:`table`, and its parameters."""
        if self.column is None:
            return "", []
        return " AND column_name = %s", [self.column]


ENTITIES = Source("entities", "id")


def cell_source(column: str) -> Source:
    return Source("cell_head", "row_key", column)


class Index:
    """A secondary index over one or more properties, sharded on one of them.

    ``types`` overrides the column type of some properties: a name from
    :data:`~schemaless_store.values.index_values.COLUMN_TYPES` (``"key"``, ``"int"``, ``"float"``,
    ``"str"``, ``"bytes"``, ``"uuid"``, ``"datetime"``) or a
    :class:`~schemaless_store.values.index_values.ColumnType`.
    The default, ``"key"``, accepts any scalar value. A property whose value is a list gets one
    row per element. Problems with the declaration are reported by ``manage.py check``
    (IDs ``schemaless.E1xx``); an invalid index is never used to build SQL.

    ``kind``: set when the index is declared in a kind's ``Meta.indexes`` (docs/kinds.md): the
    index then has rows only for entities of that kind, and only that kind's queries use it.
    """

    def __init__(
        self,
        table: str,
        properties: Sequence[str],
        shard_on: str,
        *,
        types: Mapping[str, str | ColumnType] | None = None,
        unique: bool = False,
        column: str | None = None,
        kind: str | None = None,
    ) -> None:
        self.name = table
        self.kind = kind
        # None: an index over entities; a name: over the latest version of that cell column.
        self.column = column
        self.properties: tuple[str, ...] = (
            (properties,) if isinstance(properties, str) else tuple(properties)
        )
        # What the planner compares a query's named properties with.
        self.property_set = frozenset(self.properties)
        self.shard_on = shard_on
        self.unique = unique
        self.module: str | None = None  # set by the registry
        self.errors: list[str] = []
        self.columns: dict[str, ColumnType] = {}
        self._validate(types or {})

    def _validate(self, types: Mapping[str, str | ColumnType]) -> None:
        errors = self.errors
        if not is_identifier(self.name):
            errors.append(
                f"table name {self.name!r} is not a valid identifier "
                "(lowercase letters, digits and _, at most 64, not starting with a digit)"
            )
        if not self.properties:
            errors.append("an index needs at least one property")
        for prop in self.properties:
            if not is_identifier(prop):
                errors.append(f"property {prop!r} is not a valid column name")
            elif prop in RESERVED_COLUMNS:
                errors.append(f"property {prop!r} clashes with the index table's own column")
        if len(set(self.properties)) != len(self.properties):
            errors.append(f"properties {list(self.properties)} list a property twice")
        if self.shard_on not in self.properties:
            errors.append(f"shard_on {self.shard_on!r} is not one of the properties")
        for prop in self.properties:
            spec = types.get(prop, "key")
            if isinstance(spec, ColumnType):
                self.columns[prop] = spec
            elif spec in COLUMN_TYPES:
                self.columns[prop] = COLUMN_TYPES[spec]()
            else:
                errors.append(
                    f"type {spec!r} of property {prop!r} is not one of {sorted(COLUMN_TYPES)}"
                )
                self.columns[prop] = KeyColumn()
        for prop in set(types) - set(self.properties):
            errors.append(f"types names {prop!r}, which is not one of the properties")
        if self.column is not None:
            if (
                not isinstance(self.column, str)
                or not 1 <= len(self.column) <= 64
                or self.column.startswith("_")
            ):
                errors.append(
                    f"column {self.column!r} is not a cell column name (1 to 64 characters, "
                    "not starting with _)"
                )
            if self.unique:
                errors.append("unique indexes over cell columns are not supported")

    @property
    def source(self) -> Source:
        return ENTITIES if self.column is None else cell_source(self.column)

    def __repr__(self) -> str:
        return (
            f"Index(table={self.name!r}, properties={list(self.properties)!r}, "
            f"shard_on={self.shard_on!r}{', unique=True' if self.unique else ''}"
            f"{f', column={self.column!r}' if self.column is not None else ''}"
            f"{f', kind={self.kind!r}' if self.kind is not None else ''})"
        )

    def require_valid(self) -> None:
        if self.errors:
            raise ConfigurationError(f"index {self.name!r} is invalid: {'; '.join(self.errors)}")

    # --- rows -------------------------------------------------------------------------------

    def column_value(self, prop: str, value: Any) -> Any:
        """The column value of one (scalar) property value, or :class:`IndexValueError`."""
        try:
            return self.columns[prop].to_db(value)
        except IndexValueError as exc:
            raise type(exc)(f"index {self.name!r}, property {prop!r}: {exc}") from None

    def rows_for(self, properties: Mapping[str, Any]) -> set[tuple[Any, ...]]:
        """The rows (column values, in property order) that an entity's properties imply.

        An entity that lacks any of the properties has no rows; a list value gives one row per
        element (so a row per combination when several properties are lists).
        """
        if self.kind is not None and properties.get(KIND_PROPERTY) != self.kind:
            return set()
        scalars = []
        for prop in self.properties:
            value = properties.get(prop, _MISSING)
            if value is _MISSING:
                return set()
            if type(value) is list:
                break
            scalars.append(self.column_value(prop, value))
        else:  # no list values (the usual case): one row
            return {tuple(scalars)}
        per_property: list[list[Any]] = []
        for prop in self.properties:
            if prop not in properties:
                return set()
            value = properties[prop]
            elements = value if type(value) is list else (value,)
            per_property.append([self.column_value(prop, element) for element in elements])
        count = 1
        for values in per_property:
            count *= len(values)
        if count > MAX_ROWS_PER_ENTITY:
            raise IndexValueError(
                f"index {self.name!r}: the entity's list values imply {count} index rows; "
                f"at most {MAX_ROWS_PER_ENTITY} are allowed"
            )
        return set(itertools.product(*per_property))

    def implies(
        self,
        properties: Mapping[str, Any],
        values: Sequence[Any],
        memo: dict[tuple[Any, ...], Any] | None = None,
    ) -> bool:
        """Whether the entity's properties imply the row whose column values start ``values``.

        The same answer as ``tuple(values[:n]) in self.rows_for(properties)``, without building
        every row: the query's re-check of each entity. ``memo`` caches column values of
        strings, ints and bytes across calls (a page's entities share e.g. their ``user_id``).
        """
        if self.kind is not None and properties.get(KIND_PROPERTY) != self.kind:
            return False
        combinations = 1
        for n, prop in enumerate(self.properties):
            value = properties.get(prop, _MISSING)
            if value is _MISSING:
                return False
            kind = type(value)
            if memo is not None and (kind is str or kind is int or kind is bytes):
                # One scalar (the usual case): its column value, memoized, is the whole test.
                key = (self.name, prop, kind, value)
                column = memo.get(key)
                if column is None:
                    try:
                        column = self.column_value(prop, value)
                    except IndexValueError:
                        return False
                    if len(memo) < MEMO_LIMIT:
                        memo[key] = column
                if column != values[n]:
                    return False
                continue
            elements = value if kind is list else (value,)
            combinations *= len(elements)
            found = False
            for element in elements:  # every element must fit, as in rows_for
                try:
                    column = self._memo_column(prop, element, memo)
                except IndexValueError:
                    return False
                found = found or column == values[n]
            if not found:
                return False
        return combinations <= MAX_ROWS_PER_ENTITY

    def _memo_column(self, prop: str, value: Any, memo: dict[tuple[Any, ...], Any] | None) -> Any:
        kind = type(value)
        if memo is None or not (kind is str or kind is int or kind is bytes):
            return self.column_value(prop, value)
        key = (self.name, prop, kind, value)
        column = memo.get(key)
        if column is None:
            column = self.column_value(prop, value)
            if len(memo) < MEMO_LIMIT:
                memo[key] = column
        return column

    def describe(self, values: tuple[Any, ...]) -> str:
        """Column values as the property values they stand for, for messages."""
        shown = []
        for prop, value in zip(self.properties, values, strict=False):
            if isinstance(self.columns[prop], KeyColumn):
                with contextlib.suppress(ValueError):
                    value = decode_key(value)
            shown.append(repr(value))
        return ", ".join(shown)

    @property
    def shard_position(self) -> int:
        return self.properties.index(self.shard_on)

    def routing_key(self, shard_value: Any) -> bytes:
        """Canonical bytes of a ``shard_on`` column value; its bucket names the row's shard."""
        return encode_key(shard_value)


class IndexRegistry:
    """The declared indexes, by table name."""

    def __init__(self) -> None:
        self._indexes: dict[str, Index] = {}
        self.duplicates: list[tuple[Index, Index]] = []

    def register(self, index: Index, module: str | None = None) -> Index:
        if module is not None:
            index.module = module
        existing = self._indexes.get(index.name)
        if existing is not None and existing is not index:
            self.duplicates.append((existing, index))
            return index
        self._indexes[index.name] = index
        return index

    def unregister(self, name: str) -> None:
        self._indexes.pop(name, None)

    def all(self) -> list[Index]:
        return list(self._indexes.values())

    def valid(self) -> list[Index]:
        return [index for index in self._indexes.values() if not index.errors]

    def get(self, name: str) -> Index:
        try:
            return self._indexes[name]
        except KeyError:
            raise ConfigurationError(
                f"no index {name!r} is declared; declared: {sorted(self._indexes)}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._indexes

    def autodiscover(self, app_modules: Iterable[Any], module_name: str) -> None:
        """Import ``<app>.<module_name>`` for each app module and register its Index objects."""
        for app_module in app_modules:
            if not module_has_submodule(app_module, module_name):
                continue
            dotted = f"{app_module.__name__}.{module_name}"
            module = import_module(dotted)
            for value in vars(module).values():
                if isinstance(value, Index):
                    self.register(value, module=dotted)


registry = IndexRegistry()
