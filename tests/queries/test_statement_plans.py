"""The plans MariaDB picks for the store's key lookups: no statement scans what a key finds.

MariaDB 10.11 runs a row ``IN`` with a single tuple, ``(a, b) IN ((x, y))``, as a full table
scan; a write that changed an indexed value deleted its old index row that way, so every such
update got slower as the index grew (issue 45, item 0). ``EXPLAIN`` of each statement shape, on a
table large enough that a scan shows, must name the key.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections

from schemaless_store.tables.entities import keys_where

pytestmark = [pytest.mark.mariadb_only, pytest.mark.django_db(databases="__all__")]

ROWS = 20_000


@pytest.fixture
def probe() -> Any:
    """A table shaped as an index table (key: value, then entity id), of ``ROWS`` rows."""
    conn = connections["shard_0"]
    with conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS plan_probe")
        cursor.execute(
            "CREATE TABLE plan_probe (user_id BIGINT NOT NULL, entity_id BINARY(16) NOT NULL, "
            "PRIMARY KEY (user_id, entity_id)) ENGINE=InnoDB"
        )
        cursor.execute(
            "INSERT INTO plan_probe SELECT seq % 500, UNHEX(MD5(seq)) FROM seq_1_to_20000"
        )
        cursor.execute("ANALYZE TABLE plan_probe")
        cursor.fetchall()
    yield conn
    with conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS plan_probe")


def plan(conn: Any, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    with conn.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.mark.parametrize("count", [1, 2, 50])
@pytest.mark.parametrize("verb", ["DELETE FROM", "SELECT user_id FROM"])
def test_a_key_lookup_uses_the_key_for_any_number_of_keys(probe: Any, verb: str, count: int):
    with probe.cursor() as cursor:
        cursor.execute(
            "SELECT user_id, entity_id FROM plan_probe ORDER BY entity_id LIMIT %s", [count]
        )
        keys = cursor.fetchall()
    sql = f"{verb} plan_probe WHERE {keys_where(['user_id', 'entity_id'], count)}"
    rows = plan(probe, sql, [v for key in keys for v in key])
    assert [(r["type"], r["key"]) for r in rows] != [("ALL", None)], rows
    assert all(r["key"] == "PRIMARY" for r in rows), rows


def test_one_key_is_spelled_as_equalities():
    assert keys_where(["a", "b"], 1) == "a = %s AND b = %s"
    assert keys_where(["a", "b"], 2) == "(a, b) IN ((%s, %s), (%s, %s))"
