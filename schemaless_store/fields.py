"""Model fields for the ``entities`` table's binary columns, typed as the design asks.

Django's ``BinaryField`` is ``LONGBLOB`` on MariaDB, which cannot be a unique key without a prefix
length, and ``UUIDField`` becomes MariaDB's native ``UUID`` type, which refuses arbitrary 16-byte
values. These fields give ``BINARY(16)`` and ``MEDIUMBLOB`` instead.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .sql import dialects


class Binary16Field(models.BinaryField):
    """``BINARY(16)`` on MariaDB, ``BLOB`` elsewhere; the value is 16 raw bytes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("editable", True)
        kwargs["max_length"] = 16
        super().__init__(*args, **kwargs)

    def db_type(self, connection: Any) -> str:
        return dialects.of(connection).id_field_type

    def deconstruct(self) -> tuple[Any, ...]:
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("max_length", None)
        return name, path, args, kwargs


class BodyField(models.BinaryField):
    """``MEDIUMBLOB`` on MariaDB (up to 16 MiB - 1), ``BLOB`` elsewhere."""

    def db_type(self, connection: Any) -> str:
        return dialects.of(connection).body_field_type
