"""The cell store's models, on shards: ``Cell`` (one immutable version of one column of one
row) and ``CellHead`` (the latest version of each user column). The store itself is
:mod:`schemaless_store.cells.store`; these are its Django face."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import models

from ..cells import store as cell_store
from ..exceptions import BulkWriteNotSupported, CellImmutable, CorruptBody, InvalidQuery
from ..fields import Binary16Field, BodyField
from ..query.indexquery import IndexQuery
from ..topology import bucket_map, shards
from ..values.codec import decode_body


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
        alias = super().db  # "default" unless a shard was chosen with using()
        if alias not in shards.shard_aliases():
            raise InvalidQuery(
                "cells live on shards: use Cell.objects.get_cell(), versions(), row(), "
                "or Cell.objects.using(<shard alias>)"
            )
        return alias


class CellManager(models.Manager.from_queryset(CellQuerySet)):  # type: ignore[misc]
    """``Cell.objects``: the versioned cell store (see :mod:`schemaless_store.cells.store`)."""

    def using(self, alias: str) -> CellQuerySet:
        return super().using(shards.check_alias(alias))

    def put(
        self,
        row_key: Any,
        column_name: str,
        body: Mapping[str, Any] | None,
        ref_key: int | None = None,
        created: dt.datetime | None = None,
    ) -> Cell:
        """Write a new version of ``(row_key, column_name)``: the next ``ref_key``, or the one
        given (writing an existing version with another body raises :class:`CellImmutable`).
        ``created`` (aware) is its ``created_at``, by default now (a restore gives the
        original)."""
        return cell_store.put(self.model, row_key, column_name, body, ref_key, created)

    def get_cell(self, row_key: Any, column_name: str, ref_key: int | None = None) -> Cell:
        """The latest version of a column (or version ``ref_key``); ``Cell.DoesNotExist``."""
        return cell_store.get(self.model, row_key, column_name, ref_key)

    def versions(self, row_key: Any, column_name: str) -> list[Cell]:
        """Every version of a column, oldest first."""
        return cell_store.versions(self.model, row_key, column_name)

    def row(self, row_key: Any) -> dict[str, Cell]:
        """The latest version of every column of a row, by column name."""
        return cell_store.row(self.model, row_key)

    def filter_index(self, column_name: str, **conditions: Any) -> IndexQuery:
        """A lazy query over the indexes of one cell column (``Index(..., column=...)``): the
        latest version of each matching row, re-checked like entities (same rule and API as
        ``Entity.objects.filter_index``)."""
        cell_store.check_column(column_name)
        return IndexQuery(conditions, cell_store.CellFetcher(self.model, column_name), column_name)


class Cell(models.Model):
    """One immutable version of one column of one row, in the ``cell`` table of the shard that
    owns ``row_key`` (the same routing as entities: a row's cells live with its entity)."""

    added_at = models.BigAutoField(primary_key=True)
    row_key_bytes = Binary16Field(db_column="row_key")
    column_name = models.CharField(max_length=64)
    ref_key = models.BigIntegerField()
    body_bytes = BodyField(db_column="body", null=True)
    created_at = models.DateTimeField()
    # A copy a bucket move brought here: the change it records was made (and is in the feed)
    # on the shard it came from, so the feed here passes over it (docs/resharding.md).
    moved = models.BooleanField(default=False, db_default=False)

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
        return bucket_map.alias_for(bytes(self.row_key_bytes))

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
