"""Indexes over cell columns: maintained by Cell.objects.put with the write protocol, queried
with re-check against the latest version, backfilled and repaired by the cleaner."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import call_command
from django.db import connections

from schemaless_store.config.indexes import Index
from schemaless_store.exceptions import IndexNotReady, NoIndexForQuery
from schemaless_store.models import Cell, Entity
from schemaless_store.tables import lifecycle
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values.codec import decode_body
from tests.support import STORE, child
from tests.support.raw import index_rows, insert_index_row

pytestmark = STORE

EMAIL = "index_cell_email"
SCHOOL = "index_cell_school_year"


@pytest.fixture
def email_index():
    with child.declared(EMAIL) as index:
        yield index


@pytest.fixture
def school_index():
    with child.declared(SCHOOL) as index:
        yield index


def expected_rows(index: Index) -> set[tuple]:
    """The rows the latest version of every row's column implies, with the shard each belongs on."""
    rows = set()
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT row_key, body FROM cell_head WHERE column_name = %s", [index.column]
            )
            for key, body in cursor.fetchall():
                if body is None:
                    continue
                for values in index.rows_for(decode_body(bytes(body))):
                    home = bucket_map.alias_for(index.routing_key(values[index.shard_position]))
                    rows.add((*values, bytes(key), home))
    return rows


def actual_rows(index: Index) -> set[tuple]:
    return set(index_rows(index.name))


def assert_exact(index: Index) -> None:
    assert actual_rows(index) == expected_rows(index)


def emails(column_value: str) -> list[uuid.UUID]:
    return sorted(c.row_key for c in Cell.objects.filter_index("users", email=column_value))


def test_the_index_follows_the_latest_version(email_index):
    bret, paul = uuid.uuid4(), uuid.uuid4()
    Cell.objects.put(bret, "users", {"email": "bret@example.com", "name": "Bret"})
    Cell.objects.put(paul, "users", {"email": "paul@example.com"})
    assert emails("bret@example.com") == [bret]
    found = Cell.objects.filter_index("users", email="bret@example.com").first()
    assert isinstance(found, Cell) and found.ref_key == 1 and found.body["name"] == "Bret"
    Cell.objects.put(bret, "users", {"email": "bret@friendfeed.com"})
    assert emails("bret@example.com") == []
    assert emails("bret@friendfeed.com") == [bret]
    assert Cell.objects.filter_index("users", email="bret@friendfeed.com")[0].ref_key == 2
    assert_exact(email_index)
    Cell.objects.put(bret, "users", None)  # a version without a body: in no index
    assert emails("bret@friendfeed.com") == []
    assert_exact(email_index)


def test_an_older_explicit_version_leaves_the_index_alone(email_index):
    row = uuid.uuid4()
    Cell.objects.put(row, "users", {"email": "new@example.com"}, ref_key=5)
    Cell.objects.put(row, "users", {"email": "old@example.com"}, ref_key=2)
    assert emails("new@example.com") == [row]
    assert emails("old@example.com") == []
    assert_exact(email_index)


def test_ranges_and_ordering_on_a_composite_cell_index(school_index):
    rows = {year: uuid.uuid4() for year in (2001, 2004, 2009, 2012)}
    for year, row in rows.items():
        Cell.objects.put(row, "users", {"school": "Stanford", "year": year})
    Cell.objects.put(uuid.uuid4(), "users", {"school": "MIT", "year": 2004})
    found = Cell.objects.filter_index("users", school="Stanford", year__gte=2004).order_by("-year")
    assert [c.row_key for c in found] == [rows[2012], rows[2009], rows[2004]]
    assert_exact(school_index)


def test_a_stale_index_row_never_answers(email_index):
    row = uuid.uuid4()
    Cell.objects.put(row, "users", {"email": "real@example.com"})
    value = email_index.column_value("email", "fake@example.com")
    home = bucket_map.alias_for(email_index.routing_key(value))
    insert_index_row(EMAIL, home, (value, row.bytes))
    assert emails("fake@example.com") == []
    assert emails("real@example.com") == [row]


