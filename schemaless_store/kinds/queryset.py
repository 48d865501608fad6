"""A kind's Django queryset: ``Entry.objects.using(alias)``, ``filter(id=...)`` and every other
entry point that reaches ``QuerySet``, pinned to the kind.

The kind is a property in each entity's body, not a column, so SQL cannot pin it: the rows are
read and those of other kinds dropped as they are built (:class:`KindIterable`). What SQL would
answer over every row of the shard is answered from the kind's entities instead: ``count()``
and ``exists()`` read them, slicing reads up to the slice's end and gives a list, ``get()`` and
``earliest()``/``latest()`` read without a ``LIMIT``. What cannot be answered per entity
(``values()``, ``values_list()``, ``aggregate()``, ``raw()``) is refused. Another kind's entity
never comes back as this kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

from django.db import NotSupportedError
from django.db.models.query import MAX_GET_RESULTS, ModelIterable

from ..config.indexes import KIND_PROPERTY
from ..exceptions import InvalidQuery
from ..models.queryset import EntityQuerySet


class KindIterable(ModelIterable):
    """Django's model instances, without those of other kinds."""

    def __iter__(self) -> Iterator[Any]:
        model: Any = self.queryset.model
        kind = model._kind.name
        for entity in super().__iter__():
            if entity.body_properties().get(KIND_PROPERTY) == kind:
                yield entity


class KindQuerySet(EntityQuerySet):
    """The entities of one kind on *one* shard (see the module docs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._iterable_class = KindIterable
        # Meta.ordering names declared fields, which have no column: it orders the kind's
        # index queries (Book.objects.filter(...)), never SQL over a shard's rows.
        self.query.default_ordering = False

    def order_by(self, *field_names: Any) -> Any:
        declared = self.model._kind.fields
        named = [f for f in field_names if isinstance(f, str) and f.lstrip("-") in declared]
        if named:
            name = self.model.__name__
            raise InvalidQuery(
                f"{name}.objects.using(alias) reads one shard's rows, ordered by their "
                f"columns (added_id, row_updated); {named[0]!r} is a property: order by it "
                f"through an index, {name}.objects.order_by({named[0]!r})"
            )
        return super().order_by(*field_names)

    def _refused(self, what: str) -> InvalidQuery:
        return InvalidQuery(
            f"{self.model.__name__}: {what} would read other kinds' rows too (the kind is in "
            "each entity's body, not a column); iterate the queryset, or use "
            f"{self.model.__name__}.objects.filter_index() or all()"
        )

    def __getitem__(self, k: Any) -> Any:
        """An index or a slice: read up to its end, other kinds left out (a slice is a list)."""
        if self._result_cache is not None:
            return self._result_cache[k]
        if not isinstance(k, int | slice):
            raise TypeError(f"QuerySet indices must be integers or slices, not {type(k).__name__}.")
        if (isinstance(k, int) and k < 0) or (
            isinstance(k, slice)
            and ((k.start is not None and k.start < 0) or (k.stop is not None and k.stop < 0))
        ):
            raise ValueError("Negative indexing is not supported.")
        if isinstance(k, slice):
            return list(islice(self.iterator(), k.start, k.stop, k.step))
        found = list(islice(self.iterator(), k, k + 1))
        if not found:
            raise IndexError(f"{self.model.__name__} index out of range")
        return found[0]

    def get(self, *args: Any, **kwargs: Any) -> Any:
        if self.query.combinator and (args or kwargs):
            raise NotSupportedError(
                f"Calling QuerySet.get(...) with filters after {self.query.combinator}() is "
                "not supported."
            )
        clone = (
            self._chain()  # type: ignore[attr-defined]
            if self.query.combinator
            else self.filter(*args, **kwargs)
        )
        if self.query.can_filter() and not self.query.distinct_fields:
            clone = clone.order_by()
        found = list(islice(clone.iterator(), MAX_GET_RESULTS + 1))
        name = self.model._meta.object_name
        if len(found) == 1:
            return found[0]
        if not found:
            raise self.model.DoesNotExist(f"{name} matching query does not exist.")
        more = "more than " if len(found) > MAX_GET_RESULTS else ""
        raise self.model.MultipleObjectsReturned(
            f"get() returned more than one {name} -- it returned "
            f"{more}{min(len(found), MAX_GET_RESULTS)}!"
        )

    def _earliest(self, *fields: Any) -> Any:
        order_by = fields or self.model._meta.get_latest_by
        if order_by is None:
            raise ValueError(
                "earliest() and latest() require either fields as positional arguments or "
                "'get_latest_by' in the model's Meta."
            )
        if not isinstance(order_by, tuple | list):
            order_by = (order_by,)
        ordered = self._chain()  # type: ignore[attr-defined]
        ordered.query.clear_ordering(force=True)
        ordered.query.add_ordering(*order_by)
        for entity in ordered.iterator():
            return entity
        raise self.model.DoesNotExist(
            f"{self.model._meta.object_name} matching query does not exist."
        )

    def count(self) -> int:
        """The number of this kind's entities: they are read, not counted by SQL."""
        if self._result_cache is not None:
            return len(self._result_cache)
        return sum(1 for _entity in self.iterator())

    def exists(self) -> bool:
        if self._result_cache is not None:
            return bool(self._result_cache)
        return next(self.iterator(), None) is not None

    def contains(self, obj: Any) -> bool:
        if self._result_cache is not None:
            return obj in self._result_cache
        if getattr(obj, "_meta", None) is None:
            raise TypeError("'obj' must be a model instance.")
        if obj._meta.concrete_model is not self.model._meta.concrete_model:
            return False
        return self.filter(id=obj.id).exists()

    def values(self, *fields: Any, **expressions: Any) -> Any:
        raise self._refused("values()")

    def values_list(self, *fields: Any, flat: bool = False, named: bool = False) -> Any:
        raise self._refused("values_list()")

    def aggregate(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refused("aggregate()")

    def raw(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refused("raw()")
