"""Database values as the store's values, and the store's datetimes as database values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
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
    (each dialect's :meth:`~.dialects.base.Dialect.datetime_converter`). Kept on the
    connection while ``USE_TZ`` and its time zone stay what they were (a ``get`` asks for it
    once per row read)."""
    made = conn.__dict__.get("_schemaless_datetime")
    use_tz, zone = settings.USE_TZ, conn.timezone
    if made is not None and made[0] == use_tz and made[1] is zone:
        return made[2]
    convert = dialects.of(conn).datetime_converter(conn)
    conn.__dict__["_schemaless_datetime"] = (use_tz, zone, convert)
    return convert


def db_datetime(conn: BaseDatabaseWrapper, value: dt.datetime) -> Any:
    """An aware datetime as a ``DATETIME`` parameter of ``conn``."""
    return dialects.of(conn).db_datetime(conn, value)


def as_param(conn: BaseDatabaseWrapper, updated: Any) -> Any:
    """``updated`` as read back (text, or a datetime), as a parameter that compares like the
    stored value."""
    if hasattr(updated, "year"):
        return conn.ops.adapt_datetimefield_value(updated)
    return updated
