"""Django's face of the store: the ``Entity`` model and its manager.

An entity is a property bag. Properties are items (``entity["title"]``); the row's own columns
are attributes named ``row_*`` (plus ``added_id``), so no property name can clash with them::

    e = Entity.objects.create(user_id=b"\\x01" * 16, title="hello", updated=1235697046)
    e["updated"]       # 1235697046: a property like any other
    e.row_updated      # datetime: when the row was last written
"""

from __future__ import annotations

import uuid
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    ValuesView,
)
from typing import Any

from django.db import models
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from ..cells import store as cell_store
from ..exceptions import (
    CorruptBody,
    InvalidEntityError,
    InvalidQuery,
    PlacementError,
)
from ..fields import Binary16Field, BodyField
from ..query.allentities import AllEntities
from ..query.asyncapi import AsyncEntity, AsyncManager, sync_only
from ..query.fetch import EntityFetcher, get_many, get_one
from ..query.indexquery import IndexQuery
from ..topology import bucket_map, placement, shards
from ..values import entity_ids
from ..values.codec import decode_body
from ..writes import entity_writes
from ..writes.modify import modify as modify_entity
from .queryset import EntityQuerySet

ROW_FIELDS = ("added_id", "row_id", "row_updated", "row_body")


class EntityManager(AsyncManager, models.Manager.from_queryset(EntityQuerySet)):  # type: ignore[misc]
    """``Entity.objects``: routed reads and writes, index queries, bulk puts."""

    def using(self, alias: str) -> EntityQuerySet:
        return super().using(shards.check_alias(alias))

    @sync_only
    def create(self, placed_with: str | None = None, **properties: Any) -> Entity:
        """Create an entity from keyword properties (``id`` optional); fails if the id exists.

        ``placed_with="user_id"``: the store gives the entity a placed id, in the bucket of
        its ``user_id`` (docs/placement.md), so that it lives with the rows of the indexes
        sharded on ``user_id``. ``placed_with`` is an option, never a property."""
        if placed_with is not None and "id" in properties:
            raise PlacementError("give create() an id or placed_with, not both")
        entity = self.model(**properties)
        if placed_with is not None:
            entity.row_id = placement.placed_id_for(entity.body_properties(), placed_with).bytes
        entity_writes.save(entity, force_insert=True)
        return entity

    @sync_only
    def get(self, *args: Any, **kwargs: Any) -> Entity:
        """``get(id=...)``: fetch one entity from its shard, or raise ``Entity.DoesNotExist``."""
        if args or len(kwargs) != 1 or "id" not in kwargs:
            raise InvalidQuery(
                "Entity.objects.get() takes only id=...; query properties with filter_index(), "
                "row columns with Entity.objects.using(alias).get(...)"
            )
        found = get_one(self.model, kwargs["id"])
        if found is None:
            raise self.model.DoesNotExist(f"no entity with id {kwargs['id']!r}")
        return found

    @sync_only
    def modify(self, id: Any, fn: Callable[[Entity], Any], attempts: int = 10) -> Entity:
        """Read the entity, call ``fn(entity)`` (it changes it in place) and save it with
        ``if_unchanged=True``, again on :class:`~schemaless_store.exceptions.Conflict`, at
        most ``attempts`` times (:mod:`schemaless_store.writes.modify`)."""
        return modify_entity(self.model, id, fn, attempts)

    @sync_only
    def get_many(self, ids: Iterable[Any]) -> dict[uuid.UUID, Entity]:
        """The entities that exist among ``ids``, by id (one query per shard)."""
        return get_many(self.model, ids)

    def filter_index(self, **conditions: Any) -> IndexQuery:
        """A lazy query over the index that serves ``conditions`` (and the ordering given
        later); see :mod:`schemaless_store.query`."""
        return IndexQuery(conditions, EntityFetcher(self.model))

    def all(self) -> AllEntities:
        """Every entity on every shard, shard after shard, by ``added_id`` within a shard:
        lazy, sliceable, countable (see :mod:`schemaless_store.query.allentities`)."""
        return AllEntities(self.model)

    @sync_only
    def bulk_put(
        self,
        entities: Iterable[Mapping[str, Any] | Entity],
        batch_size: int = 500,
        placed_with: str | None = None,
    ) -> list[Entity]:
        """Insert or replace many entities in batches, maintaining every index.

        Each item is a dict of properties (with or without ``id``) or an ``Entity``. Like Django's
        ``bulk_create``, no ``pre_save``/``post_save`` signals are sent. Every item is validated
        before anything is written. ``placed_with``: the items given without an id get placed
        ids, in the bucket of that property (docs/placement.md); ids given are kept.
        """
        items = [e if isinstance(e, Entity) else self.model.from_properties(e) for e in entities]
        if placed_with is not None:
            for item in items:
                if item.has_generated_id:
                    placed = placement.placed_id_for(item.body_properties(), placed_with)
                    item.row_id = placed.bytes
        entity_writes.put_many(items, batch_size=batch_size)
        return items


