"""Index rows written as SQL literals (``schemaless_store.sql.literals``) on MySQL."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.db import connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemaless_store.config.indexes import Index
from schemaless_store.models import Entity
from schemaless_store.sql import literals
from schemaless_store.tables import index_rows
from schemaless_store.values.index_values import KeyColumn
from tests.support import STORE

BIGINTS = st.integers(-(2**63), 2**63 - 1)
DOUBLES = st.floats(allow_nan=False, allow_infinity=False)
DATETIMES = st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 12, 31))


def test_rows_render_as_hex_digits_and_numbers_only():
    row_format = literals.RowFormat([bytes, int, float, bytes])
    hostile = b"'); DROP TABLE x; --\\\x00"
    rendered = row_format.render([hostile, -(2**63), 0.1, b""])
    assert rendered == b"(X'%b',-9223372036854775808,0.1e0,X'')" % hostile.hex().encode()
    assert literals.RowFormat([float]).render([1e300]) == b"(1e+300)"
    assert literals.RowFormat([float]).render([5]) == b"(5.0e0)"


@pytest.mark.parametrize(
    ("types", "row"),
    [
        ([bytes], ["text"]),  # a str where bytes belong: never written unescaped
        ([bytes], [7]),
        ([int], [1.5]),  # a float where an int belongs: never truncated
        ([int], ["1"]),
        ([float], ["1.0"]),
        ([bytes, bytes], [b"one"]),  # a row of the wrong length
    ],
)
def test_a_value_of_another_type_is_refused(types, row):
    with pytest.raises(TypeError):
        literals.RowFormat(types).render(row)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_floats_without_a_literal_are_refused(value):
    with pytest.raises(ValueError, match="no SQL literal"):
        literals.RowFormat([float]).render([value])


def test_naive_datetimes_render_as_quoted_dates_and_aware_ones_are_refused():
    row_format = literals.RowFormat([dt.datetime])
    assert row_format.render([dt.datetime(2026, 11, 24, 4, 7, 40, 123)]) == (
        b"('2026-11-24 04:07:40.000123')"
    )
    assert row_format.render([dt.datetime(2026, 1, 2)]) == b"('2026-01-02 00:00:00')"
    with pytest.raises(TypeError):
        row_format.render([dt.datetime(2026, 1, 2, tzinfo=dt.UTC)])
    with pytest.raises(TypeError):
        row_format.render(["2026-01-02 00:00:00'); DROP TABLE x; --"])
    with pytest.raises(TypeError):
        row_format.render([dt.date(2026, 1, 2)])


def test_only_bytes_int_float_and_datetime_columns_have_a_format():
    with pytest.raises(TypeError, match="no literal"):
        literals.RowFormat([bytes, str])
    with pytest.raises(TypeError, match="no literal"):
        literals.RowFormat([])


def test_long_batches_are_split_into_bounded_statements(monkeypatch):
    monkeypatch.setattr(literals, "MAX_STATEMENT_BYTES", 100)
    rows = [(bytes([n]) * 10,) for n in range(20)]
    insert = literals.Insert("INSERT INTO t (a) VALUES ", literals.RowFormat([bytes]))
    sql = list(insert.statements(rows))
    assert len(sql) > 1
    assert all(len(s) <= 100 for s in sql)
    rendered = ",".join(s.removeprefix("INSERT INTO t (a) VALUES ") for s in sql)
    assert rendered == ",".join(f"(X'{row[0].hex()}')" for row in rows)
    too_long = [(b"x" * 200,)]  # a row longer than the bound still goes, alone
    assert len(list(insert.statements(too_long))) == 1
    assert list(insert.statements(rows[:1])) == [
        "INSERT INTO t (a) VALUES (X'00000000000000000000')"
    ]


@pytest.mark.mariadb_only
@pytest.mark.django_db(databases="__all__")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(st.binary(max_size=40), BIGINTS, DOUBLES, DATETIMES), min_size=1, max_size=30
    )
)
def test_values_read_back_from_mariadb_are_the_values_written(rows):
    conn = connections["shard_0"]
    rows = [(b, i, f + 0.0, d) for b, i, f, d in rows]  # -0.0: MariaDB keeps no sign on zero
    with conn.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE literal_check (n INT AUTO_INCREMENT PRIMARY KEY, "
            "b VARBINARY(64), i BIGINT, f DOUBLE, d DATETIME(6))"
        )
        try:
            insert = literals.Insert(
                "INSERT INTO literal_check (b, i, f, d) VALUES ",
                literals.RowFormat([bytes, int, float, dt.datetime]),
            )
            for sql in insert.statements(rows):
                cursor.execute(sql)
            cursor.execute("SELECT b, i, f, d FROM literal_check ORDER BY n")
            back = [(bytes(b), i, f, d) for b, i, f, d in cursor.fetchall()]
        finally:
            cursor.execute("DROP TEMPORARY TABLE literal_check")
    assert back == rows


class Shouting(KeyColumn):
    """A user's column type that says nothing of its values' type: the driver renders them."""

    python_type = None

    def to_db(self, value):
        return super().to_db(value.upper() if isinstance(value, str) else value)


@STORE
def test_a_column_type_of_unknown_values_is_still_written_by_the_driver():
    from tests.support import child

    index = Index(
        table="index_shout", properties=["word"], shard_on="word", types={"word": Shouting()}
    )
    with child.declared(index):  # an empty store: ready at once
        if connections["shard_0"].vendor == "mysql":
            assert index_rows._mysql_insert(index, connections["shard_0"].ops.quote_name) is None
        entity = Entity.objects.create(word="hello")
        assert [e.id for e in Entity.objects.filter_index(word="hello")] == [entity.id]
