"""Database values as the store's values, and the store's datetimes as database values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper

# The cleaner reads ``updated`` as text: it only compares it (a version) and passes it back as
# a keyset bound, and text costs no datetime per row (docs/performance-history.md).
UPDATED_TEXT = "CAST(updated AS CHAR)"


def plain(value: Any) -> Any:
    """Binary columns as ``bytes`` (drivers may hand out ``bytearray`` or ``memoryview``)."""
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


def plain_row(row: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row)


def datetime_converter(conn: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """What turns a ``DATETIME`` column into the model's value, as Django's backend would.

    On MySQL that is attaching the connection's time zone (``make_aware`` of a naive value,
    which is all ``convert_datetimefield_value`` does there); other backends use theirs.
    """
    if conn.vendor == "mysql":
        # A DATETIME, or its text (UPDATED_TEXT): parsing the text with fromisoformat() costs a
        # fraction of what mysqlclient's DATETIME conversion does.
        parse = dt.datetime.fromisoformat
        if not settings.USE_TZ:
            return lambda value: parse(value) if type(value) is str else value
        zone = conn.timezone
        if zone is dt.UTC:

            def utc(value: Any) -> Any:
                # The zone parsed with the text: a fraction of what replace(tzinfo=) costs.
                if type(value) is str:
                    return parse(value + "+00:00")
                return None if value is None else value.replace(tzinfo=zone)

            return utc
        return lambda value: (
            None
            if value is None
            else (parse(value) if type(value) is str else value).replace(tzinfo=zone)
        )
    ops = conn.ops
    # Every backend's operations define it; their base class does not.
    convert = ops.convert_datetimefield_value  # type: ignore[attr-defined]
    return lambda value: convert(value, None, conn)


def db_datetime(conn: BaseDatabaseWrapper, value: dt.datetime) -> Any:
    """An aware datetime as a ``DATETIME`` parameter of ``conn``. On MySQL, what
    ``adapt_datetimefield_value`` gives, without its checks (it runs on every put)."""
    if conn.vendor == "mysql":
        return str(
            value.astimezone(conn.timezone).replace(tzinfo=None) if settings.USE_TZ else value
        )
    return conn.ops.adapt_datetimefield_value(value)


def as_param(conn: BaseDatabaseWrapper, updated: Any) -> Any:
    """``updated`` as read back (text, or a datetime), as a parameter that compares like the
    stored value."""
    if hasattr(updated, "year"):
        return conn.ops.adapt_datetimefield_value(updated)
    return updated