def test_cell_and_entity_indexes_do_not_mix(email_index):
    Entity.objects.create(email="entity@example.com")
    assert index_rows(EMAIL) == []
    with pytest.raises(NoIndexForQuery, match=r"no index serves filter_index\(email=") as info:
        list(Entity.objects.filter_index(email="entity@example.com"))
    assert EMAIL not in str(info.value)  # an index over cells does not serve entity queries
    with pytest.raises(NoIndexForQuery, match="No index is declared for this source") as info:
        list(Cell.objects.filter_index("schools", email="x"))
    assert "Cell.objects.filter_index('schools', email='x')" in str(info.value)
    assert "column='schools'" in str(info.value)  # the declaration that would serve it


def test_cell_queries_follow_the_entity_rule(school_index):
    """A cell query that names only ``school`` cannot use (school, year): a version without a
    year has no row there. Naming ``year`` (here by ordering) answers every row that has it."""
    with_year, without = uuid.uuid4(), uuid.uuid4()
    Cell.objects.put(with_year, "users", {"school": "mit", "year": 2001})
    Cell.objects.put(without, "users", {"school": "mit"})
    with pytest.raises(NoIndexForQuery, match="also requires `year`"):
        list(Cell.objects.filter_index("users", school="mit"))
    ordered = Cell.objects.filter_index("users", school="mit").order_by("year")
    assert [c.row_key for c in ordered] == [with_year]
    assert "index_cell_school_year" in ordered.explain()


def test_bad_cell_index_declarations_are_reported():
    unique = Index(table="index_x", properties=["a"], shard_on="a", column="users", unique=True)
    assert any("unique" in e for e in unique.errors)
    private = Index(table="index_y", properties=["a"], shard_on="a", column="_entity")
    assert any("not starting with _" in e for e in private.errors)


def run_cleaner(*args: str) -> str:
    out = io.StringIO()
    call_command("runcleaner", *args, "--once", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_a_cell_index_declared_over_existing_cells_is_backfilled_by_the_cleaner():
    rows = [uuid.uuid4() for _ in range(40)]
    for n, row in enumerate(rows):
        Cell.objects.put(row, "users", {"email": f"old{n}@example.com"})
        if n % 2:
            Cell.objects.put(row, "users", {"email": f"user{n}@example.com"})
    other = uuid.uuid4()  # another column with the same property: not in this index
    Cell.objects.put(other, "schools", {"email": "school@example.com"})
    with child.declared(EMAIL) as index:
        assert lifecycle.state_of(index) == lifecycle.BUILDING
        with pytest.raises(IndexNotReady):
            emails("user1@example.com")
        Cell.objects.put(rows[0], "users", {"email": "during@example.com"})  # maintained now
        out = run_cleaner(f"--index={EMAIL}", "--batch-size=7")
        assert "it is ready" in out
        lifecycle.forget_states()
        assert lifecycle.state_of(index) == lifecycle.READY
        assert_exact(index)
        assert emails("user1@example.com") == [rows[1]]
        assert emails("old1@example.com") == []
        assert emails("during@example.com") == [rows[0]]
        assert emails("school@example.com") == []
        assert all(row[1] != other.bytes for row in index_rows(EMAIL))


def test_a_new_cell_index_on_a_store_without_that_column_is_ready_at_once():
    Entity.objects.create(email="e@example.com")  # entities do not count for a cell index
    Cell.objects.put(uuid.uuid4(), "schools", {"name": "MIT"})
    with child.declared(EMAIL) as index:
        assert lifecycle.state_of(index) == lifecycle.READY


def test_the_cleaner_repairs_missing_stale_and_orphan_rows(email_index):
    rows = [uuid.uuid4() for _ in range(10)]
    for n, row in enumerate(rows):
        Cell.objects.put(row, "users", {"email": f"u{n}@example.com"})
    # A missing row, a stale row (the entity's older value) and an orphan (no such row key).
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(f"DELETE FROM {EMAIL} WHERE entity_id = %s", [rows[3].bytes])
    for text, key in (
        ("stale@example.com", rows[4].bytes),
        ("orphan@example.com", uuid.uuid4().bytes),
    ):
        value = email_index.column_value("email", text)
        home = bucket_map.alias_for(email_index.routing_key(value))
        insert_index_row(EMAIL, home, (value, key))
    assert emails("u3@example.com") == []  # missing: a false negative until repaired
    run_cleaner(f"--index={EMAIL}")
    assert_exact(email_index)
    assert emails("u3@example.com") == [rows[3]]
