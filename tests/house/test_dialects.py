"""Each backend's dialect (schemaless_store.sql.dialects) answers everything the base declares,
and a connection finds its own (no database: Django's connection objects are not opened)."""

from __future__ import annotations

import pytest
from django.db import connections

from schemaless_store.sql import dialects
from schemaless_store.sql.dialects.base import Dialect


@pytest.mark.parametrize("dialect", [dialects.MARIADB, dialects.SQLITE], ids=repr)
def test_a_dialect_answers_every_feature_and_statement_the_base_declares(dialect):
    declared = Dialect.__annotations__
    missing = [name for name in declared if not hasattr(dialect, name)]
    assert not missing, f"{dialect!r} lacks {missing}"
    own = {
        name
        for name, value in vars(Dialect).items()
        if callable(value) and not name.startswith("_")
    }
    for name in own:
        if getattr(type(dialect), name) is getattr(Dialect, name):
            assert name in {"column_type", "datetime_converter", "db_datetime"}, name


def test_the_features_differ_as_the_backends_do():
    assert dialects.for_vendor("mysql") is dialects.MARIADB
    assert dialects.for_vendor("sqlite") is dialects.SQLITE
    assert dialects.MARIADB.fence_by_kill and not dialects.SQLITE.fence_by_kill
    assert dialects.SQLITE.file_database and not dialects.MARIADB.file_database
    assert dialects.MARIADB.column_type("bytes", 40) == "VARBINARY(40)"
    assert dialects.SQLITE.column_type("bytes", 40) == "BLOB"
    assert dialects.MARIADB.column_type("float64", 8) == "DOUBLE"
    assert dialects.SQLITE.column_type("float64", 8) == "REAL"


def test_a_connection_finds_its_backends_dialect():
    for alias in connections:
        conn = connections[alias]
        want = dialects.MARIADB if conn.vendor == "mysql" else dialects.SQLITE
        assert dialects.of(conn) is want, alias
