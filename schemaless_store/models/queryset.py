"""``EntityQuerySet``: Django's queryset over the entities of one shard, with the bulk writes
that would bypass index maintenance refused, and ``update()`` run through the write protocol
for entities named by id (``Entity.objects.filter(id=x).update(title="...")``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import NotSupportedError, models

from ..exceptions import BulkWriteNotSupported, InvalidQuery
from ..topology import bucket_map, shards
from ..values import entity_ids
from ..writes import entity_writes

_BY_ID = frozenset({"id", "id__in"})


class EntityQuerySet(models.QuerySet):
    """A Django queryset over the entities of *one* shard: ``Entity.objects.using("shard_0")``.

    ``filter(id=...)`` or ``filter(id__in=[...])`` names entities by id (``row_id`` on the
    shard); such a queryset, filtered by nothing else, can :meth:`update` them. Bulk APIs
    that would bypass index maintenance refuse with :class:`BulkWriteNotSupported`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._entity_ids: list[bytes] | None = None  # filter(id=...) alone: the ids named

    def _clone(self) -> EntityQuerySet:
        clone = super()._clone()  # type: ignore[misc]
        clone._entity_ids = self._entity_ids
        return clone

    def filter(self, *args: Any, **kwargs: Any) -> EntityQuerySet:
        if args or not kwargs or not set(kwargs) <= _BY_ID:
            return super().filter(*args, **kwargs)
        keys: list[bytes] = []
        if "id" in kwargs:
            keys.append(entity_ids.entity_id_bytes(kwargs["id"]))
        if "id__in" in kwargs:
            given = kwargs["id__in"]
            if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
                raise InvalidQuery("filter(id__in=...) takes a list of ids")
            in_list = [entity_ids.entity_id_bytes(ident) for ident in given]
            keys = [key for key in in_list if key in keys] if "id" in kwargs else in_list
        unfiltered = not self.query.where and self._entity_ids is None
        # Django's own lazy filter (as its related managers use): the WHERE is built only when
        # something reads the query, which filter(id=x).update() never does (issue 45, item 5).
        self._defer_next_filter = True
        try:
            clone: EntityQuerySet = super().filter(row_id__in=keys)
        finally:
            self._defer_next_filter = False
        clone._entity_ids = keys if unfiltered else None
        return clone

    def __and__(self, other: Any) -> Any:
        return self._combined(other, super().__and__(other), "and")

    def __or__(self, other: Any) -> Any:
        return self._combined(other, super().__or__(other), "or")

    def __xor__(self, other: Any) -> Any:
        return self._combined(other, super().__xor__(other), "xor")  # type: ignore[misc]

    def _combined(self, other: Any, combined: Any, how: str) -> Any:
        """``combined`` (Django's ``self & other``, ``|`` or ``^``) with the ids it names, when
        both name entities by id alone; else with none (its ``update()`` refuses)."""
        if combined is self or combined is other:
            return combined  # Django's answer when one side is empty: that side, as it was
        if self._query.is_sliced:  # type: ignore[attr-defined]
            combined = self._rebuilt(combined)
        if not isinstance(combined, EntityQuerySet):
            return combined
        mine, theirs = self._entity_ids, getattr(other, "_entity_ids", None)
        # A sliced side matches only some of its ids (Django puts a subquery in its place).
        query = self._query  # type: ignore[attr-defined]
        sliced = query.is_sliced or getattr(getattr(other, "_query", None), "is_sliced", True)
        if mine is None or theirs is None or sliced:
            combined._entity_ids = None
            return combined
        in_mine, in_theirs = set(mine), set(theirs)
        both = dict.fromkeys([*mine, *theirs])
        if how == "and":
            combined._entity_ids = [key for key in mine if key in in_theirs]
        elif how == "or":
            combined._entity_ids = list(both)
        else:
            combined._entity_ids = [k for k in both if (k in in_mine) != (k in in_theirs)]
        return combined

    def _rebuilt(self, combined: Any) -> EntityQuerySet:
        """Django puts a sliced left side's place in ``self.model._base_manager.filter(pk__in=
        ...)``: the model's plain queryset, on no shard (it failed on reading, the subquery
        being on another database) and with Django's own ``delete()`` and ``update()``, which
        bypass the index rows. The same query, as this queryset (its class, its shard, what
        it reads: a ``values()`` queryset's columns)."""
        query = self._query  # type: ignore[attr-defined]
        if query.annotations or query.extra:  # not carried into Django's subquery form
            raise InvalidQuery(
                "a sliced queryset with annotations or extra() cannot be combined with | or ^ "
                "on a shard: evaluate it first (list(...)), or combine before slicing"
            )
        rebuilt = self._chain()  # type: ignore[attr-defined]
        rebuilt._deferred_filter = None  # this side's lazy filter is in the subquery already
        rebuilt.query = combined.query
        if self._fields is not None:  # type: ignore[attr-defined]
            rebuilt.query.set_values(self._fields)  # type: ignore[attr-defined]  # values()
        rebuilt._entity_ids = None
        return rebuilt

    def complex_filter(self, filter_obj: Any) -> Any:
        # A condition added without filter(): the ids alone no longer say what matches.
        clone = super().complex_filter(filter_obj)
        if clone is not self and isinstance(clone, EntityQuerySet):
            clone._entity_ids = None
        return clone

    def extra(self, *args: Any, **kwargs: Any) -> Any:
        clone: EntityQuerySet = super().extra(*args, **kwargs)  # type: ignore[assignment]
        clone._entity_ids = None
        return clone

    def _filter_or_exclude(self, negate: bool, args: Any, kwargs: Any) -> EntityQuerySet:
        # Any other filter or exclude: the ids alone no longer say which entities match.
        clone: EntityQuerySet = super()._filter_or_exclude(negate, args, kwargs)  # type: ignore[misc]
        clone._entity_ids = None
        return clone

    def update(self, **properties: Any) -> int:
        """``filter(id=x)`` or ``filter(id__in=[...])``, and nothing else: set ``properties``
        on those entities through the write protocol (one transaction per shard and batch,
        each row read under its lock, its index rows following; no signals, as Django's
        ``update()``). Returns the number changed; a missing id counts 0, and so does an id
        stored on another shard than a ``using(alias)`` queryset's (it matches nothing there,
        as Django's would). ``&``, ``|`` and
        ``^`` of such querysets name the ids both, either or one of them name; ``none()``
        updates nothing; after ``union()`` and the like it refuses, as Django's. Any other
        queryset refuses: it would bypass index maintenance."""
        # _query (Django's own, without its lazy filter): the filter is never built here, so
        # not Django's _not_support_combined_queries(), which reads .query.
        combinator = self._query.combinator  # type: ignore[attr-defined]
        if combinator:  # union() and the like, refused as Django refuses them
            raise NotSupportedError(
                f"Calling QuerySet.update() after {combinator}() is not supported."
            )
        if self._query.is_empty():  # type: ignore[attr-defined]
            return 0  # none(), as Django's
        if self._entity_ids is None or self._query.is_sliced:  # type: ignore[attr-defined]
            raise BulkWriteNotSupported(
                "QuerySet.update() works on entities named by id only: "
                "Entity.objects.filter(id=...) or filter(id__in=[...]), filtered by nothing "
                "else; otherwise change entities with entity[...] = value; entity.save(), or "
                "Entity.objects.bulk_put(dicts)"
            )
        if getattr(self.model, "_kind", None) is not None:
            raise BulkWriteNotSupported(
                f"{self.model.__name__}.objects.filter(id=...).update() is not built for a kind "
                "(its values would not be validated); use save(update_fields=[...])"
            )
        keys, alias = self._entity_ids, self._db  # type: ignore[attr-defined]
        if alias is not None:  # using(alias): the entities stored there, as Django's
            shards.check_alias(alias)  # not a shard: refused, as reading it is
            keys = [key for key in keys if bucket_map.alias_for(key) == alias]
        return entity_writes.update_ids(keys, properties)

    update.alters_data = True  # type: ignore[attr-defined]

    def bulk_create(self, *args: Any, **kwargs: Any) -> Any:
        raise BulkWriteNotSupported(
            "bulk_create() would bypass index maintenance; use Entity.objects.bulk_put(dicts)"
        )

    def bulk_update(self, *args: Any, **kwargs: Any) -> Any:
        raise BulkWriteNotSupported(
            "bulk_update() would bypass index maintenance; use Entity.objects.bulk_put(dicts)"
        )

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete each entity through the write path, so its index rows go too."""
        deleted = 0
        for entity in self.iterator(chunk_size=500):
            deleted += entity_writes.delete(entity)
        return deleted, {self.model._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]

    @property
    def db(self) -> str:
        # The router has no opinion without an instance: Django's answer is then "default",
        # where no entity lives.
        alias = super().db
        if alias not in shards.shard_aliases():
            raise InvalidQuery(
                "entities live on shards: use Entity.objects.get(id=...), get_many(), "
                "filter_index(...), all(), or Entity.objects.using(<shard alias>)"
            )
        return alias
