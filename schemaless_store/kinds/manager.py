"""``Entry.objects``: the entity manager with the kind pinned. Every read leaves other kinds
out (``get`` of another kind's id raises ``Entry.DoesNotExist``), index queries use only the
indexes declared on the kind, and writes build instances of the kind (so they are validated).
Its Django querysets (``using(alias)``, ``filter(id=...)``, ...) are :mod:`.queryset`'s."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..config.indexes import KIND_PROPERTY
from ..exceptions import InvalidQuery, PlacementError
from ..models.entity import Entity, EntityManager
from ..query.asyncapi import sync_only
from ..query.fetch import EntityFetcher, fetch_by_ids, get_many, get_one
from ..query.indexquery import IndexQuery
from ..topology import placement
from .asyncmethods import AsyncKindManager
from .lookups import Lookups
from .query import KindQuery
from .queryset import KindQuerySet


class KindFetcher(EntityFetcher):
    """Ids to the entities of one kind (an index query's re-check already holds the kind;
    this guards the ids a caller gives)."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.kind = model._kind.name

    def fetch(self, ids: Iterable[bytes]) -> dict[bytes, Any]:
        kind = self.kind
        return {
            key: entity
            for key, entity in fetch_by_ids(self.model, ids).items()
            if entity.body_properties().get(KIND_PROPERTY) == kind
        }


