"""What a kind's query gives besides instances, and what it refuses by name.

- ``values(*fields)`` and ``values_list(*fields, flat=, named=)``: dicts and tuples made in
  Python from the entities read (``"id"``/``"pk"`` is the entity's id; no field named: the
  id and every declared field);
- ``only()``/``defer()`` change nothing (a body is read whole);
- any other method of Django's ``QuerySet`` (``aggregate``, ``annotate``, ``distinct``,
  ``select_for_update``, ``raw``, ...) raises :class:`NotServed` (an ``InvalidQuery``, and an
  ``AttributeError`` for ``hasattr()``) naming the kind and what to do.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from ..exceptions import InvalidQuery

ID_NAMES = ("pk", "id")


class NotServed(InvalidQuery, AttributeError):
    """A ``QuerySet`` method a kind's query does not have: an :class:`InvalidQuery` that
    says why, and an ``AttributeError`` (so ``hasattr()`` answers False, as for any
    attribute an object lacks)."""


class KindShapes:
    """A mixin of :class:`~.query.KindQuery` (see the module docs)."""

    model: Any

    if TYPE_CHECKING:

        def __iter__(self) -> Iterator[Any]: ...

        def _clone(self) -> Any: ...

    def _names(self, fields: tuple[str, ...]) -> list[str]:
        if not fields:
            return ["id", *self.model._kind.fields]
        declared = self.model._kind.fields
        for name in fields:
            if not isinstance(name, str) or "__" in name:
                raise InvalidQuery(
                    f"{self.model.__name__}: values() takes property names, not {name!r}"
                )
        if self.model._kind.extra == "forbid":
            unknown = [n for n in fields if n not in declared and n not in ID_NAMES]
            if unknown:
                raise InvalidQuery(
                    f"{self.model.__name__} has no field {unknown[0]!r} "
                    f"(its fields: {', '.join(declared)})"
                )
        return list(fields)

    def _value(self, entity: Any, name: str) -> Any:
        if name in ID_NAMES:
            return entity.id
        if name in self.model._kind.fields:
            return self.model._kind.fields[name].value_from_object(entity)
        return entity.get(name)

    def values(self, *fields: str) -> list[dict[str, Any]]:
        """The matches as dicts of ``fields`` (read, then shaped in Python)."""
        names = self._names(fields)
        return [{n: self._value(e, n) for n in names} for e in self]

    def values_list(self, *fields: str, flat: bool = False, named: bool = False) -> list[Any]:
        """The matches as tuples of ``fields`` (``flat``: the values of one field)."""
        if flat and len(fields) != 1:
            raise InvalidQuery(
                f"{self.model.__name__}: values_list(flat=True) takes one field, not {fields!r}"
            )
        names = self._names(fields)
        if flat:
            return [self._value(e, names[0]) for e in self]
        rows = [tuple(self._value(e, n) for n in names) for e in self]
        if named:
            row = namedtuple("Row", names)  # type: ignore[misc]
            return [row(*r) for r in rows]
        return rows

    def only(self, *fields: str) -> Any:
        """Nothing to leave out: a body is read whole."""
        return self._clone()

    defer = only

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_") and hasattr(QuerySet, name):
            raise NotServed(
                f"{self.model.__name__}.objects...{name}() is not served by a kind's queryset "
                "(there is no SQL over bodies; docs/kinds.md#querysets): read the entities "
                "and compute it in Python, or keep a counter entity"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
