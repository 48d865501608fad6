"""Each backend's features and statements, in one place per backend (as Django's ``features``
and ``operations``): :mod:`.mariadb` (a single server or a Galera node) and :mod:`.sqlite`;
:class:`.base.Dialect` says what each answers. The store asks ``dialects.of(connection)``
instead of branching on ``connection.vendor``."""

from __future__ import annotations

from typing import Any

from .base import Dialect
from .mariadb import MariaDB
from .sqlite import SQLite

MARIADB = MariaDB()
SQLITE = SQLite()
# Django's ``vendor`` "mysql" is MariaDB here (the store refuses MySQL, check
# ``schemaless.E007``); any other vendor is served as SQLite is.
_BY_VENDOR = {"mysql": MARIADB}


def for_vendor(vendor: str) -> Dialect:
    """The dialect of Django's ``vendor``."""
    return _BY_VENDOR.get(vendor, SQLITE)


def of(conn: Any) -> Dialect:
    """The dialect of a Django connection (it runs on every statement of the hot paths)."""
    return _BY_VENDOR.get(conn.vendor, SQLITE)


__all__ = ["MARIADB", "SQLITE", "Dialect", "for_vendor", "of"]
