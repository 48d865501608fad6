"""Django's face of the store: the ``Entity`` model, its manager, and the metadata models.

An entity is a property bag. Properties are items (``entity["title"]``); the row's own columns
are attributes named ``row_*`` (plus ``added_id``), so no property name can clash with them::

    e = Entity.objects.create(user_id=b"\\x01" * 16, title="hello", updated=1235697046)
    e["updated"]       # 1235697046: a property like any other
    e.row_updated      # datetime: when the row was last written
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from django.db import models
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from . import keys, query, shards, writes
from .codec import decode_body
from .exceptions import (
    BulkWriteNotSupported,
    CellImmutable,
    CorruptBody,
    InvalidEntityError,
    InvalidQuery,
)
from .fields import Binary16Field, BodyField

ROW_FIELDS = ("added_id", "row_id", "row_updated", "row_body")


class EntityQuerySet(models.QuerySet):
    """A Django queryset over the entities of *one* shard: ``Entity.objects.using("shard_0")``.

    Bulk APIs that would bypass index maintenance refuse with :class:`BulkWriteNotSupported`.
    """

    def update(self, **kwargs: Any) -> int:
        raise BulkWriteNotSupported(
            "QuerySet.update() would bypass index maintenance; change entities with "
            "entity[...] = value; entity.save(), or Entity.objects.bulk_put(dicts)"
        )

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
            deleted += writes.delete(entity)
        return deleted, {Entity._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]

    @property
    def db(self) -> str:
        alias = self._db
        if alias is None:
            raise InvalidQuery(
                "entities live on shards: use Entity.objects.get(id=...), get_many(), "
                "filter_index(...), all(), or Entity.objects.using(<shard alias>)"
            )
        return alias


class EntityManager(models.Manager.from_queryset(EntityQuerySet)):  # type: ignore[misc]
    """``Entity.objects``: routed reads and writes, index queries, bulk puts."""

    def using(self, alias: str) -> EntityQuerySet:
        return super().using(shards.check_alias(alias))

    def create(self, **properties: Any) -> Entity:
        """Create an entity from keyword properties (``id`` optional); fails if the id exists."""
        entity = self.model(**properties)
        writes.create(entity)
        return entity

    def get(self, *args: Any, **kwargs: Any) -> Entity:
        """``get(id=...)``: fetch one entity from its shard, or raise ``Entity.DoesNotExist``."""
        if args or len(kwargs) != 1 or "id" not in kwargs:
            raise InvalidQuery(
                "Entity.objects.get() takes only id=...; query properties with filter_index(), "
                "row columns with Entity.objects.using(alias).get(...)"
            )
        found = query.get_one(kwargs["id"])
        if found is None:
            raise self.model.DoesNotExist(f"no entity with id {kwargs['id']!r}")
        return found

    def get_many(self, ids: Iterable[Any]) -> dict[uuid.UUID, Entity]:
        """The entities that exist among ``ids``, by id (one query per shard)."""
        return query.get_many(ids)

    def filter_index(self, **conditions: Any) -> Any:
        """A lazy query over the index that covers ``conditions``; see :mod:`.query`."""
        return query.IndexQuery(conditions)

    def all(self) -> Any:
        """Every entity on every shard (for browsing; walks the shards one after another)."""
        return query.AllEntities()

    def bulk_put(
        self, entities: Iterable[Mapping[str, Any] | Entity], batch_size: int = 500
    ) -> list[Entity]:
        """Insert or replace many entities in batches, maintaining every index.

        Each item is a dict of properties (with or without ``id``) or an ``Entity``. Like Django's
        ``bulk_create``, no ``pre_save``/``post_save`` signals are sent. Every item is validated
        before anything is written.
        """
        items = [e if isinstance(e, Entity) else self.model.from_properties(e) for e in entities]
        writes.put_many(items, batch_size=batch_size)
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


class Entity(models.Model):
    """A property bag stored in the ``entities`` table of the shard that owns its id."""

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
            self._generated_id = False
            return
        if pre_init.receivers or post_init.receivers or not _init_defaults(type(self)):
            super().__init__()
        else:  # what Model.__init__() does with no arguments, when no one listens to it
            self._state = ModelState()
            self.__dict__.update(_init_defaults(type(self)))
        ident = properties.pop("id", None)
        self._generated_id = ident is None
        self.row_id = uuid.uuid4().bytes if ident is None else keys.entity_id_bytes(ident)
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
            _generated_id=False,
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
        return shards.alias_for(bytes(self.row_id))

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
        return self._properties()[name]

    def get(self, name: str, default: Any = None) -> Any:
        if name == "id":
            return self.id
        return self._properties().get(name, default)

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

    def keys(self) -> Iterator[str]:
        yield "id"
        yield from self._properties()

    def items(self) -> Iterator[tuple[str, Any]]:
        yield "id", self.id
        yield from self._properties().items()

    def body_properties(self) -> dict[str, Any]:
        """The properties that go into the body (everything but ``id``)."""
        return self._properties()

    # --- persistence ------------------------------------------------------------------------

    def save(self, *args: Any, force_insert: bool = False, **kwargs: Any) -> None:
        """Write the entity and its index rows (DESIGN section 3). ``using`` is ignored:
        the entity's id picks its shard."""
        writes.save(self, force_insert=bool(force_insert))

    save.alters_data = True  # type: ignore[attr-defined]

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        """Delete the entity, then its index rows."""
        deleted = writes.delete(self)
        return deleted, {self._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]

    def refresh_from_db(self, using: str | None = None, fields: Any = None, **kwargs: Any) -> None:
        super().refresh_from_db(using=using or self.shard, fields=fields, **kwargs)
        self._props = None

    def history(self) -> list[Any]:
        """Every version of this entity the store kept, oldest first, each a
        :class:`~schemaless_store.cells.EntityVersion` (``ref_key``, ``created_at``,
        ``properties`` or ``None`` for a deletion). Needs ``SCHEMALESS["HISTORY"] = True``."""
        from . import cells

        return cells.entity_history(self.row_id)


