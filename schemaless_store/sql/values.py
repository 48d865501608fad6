"""Database values as the store's values, and the store's datetimes as database values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from . import dialects

# The cleaner reads ``updated`` as text: it only compares it (a version) and passes it back as
# a keyset bound, and text costs no datetime per row (docs/performance-history.md).
UPDATED_TEXT = "CAST(updated AS CHAR)"


def plain(value: Any) -> Any:
    """Binary columns as ``bytes`` (drivers may hand out ``bytearray`` or ``memoryview``)."""
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


def plain_row(row: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row)


def datetime_converter(conn: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """What turns a ``DATETIME`` column into the model's value, as Django's backend would
    (each dialect's :meth:`~.dialects.base.Dialect.datetime_converter`)."""
    return dialects.of(conn).datetime_converter(conn)


def db_datetime(conn: BaseDatabaseWrapper, value: dt.datetime) -> Any:
    """An aware datetime as a ``DATETIME`` parameter of ``conn``."""
    return dialects.of(conn).db_datetime(conn, value)


def as_param(conn: BaseDatabaseWrapper, updated: Any) -> Any:
    """``updated`` as read back (text, or a datetime), as a parameter that compares like the
    stored value."""
    if hasattr(updated, "year"):
        return conn.ops.adapt_datetimefield_value(updated)
    return updated
