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
from ..query.allentities import AllEntities
from ..query.asyncapi import sync_only
from ..query.fetch import EntityFetcher, fetch_by_ids, get_many, get_one
from ..query.indexquery import IndexQuery
from ..topology import placement
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


class KindManager(EntityManager):
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
        entity.full_clean(validate_unique=False, validate_constraints=False)
        if placed_with is not None:
            entity.row_id = placement.placed_id_for(entity.body_properties(), placed_with).bytes
        entity.save(force_insert=True, validate=False)
        return entity

    @sync_only
    def get(self, *args: Any, **kwargs: Any) -> Any:
        """``get(id=...)``: the entity of this kind with that id, or ``DoesNotExist`` (also for
        an id of another kind's entity)."""
        if args or len(kwargs) != 1 or "id" not in kwargs:
            raise InvalidQuery(
                f"{self.model.__name__}.objects.get() takes only id=...; query properties "
                "with filter_index()"
            )
        found = get_one(self.model, kwargs["id"])
        if found is None or found.body_properties().get(KIND_PROPERTY) != self.kind:
            raise self.model.DoesNotExist(f"no {self.model.__name__} with id {kwargs['id']!r}")
        return found

    @sync_only
    def get_many(self, ids: Iterable[Any]) -> dict[uuid.UUID, Any]:
        """The entities of this kind among ``ids``, by id; other kinds' are left out."""
        kind = self.kind
        return {
            key: entity
            for key, entity in get_many(self.model, ids).items()
            if entity.body_properties().get(KIND_PROPERTY) == kind
        }

    def filter_index(self, **conditions: Any) -> IndexQuery:
        """A query over the indexes declared on this kind (``Meta.indexes``)."""
        if KIND_PROPERTY in conditions or any(
            name.startswith(KIND_PROPERTY + "__") for name in conditions
        ):
            raise InvalidQuery(
                f"{self.model.__name__}.objects pins the kind itself; leave out {KIND_PROPERTY!r}"
            )
        return IndexQuery(conditions, KindFetcher(self.model), kind=self.kind)

    def all(self) -> AllEntities:
        """Every entity of this kind, in ``Entity.objects.all()``'s order (lazy, sliceable,
        countable; counting reads the entities, as they are told apart by their bodies)."""
        return AllEntities(self.model, kind=self.kind)

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
            item.full_clean(validate_unique=False, validate_constraints=False)
        return super().bulk_put(items, batch_size=batch_size, placed_with=placed_with)