class CellQuerySet(models.QuerySet):
    """A Django queryset over the cells of *one* shard: ``Cell.objects.using("shard_0")``.

    Cells are immutable: the bulk APIs that would change or remove them refuse.
    """

    def update(self, **kwargs: Any) -> int:
        raise CellImmutable("cells are immutable: write a new version with Cell.objects.put()")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise CellImmutable("cells are immutable: they are never deleted")

    delete.alters_data = True  # type: ignore[attr-defined]

    def bulk_update(self, *args: Any, **kwargs: Any) -> Any:
        raise CellImmutable("cells are immutable: write a new version with Cell.objects.put()")

    def bulk_create(self, *args: Any, **kwargs: Any) -> Any:
        raise BulkWriteNotSupported("write cells with Cell.objects.put()")

    @property
    def db(self) -> str:
        alias = self._db
        if alias is None:
            raise InvalidQuery(
                "cells live on shards: use Cell.objects.get_cell(), versions(), row(), "
                "or Cell.objects.using(<shard alias>)"
            )
        return alias


class CellManager(models.Manager.from_queryset(CellQuerySet)):  # type: ignore[misc]
    """``Cell.objects``: the versioned cell store (see :mod:`.cells`)."""

    def using(self, alias: str) -> CellQuerySet:
        return super().using(shards.check_alias(alias))

    def put(
        self,
        row_key: Any,
        column_name: str,
        body: Mapping[str, Any] | None,
        ref_key: int | None = None,
    ) -> Cell:
        """Write a new version of ``(row_key, column_name)``: the next ``ref_key``, or the one
        given (writing an existing version with another body raises :class:`CellImmutable`)."""
        from . import cells

        return cells.put(row_key, column_name, body, ref_key)

    def get_cell(self, row_key: Any, column_name: str, ref_key: int | None = None) -> Cell:
        """The latest version of a column (or version ``ref_key``); ``Cell.DoesNotExist``."""
        from . import cells

        return cells.get(row_key, column_name, ref_key)

    def versions(self, row_key: Any, column_name: str) -> list[Cell]:
        """Every version of a column, oldest first."""
        from . import cells

        return cells.versions(row_key, column_name)

    def row(self, row_key: Any) -> dict[str, Cell]:
        """The latest version of every column of a row, by column name."""
        from . import cells

        return cells.row(row_key)

    def filter_index(self, column_name: str, **conditions: Any) -> Any:
        """A lazy query over the indexes of one cell column (``Index(..., column=...)``): the
        latest version of each matching row, re-checked like entities (see :mod:`.query`)."""
        from .cells import check_column

        check_column(column_name)
        return query.IndexQuery(conditions, column=column_name)