_DEFAULTS: dict[type, dict[str, Any]] = {}
_IMMUTABLE = (type(None), bytes, str, int)


def _init_defaults(cls: type[models.Model]) -> dict[str, Any]:
    """The field values ``Model.__init__()`` sets on a new instance of ``cls``, when they are all
    constants (None, bytes, str, int) that instances may share; else an empty dict."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        values = {f.attname: f.get_default() for f in cls._meta.concrete_fields}
        constant = all(type(v) in _IMMUTABLE for v in values.values())
        defaults = _DEFAULTS[cls] = values if constant else {}
    return defaults


class Entity(AsyncEntity, models.Model):
    """A property bag stored in the ``entities`` table of the shard that owns its id.

    ``has_generated_id`` is True while the entity carries an id the store generated for it and
    was never written: no row can exist for it, so its insert needs no locking read.
    """

    added_id = models.BigAutoField(primary_key=True)
    row_id = Binary16Field(db_column="id", unique=True)
    row_updated = models.DateTimeField(db_column="updated", db_index=True)
    row_body = BodyField(db_column="body")

    objects = EntityManager()

    class Meta:
        db_table = "entities"
        verbose_name_plural = "entities"

    def __init__(self, *args: Any, **properties: Any) -> None:
        if args:  # Django building an instance from a database row (Model.from_db)
            super().__init__(*args)
            self._props: dict[str, Any] | None = None
            self.has_generated_id = False
            return
        if pre_init.receivers or post_init.receivers or not _init_defaults(type(self)):
            super().__init__()
        else:  # what Model.__init__() does with no arguments, when no one listens to it
            self._state = ModelState()
            self.__dict__.update(_init_defaults(type(self)))
        ident = properties.pop("id", None)
        self.has_generated_id = ident is None
        # Generated ids are time-ordered (entity_ids.new_id): inserts stay local in a B-tree by id.
        self.row_id = entity_ids.new_id() if ident is None else entity_ids.entity_id_bytes(ident)
        self._props = properties

    @classmethod
    def row_builder(cls) -> Callable[[str, int, bytes, Any, bytes], Entity]:
        """What turns ``(alias, added_id, id, updated, body)`` read by the store's own SQL into
        an entity (the read path's hot loop); ask once per batch of rows.

        The same instance ``Model.from_db`` builds, without ``Model.__init__``'s per-field loop;
        when something listens to ``pre_init``/``post_init`` for entities, ``from_db`` itself,
        so that it still hears about every instance.
        """
        # No receivers at all (the usual case) is a cheap test; has_listeners() is not.
        if (pre_init.receivers or post_init.receivers) and (
            pre_init.has_listeners(cls) or post_init.has_listeners(cls)
        ):
            return lambda alias, *row: cls.from_db(alias, ROW_FIELDS, row)
        return cls._from_row

    @classmethod
    def _from_row(
        cls, alias: str, added_id: int, row_id: bytes, updated: Any, body: bytes
    ) -> Entity:
        entity = cls.__new__(cls)
        state = ModelState()
        state.adding = False
        state.db = alias
        entity.__dict__.update(
            _state=state,
            added_id=added_id,
            row_id=row_id,
            row_updated=updated,
            row_body=body,
            _props=None,
            has_generated_id=False,
        )
        return entity

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Entity:
        if not isinstance(properties, Mapping):
            raise InvalidEntityError(
                f"an entity is a dict of properties, not a {type(properties).__name__}"
            )
        bad = [name for name in properties if not isinstance(name, str)]
        if bad:
            raise InvalidEntityError(f"property names are strings, not {bad[0]!r}")
        return cls(**dict(properties))

    def __str__(self) -> str:
        return str(self.id)

    def __repr__(self) -> str:
        return f"<Entity {self.id}>"

    # --- identity ---------------------------------------------------------------------------

    @property
    def id(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.row_id))

    @property
    def shard(self) -> str:
        """The database alias that holds this entity."""
        return bucket_map.alias_for(bytes(self.row_id))

    # --- properties -------------------------------------------------------------------------

    def _properties(self) -> dict[str, Any]:
        if self._props is None:
            try:
                self._props = decode_body(bytes(self.row_body))
            except CorruptBody as exc:
                raise CorruptBody(f"entity {self.id}: {exc}") from None
        return self._props

    @property
    def properties(self) -> dict[str, Any]:
        """A copy of the properties, ``id`` included (as a ``uuid.UUID``)."""
        return {"id": self.id, **self._properties()}

    def __getitem__(self, name: str) -> Any:
        if name == "id":
            return self.id
        # The decoded properties, once decoded, without a call (read per property, per row).
        props = self._props
        return (self._properties() if props is None else props)[name]

    def get(self, name: str, default: Any = None) -> Any:
        if name == "id":
            return self.id
        props = self._props
        return (self._properties() if props is None else props).get(name, default)

    def __contains__(self, name: object) -> bool:
        return name == "id" or name in self._properties()

    def __setitem__(self, name: str, value: Any) -> None:
        if not isinstance(name, str):
            raise InvalidEntityError(f"property names are strings, not {type(name).__name__}")
        if name == "id":
            raise InvalidEntityError("an entity's id cannot change; create a new entity")
        self._properties()[name] = value

    def __delitem__(self, name: str) -> None:
        if name == "id":
            raise InvalidEntityError("an entity's id cannot be removed")
        del self._properties()[name]

    # --- the rest of collections.abc.MutableMapping (Entity is registered as one; a model
    # cannot inherit it: ABCMeta and ModelBase are two metaclasses).

    def keys(self) -> KeysView[str]:
        """A view of the property names, ``id`` first (``len()``, ``in``, set operations)."""
        return KeysView(self)

    def items(self) -> ItemsView[str, Any]:
        """A view of ``(name, value)`` pairs, ``("id", e.id)`` first."""
        return ItemsView(self)

    def values(self) -> ValuesView[Any]:
        """A view of the values, the id first."""
        return ValuesView(self)

    def __iter__(self) -> Iterator[str]:
        yield "id"
        yield from self._properties()

    # ``==`` is Django's model equality, not a mapping's: the same stored entity (same concrete
    # model, so a kind's instance equals the plain Entity of its id), whatever the property
    # values. Django compares ``pk``, which for an entity is ``added_id``, a number per shard:
    # two entities on two shards could share it, so the identity compared is the id.

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, models.Model):
            return NotImplemented
        if self._meta.concrete_model != other._meta.concrete_model:
            return False
        return bytes(self.row_id) == bytes(other.row_id)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        if self._state.adding:  # as Django's: create(placed_with=) may still change its id
            raise TypeError("an entity that is not saved yet is unhashable")
        # The id's first 8 bytes (random or bucket-carrying): no hash(), which varies by process.
        return int.from_bytes(bytes(self.row_id)[:8], "big")

    def __len__(self) -> int:
        return 1 + len(self._properties())

    def pop(self, name: str, *default: Any) -> Any:
        if name == "id":
            raise InvalidEntityError("an entity's id cannot be removed")
        return self._properties().pop(name, *default)

    def popitem(self) -> tuple[str, Any]:
        if not self._properties():
            raise KeyError("popitem(): the entity has no properties but its id")
        return self._properties().popitem()

    def clear(self) -> None:
        """Remove every property (the id stays)."""
        self._properties().clear()

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self[name] = default
        return self[name]

    def update(self, *other: Any, **properties: Any) -> None:
        for name, value in dict(*other, **properties).items():
            if name == "id" and entity_ids.entity_id_bytes(value) == bytes(self.row_id):
                continue  # its own id (e.g. from dict(entity)): nothing changes
            self[name] = value

    def body_properties(self) -> dict[str, Any]:
        """The properties that go into the body (everything but ``id``)."""
        return self._properties()

    # --- persistence ------------------------------------------------------------------------

    @sync_only
    def save(
        self,
        *,
        force_insert: bool | tuple[Any, ...] = False,
        force_update: bool = False,
        using: str | None = None,
        update_fields: Iterable[str] | None = None,
        if_unchanged: bool = False,
    ) -> None:
        """Write the entity and its index rows (docs/design.md#write-protocol). ``using`` is
        ignored (the entity's id picks its shard), and so is ``force_update``: the whole body
        is written, as an insert or an update of the stored row.

        ``update_fields=["title", ...]``: write only those properties' values (a name the
        instance lacks is removed) over the stored body, read under the write's row lock; the
        other stored properties stay as stored (another client's change of them is kept) and
        the instance's other unsaved changes stay unsaved, in memory. The entity must exist
        (else Django's ``DatabaseError``); an empty list writes nothing.

        ``if_unchanged=True``: write only if the stored entity is still what this instance
        read (or last wrote); else raise :class:`~schemaless_store.exceptions.Conflict` and
        write nothing. An instance never read expects no stored row. Checked under the row
        lock the write takes anyway (:mod:`schemaless_store.values.expected`)."""
        entity_writes.save(
            self,
            force_insert=bool(force_insert),
            if_unchanged=if_unchanged,
            update_fields=update_fields,
        )

    save.alters_data = True  # type: ignore[attr-defined]

    @sync_only
    def save_base(
        self,
        *args: Any,
        force_insert: Any = False,
        update_fields: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Where Django's own ``Model.save()`` lands (a subclass calling ``super().save()``
        unbound): the store's write path too, so the indexes follow."""
        entity_writes.save(self, force_insert=bool(force_insert), update_fields=update_fields)

    @sync_only
    def delete(
        self, *args: Any, if_unchanged: bool = False, **kwargs: Any
    ) -> tuple[int, dict[str, int]]:
        """Delete the entity, then its index rows (``if_unchanged``: as for :meth:`save`)."""
        deleted = entity_writes.delete(self, if_unchanged=if_unchanged)
        return deleted, {self._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]

    def refresh_from_db(
        self,
        using: str | None = None,
        fields: Iterable[str] | None = None,
        from_queryset: Any = None,
    ) -> None:
        super().refresh_from_db(
            using=using or self.shard, fields=fields, from_queryset=from_queryset
        )
        self._props = None

    def history(self) -> list[Any]:
        """Every version of this entity the store kept, oldest first, each a
        :class:`~schemaless_store.cells.store.EntityVersion` (``ref_key``, ``created_at``,
        ``properties`` or ``None`` for a deletion). Needs ``SCHEMALESS["HISTORY"] = True``."""
        return cell_store.entity_history(self.row_id)


MutableMapping.register(Entity)
# The row's own columns are the store's to write, never a form's: a kind's ModelForm with
# ``fields = "__all__"`` lists the kind's declared fields only.
for _column in ("row_id", "row_updated", "row_body"):
    Entity._meta.get_field(_column).formfield = lambda **kwargs: None  # type: ignore[method-assign,union-attr]
