"""Reading the rows of a Django model as import items: the migration path for data that sits
in a ``JSONField`` (or in columns) of an ordinary model today.

Each row becomes an entity whose properties are the keys of its JSON field (``json_field``,
an object per row) and/or the named columns (``fields``). Its id is the value of ``id_field``
(a ``UUIDField``, 16 bytes or 32 hex characters) or, without one, a stable UUID of the row's
primary key, the same on every run::

    uuid.uuid5(uuid.NAMESPACE_URL, f"schemaless-store:{model._meta.label_lower}:{pk}")

Rows are read in primary-key order, ``chunk_size`` at a time by keyset (``pk > last``), so
memory stays flat and a rerun reads the same rows in the same order.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import models
from django.utils import timezone

from ..exceptions import ConfigurationError, InvalidEntityId
from ..values.entity_ids import entity_id_bytes
from .items import Item
from .lines import EntityLine

DEFAULT_CHUNK = 1000
# Column values kept as they are; bytes-like values become bytes, naive datetimes are made
# aware in the current time zone, anything else is refused with the field's name.
_KEPT = (str, int, float, bool, type(None), list, dict, bytes, uuid.UUID)


def row_id(model: type[models.Model], pk: Any) -> uuid.UUID:
    """The entity id of the row ``pk`` of ``model`` when no ``id_field`` is given."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"schemaless-store:{model._meta.label_lower}:{pk}")


class ModelRows:
    """The rows of ``model`` as import items (see the module docs)."""

    unit = " rows"
    item_name = "row"

    def __init__(
        self,
        model: type[models.Model],
        *,
        id_field: str | None = None,
        json_field: str | None = None,
        fields: Sequence[str] = (),
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        if not json_field and not fields:
            raise ConfigurationError(
                "name the row's properties: a JSON field (its keys) and/or columns"
            )
        self.model = model
        self.id_column = None if id_field is None else _column(model, id_field)
        self.json_column = None if json_field is None else _column(model, json_field)
        if json_field is not None and not isinstance(
            model._meta.get_field(json_field), models.JSONField
        ):
            raise ConfigurationError(f"{model._meta.label}.{json_field} is not a JSONField")
        self.fields = {name: _column(model, name) for name in dict.fromkeys(fields)}
        self.chunk_size = chunk_size
        self.pk_name = model._meta.pk.attname

    def total(self) -> int | None:
        return self.model._default_manager.count()

    def __iter__(self) -> Iterator[Item]:
        columns = [self.pk_name]
        for column in (self.id_column, self.json_column, *self.fields.values()):
            if column is not None and column not in columns:
                columns.append(column)
        rows = self.model._default_manager.order_by("pk")
        last: Any = None
        while True:
            chunk = rows if last is None else rows.filter(pk__gt=last)
            found = list(chunk.values(*columns)[: self.chunk_size])
            if not found:
                return
            for row in found:
                yield self._item(row)
            last = found[-1][self.pk_name]

    def _item(self, row: dict[str, Any]) -> Item:
        pk = row[self.pk_name]
        where = {"pk": pk}
        try:
            return Item(where, EntityLine(self._id(row, pk).bytes, self._properties(row)))
        except (ValueError, TypeError) as exc:
            return Item(where, None, f"{type(exc).__name__}: {exc}")

    def _id(self, row: dict[str, Any], pk: Any) -> uuid.UUID:
        if self.id_column is None:
            return row_id(self.model, pk)
        value = row[self.id_column]
        if value is None:
            raise InvalidEntityId(f"{self.id_column} is empty")
        return uuid.UUID(bytes=entity_id_bytes(value))

    def _properties(self, row: dict[str, Any]) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        if self.json_column is not None:
            data = row[self.json_column]
            if data is not None:
                if type(data) is not dict:
                    raise TypeError(
                        f"{self.json_column} holds a {type(data).__name__}, not an object of "
                        "properties"
                    )
                properties.update(data)
        for name, column in self.fields.items():
            if name in properties:
                raise ValueError(f"{self.json_column} has a key {name!r}, a column named too")
            properties[name] = _value(name, row[column])
        if "id" in properties:
            raise ValueError(
                "'id' cannot be a property: it is the entity's id (give --id-field, or leave "
                "the id column out)"
            )
        return properties


def _column(model: type[models.Model], name: str) -> str:
    """The attribute name of a concrete field named ``name`` (a foreign key's ``author`` is
    ``author_id``)."""
    try:
        field = model._meta.get_field(name)
    except Exception:
        raise ConfigurationError(f"{model._meta.label} has no field {name!r}") from None
    if not getattr(field, "concrete", False) or getattr(field, "many_to_many", False):
        raise ConfigurationError(f"{model._meta.label}.{name} is not a column")
    return str(field.attname)  # type: ignore[union-attr]


def _value(name: str, value: Any) -> Any:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime):
        return timezone.make_aware(value) if timezone.is_naive(value) else value
    if isinstance(value, _KEPT):
        return value
    raise TypeError(
        f"column {name!r} holds a {type(value).__name__}, which the store cannot hold "
        "(docs/usage.md, Supported values): leave it out of the fields, or convert it first"
    )