class Cell(models.Model):
    """One immutable version of one column of one row, in the ``cell`` table of the shard that
    owns ``row_key`` (the same routing as entities: a row's cells live with its entity)."""

    added_at = models.BigAutoField(primary_key=True)
    row_key_bytes = Binary16Field(db_column="row_key")
    column_name = models.CharField(max_length=64)
    ref_key = models.BigIntegerField()
    body_bytes = BodyField(db_column="body", null=True)
    created_at = models.DateTimeField()

    objects = CellManager()

    class Meta:
        db_table = "cell"
        constraints = [
            models.UniqueConstraint(
                fields=["row_key_bytes", "column_name", "ref_key"], name="cell_idx"
            )
        ]

    def __str__(self) -> str:
        return f"{self.row_key}/{self.column_name}@{self.ref_key}"

    def __repr__(self) -> str:
        return f"<Cell {self}>"

    @property
    def row_key(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.row_key_bytes))

    @property
    def shard(self) -> str:
        return shards.alias_for(bytes(self.row_key_bytes))

    @property
    def body(self) -> dict[str, Any] | None:
        """The decoded body (a new dict each time), or None for a cell written without one
        (an entity's deletion in its history)."""
        if self.body_bytes is None:
            return None
        try:
            return decode_body(bytes(self.body_bytes))
        except CorruptBody as exc:
            raise CorruptBody(f"cell {self}: {exc}") from None

    def body_properties(self) -> dict[str, Any]:
        """The decoded body, decoded once (``{}`` for a cell without a body): what index
        queries re-check."""
        cached = self.__dict__.get("_decoded")
        if cached is None:
            cached = self.__dict__["_decoded"] = self.body or {}
        return cached

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise CellImmutable("write cells with Cell.objects.put(); a stored cell never changes")

    save.alters_data = True  # type: ignore[attr-defined]

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise CellImmutable("cells are immutable: they are never deleted")

    delete.alters_data = True  # type: ignore[attr-defined]


class CellHead(models.Model):
    """The latest version of each ``(row_key, column_name)`` of user cells, on the same shard.

    ``Cell.objects.put`` locks this row (``SELECT ... FOR UPDATE``) to number the next version,
    so concurrent writers of one column queue instead of colliding, and updates it in the same
    transaction as it appends the cell; reading the latest version of a column is one lookup.
    (Entity history is not here: the entity row is its head.)
    """

    added_id = models.BigAutoField(primary_key=True)
    row_key_bytes = Binary16Field(db_column="row_key")
    column_name = models.CharField(max_length=64)
    ref_key = models.BigIntegerField()
    updated = models.DateTimeField(db_index=True)
    body_bytes = BodyField(db_column="body", null=True)

    class Meta:
        db_table = "cell_head"
        constraints = [
            models.UniqueConstraint(fields=["row_key_bytes", "column_name"], name="cell_head_key")
        ]

    def __str__(self) -> str:
        return f"{uuid.UUID(bytes=bytes(self.row_key_bytes))}/{self.column_name}@{self.ref_key}"


class IndexState(models.Model):
    """Lifecycle of an index, kept in the metadata database (``default``)."""

    BUILDING = "building"
    READY = "ready"
    RETIRED = "retired"
    STATES = [(BUILDING, "building"), (READY, "ready"), (RETIRED, "retired")]

    name = models.CharField(max_length=64, primary_key=True)
    state = models.CharField(max_length=16, choices=STATES)
    properties = models.JSONField(default=list)
    shard_on = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)
    changed = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "index state"

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class CleanerCheckpoint(models.Model):
    """How far a backfill got on one (index, shard): resumes from ``last_added_id``."""

    index_name = models.CharField(max_length=64)
    shard = models.CharField(max_length=64)
    last_added_id = models.BigIntegerField(default=0)
    # The highest added_id when the backfill started: rows above it are maintained by writers.
    target_added_id = models.BigIntegerField(null=True)
    entities_done = models.BigIntegerField(default=0)
    entities_total = models.BigIntegerField(null=True)
    done = models.BooleanField(default=False)
    changed = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["index_name", "shard"], name="one_checkpoint_per_shard")
        ]

    def __str__(self) -> str:
        return f"{self.index_name}@{self.shard}: {self.last_added_id}"


class CleanerPass(models.Model):
    """One cleaner pass over one (index, shard), for the admin's index-health page."""

    KINDS = [("backfill", "backfill"), ("repair", "repair"), ("sweep", "sweep")]
    STATUSES = [
        ("running", "running"),
        ("done", "done"),
        ("interrupted", "interrupted"),
        ("failed", "failed"),
    ]

    index_name = models.CharField(max_length=64, db_index=True)
    shard = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=KINDS)
    status = models.CharField(max_length=16, choices=STATUSES, default="running")
    started = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)
    entities_scanned = models.BigIntegerField(default=0)
    rows_inserted = models.BigIntegerField(default=0)
    stale_removed = models.BigIntegerField(default=0)
    orphans_removed = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-started"]
        verbose_name_plural = "cleaner passes"

    def __str__(self) -> str:
        return f"{self.kind} of {self.index_name}@{self.shard} ({self.status})"