class KindManager(AsyncKindManager, EntityManager):
    """The manager of a kind (see the module docs)."""

    _queryset_class = KindQuerySet

    @property
    def kind(self) -> str:
        return str(self.model._kind.name)

    @sync_only
    def create(self, placed_with: str | None = None, **properties: Any) -> Any:
        """Create an entity of this kind: validated (``ValidationError``, nothing written),
        then inserted as ``Entity.objects.create()`` does (``placed_with`` included)."""
        if placed_with is not None and "id" in properties:
            raise PlacementError("give create() an id or placed_with, not both")
        entity = self.model(**properties)
        entity.full_clean()
        if placed_with is not None:
            entity.row_id = placement.placed_id_for(entity.body_properties(), placed_with).bytes
        entity.save(force_insert=True, validate=False)
        return entity

    @sync_only
    def get(self, *args: Any, **kwargs: Any) -> Any:
        """``get(id=...)`` or ``get(pk=...)``: the entity of this kind with that id, or
        ``DoesNotExist`` (also for an id of another kind's entity); ``get(title=...)``: the
        one match of the conditions, through an index (a unique one, say)."""
        if args or len(kwargs) != 1 or not set(kwargs) & {"id", "pk"}:
            return self.query().get(*args, **kwargs)
        ident = kwargs.get("id", kwargs.get("pk"))
        found = get_one(self.model, getattr(ident, "id", ident))
        if found is None or found.body_properties().get(KIND_PROPERTY) != self.kind:
            raise self.model.DoesNotExist(f"no {self.model.__name__} with id {ident!r}")
        return found

    # --- the queryset API (:mod:`.query`) ----------------------------------------------------

    def query(self) -> KindQuery:
        """Every entity of the kind, as a :class:`~.query.KindQuery` to narrow."""
        return KindQuery(self.model)

    def all(self) -> KindQuery:  # type: ignore[override]
        """Every entity of this kind, in ``Entity.objects.all()``'s order (or by
        ``Meta.ordering``, when an index serves it); lazy, sliceable, countable (counting
        reads the entities, as they are told apart by their bodies)."""
        return self.query()

    def filter(self, *args: Any, **kwargs: Any) -> KindQuery:
        return self.query().filter(*args, **kwargs)

    def exclude(self, *args: Any, **kwargs: Any) -> KindQuery:
        return self.query().exclude(*args, **kwargs)

    def order_by(self, *fields: str) -> KindQuery:
        return self.query().order_by(*fields)

    def values(self, *fields: str) -> Any:
        return self.query().values(*fields)

    def values_list(self, *fields: str, flat: bool = False, named: bool = False) -> Any:
        return self.query().values_list(*fields, flat=flat, named=named)

    def none(self) -> KindQuery:
        return self.query().none()

    def select_related(self, *names: str) -> KindQuery:
        return self.query().select_related(*names)

    def prefetch_related(self, *names: str) -> KindQuery:
        return self.query().prefetch_related(*names)

    @sync_only
    def count(self) -> int:
        return self.query().count()

    @sync_only
    def exists(self) -> bool:
        return self.query().exists()

    @sync_only
    def first(self) -> Any:
        return self.query().first()

    @sync_only
    def last(self) -> Any:
        return self.query().last()

    @sync_only
    def earliest(self, field: str) -> Any:
        return self.query().earliest(field)

    @sync_only
    def latest(self, field: str) -> Any:
        return self.query().latest(field)

    def iterator(self, chunk_size: int | None = None) -> Any:
        return self.query().iterator(chunk_size)

    @sync_only
    def in_bulk(self, id_list: Any = None, *, field_name: str = "pk") -> dict[uuid.UUID, Any]:
        return self.query().in_bulk(id_list, field_name=field_name)

    @sync_only
    def get_or_create(self, defaults: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        return self.query().get_or_create(defaults, **kwargs)

    @sync_only
    def update_or_create(
        self,
        defaults: dict[str, Any] | None = None,
        create_defaults: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        return self.query().update_or_create(defaults, create_defaults, **kwargs)

    @sync_only
    def get_many(self, ids: Iterable[Any]) -> dict[uuid.UUID, Any]:
        """The entities of this kind among ``ids``, by id; other kinds' are left out."""
        kind = self.kind
        return {
            key: entity
            for key, entity in get_many(self.model, ids).items()
            if entity.body_properties().get(KIND_PROPERTY) == kind
        }

    def filter_index(self, *args: Any, **conditions: Any) -> IndexQuery:
        """A query over the indexes declared on this kind (``Meta.indexes``), each value as
        the kind stores it (``published__gte=date(2002, 1, 1)`` on a ``DateField``)."""
        name = self.model.__name__
        if args:
            raise InvalidQuery(
                f"{name}.objects.filter_index() takes keyword conditions, not {args[0]!r}; "
                f"for Q objects (| and &) use {name}.objects.filter(Q(...) | Q(...))"
            )
        if KIND_PROPERTY in conditions or any(
            key.startswith(KIND_PROPERTY + "__") for key in conditions
        ):
            raise InvalidQuery(f"{name}.objects pins the kind itself; leave out {KIND_PROPERTY!r}")
        lookups = Lookups(self.model)
        stored = {}
        for key, value in conditions.items():
            prop, _, lookup = key.partition("__")
            listed = not isinstance(value, str | bytes) and isinstance(value, Iterable)
            if lookup == "in" and listed:
                stored[key] = [lookups.stored(prop, key, v) for v in value]
            else:
                stored[key] = lookups.stored(prop, key, value)
        return self.index_query(stored)

    def index_query(self, conditions: dict[str, Any]) -> IndexQuery:
        """:meth:`filter_index` of values already as the kind stores them."""
        return IndexQuery(conditions, KindFetcher(self.model), kind=self.kind)

    @sync_only
    def modify(self, id: Any, fn: Callable[[Any], Any], attempts: int = 10) -> Any:
        """As ``Entity.objects.modify()``, for an entity of this kind (``DoesNotExist`` for
        another kind's); each attempt's save is validated."""
        self.get(id=id)
        return super().modify(id, fn, attempts)

    @sync_only
    def bulk_put(
        self,
        entities: Iterable[Mapping[str, Any] | Entity],
        batch_size: int = 500,
        placed_with: str | None = None,
    ) -> list[Any]:
        """As ``Entity.objects.bulk_put()``; every item is made an instance of this kind and
        validated (``full_clean()``) before anything is written."""
        items = [
            e if isinstance(e, self.model) else self.model.from_properties(dict(e))
            for e in entities
        ]
        for item in items:
            item.full_clean()
        return super().bulk_put(items, batch_size=batch_size, placed_with=placed_with)
