"""SQL injection attempts through every entry point that reaches SQL: each is rejected with a
clear error or passed as a parameter, and afterwards every table still holds what it held."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from schemaless_store import feed, shards
from schemaless_store.exceptions import InvalidCursor, InvalidQuery, NoIndexForQuery
from schemaless_store.indexes import Index
from schemaless_store.models import Cell, Entity
from tests.conftest import STORE
from tests.reliability_report import record
from tests.test_admin import client_for

pytestmark = [STORE, pytest.mark.reliability]

ATTACKS = [
    "x`; DROP TABLE entities; --",
    "x'; DROP TABLE entities; --",
    'x"; DELETE FROM entities; --',
    "user_id) OR 1=1 --",
    "1; TRUNCATE index_link",
    "index_link WHERE 1=1; DROP TABLE cell",
]


def snapshot() -> dict[str, int]:
    """Rows per table on every shard: an attack that ran would change (or drop) one."""
    counts = {}
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            for table in sorted(conn.introspection.table_names(cursor)):
                cursor.execute(f"SELECT COUNT(*) FROM {conn.ops.quote_name(table)}")
                counts[f"{alias}.{table}"] = cursor.fetchone()[0]
    return counts


@pytest.fixture
def store():
    entity = Entity.objects.create(user_id=uuid.uuid4().bytes, link="https://e.com/1", title="t")
    Cell.objects.put(uuid.uuid4(), "users", {"email": "a@example.com"})
    before = snapshot()
    yield entity
    assert snapshot() == before, "an injection attempt changed a table"


def test_property_names_and_values_are_parameters(store):
    cases = 0
    for attack in ATTACKS:
        stored = Entity.objects.create(**{attack: attack, "link": attack})
        assert Entity.objects.get(id=stored.id)[attack] == attack
        assert [e.id for e in Entity.objects.filter_index(link=attack)] == [stored.id]
        stored.delete()
        cases += 1
    record("SQL injection: property names and values (put, query, delete)", cases, 0, 0)


def test_index_declarations_refuse_bad_identifiers(store):
    cases = 0
    for attack in ATTACKS:
        for index in (
            Index(table=attack, properties=["a"], shard_on="a"),
            Index(table="index_ok", properties=[attack], shard_on=attack),
            Index(table="index_ok", properties=["a"], shard_on=attack),
        ):
            assert index.errors, index
            with pytest.raises(Exception, match="invalid"):
                index.require_valid()
            cases += 1
    record("SQL injection: index table, property and shard_on names", cases, 0, 0)


def test_lookups_orderings_and_cursors_are_rejected(store):
    cases = 0
    for attack in ATTACKS:
        with pytest.raises((InvalidQuery, NoIndexForQuery)):
            list(Entity.objects.filter_index(**{f"link__{attack}": "x"}))
        with pytest.raises((InvalidQuery, NoIndexForQuery)):
            list(Entity.objects.filter_index(**{attack: "x"}))
        with pytest.raises((InvalidQuery, NoIndexForQuery)):
            Entity.objects.filter_index(user_id=b"x" * 16).order_by(attack)
        with pytest.raises(InvalidCursor):
            Entity.objects.filter_index(link="x").page(after=attack)
        with pytest.raises(InvalidQuery):
            feed.changes(shards.shard_aliases()[0], after=attack)  # type: ignore[arg-type]
        cases += 5
    record("SQL injection: lookups, orderings, cursors, feed positions", cases, 0, 0)


def test_cell_columns_are_parameters(store):
    cases = 0
    row = uuid.uuid4()
    for attack in ATTACKS:
        Cell.objects.put(row, attack[:64], {"v": attack})
        assert Cell.objects.get_cell(row, attack[:64]).body == {"v": attack}
        cases += 1
    assert len(Cell.objects.row(row)) == len(ATTACKS)
    # the cells just written are expected; nothing else may change
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM cell WHERE row_key = %s", [row.bytes])
            cursor.execute("DELETE FROM cell_head WHERE row_key = %s", [row.bytes])
    record("SQL injection: cell column names and bodies", cases, 0, 0)


def test_admin_search_and_shard_parameters(store):
    client = client_for("view_entity", "view_cell")
    cases = 0
    for attack in ATTACKS:
        for params in ({"q": attack}, {"q": f"link={attack}"}, {"shard": attack}):
            response = client.get("/admin/schemaless_store/entity/", params)
            assert response.status_code == 200
            cases += 1
        response = client.get("/admin/schemaless_store/cell/", {"row": attack})
        assert response.status_code == 200 and "is not a row key" in response.content.decode()
        cases += 1
    record("SQL injection: admin search box, shard and row parameters", cases, 0, 0)


def test_management_command_arguments(store):
    cases = 0
    for attack in ATTACKS:
        for command, args in (
            ("runcleaner", ["--once", f"--index={attack}"]),
            ("runcleaner", ["--once", f"--shard={attack}"]),
            ("tailchanges", ["--once", "--shard", attack]),
            ("dropindex", [attack, "--noinput"]),
        ):
            with pytest.raises(CommandError):
                call_command(command, *args, stdout=io.StringIO(), stderr=io.StringIO())
            cases += 1
    record("SQL injection: management command arguments", cases, 0, 0)
