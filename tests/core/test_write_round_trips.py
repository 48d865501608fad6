"""Issue 35, item 2: the round trips of each write on MariaDB, counted in the client with the
bench's counter (``bench/round_trips.py``: every ``query()`` of a mysqlclient connection, and
its C-level ``commit()``/``rollback()``/``autocommit()``), and what happens when a statement
that travels with the ``COMMIT`` fails (docs/design.md#write-protocol, "Round trips").

On the driver's ``BEGIN`` ... ``COMMIT`` route, ``BEGIN`` goes with the locking read, and a
write's own statements (its ``INSERT``/``UPDATE``/``DELETE``, its history version) go with
the receipt and the ``COMMIT``. The server runs a multi-statement query in order and stops at
the first statement that fails: the rest, the ``COMMIT`` included, never run, the store rolls
the open transaction back and raises that statement's error."""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, connections
from django.test import override_settings

from bench.round_trips import statements
from schemaless_store.config import conf
from schemaless_store.exceptions import EntityExists
from schemaless_store.models import Entity
from schemaless_store.tables import cells as cell_table
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.topology import shards
from schemaless_store.values.codec import JsonCodec
from tests.support import STORE
from tests.support.raw import count_everything, index_rows

# The receipt pruning would add a round trip to a write now and then (tests/conftest.py).
pytestmark = [STORE, pytest.mark.mariadb_only, pytest.mark.usefixtures("no_receipt_pruning")]

HISTORY = override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})


def _fewest(write: Callable[[], Any], tries: int = 3) -> list[str]:
    """The round trips of the cheapest of ``tries`` runs of ``write`` (anything occasional
    that is not the write's own, should there be any, is left out)."""
    runs = []
    for _ in range(tries):
        with statements() as sent:
            write()
        runs.append(list(sent))
    return min(runs, key=len)


def _shape(sent: list[str]) -> list[str]:
    """Each round trip as the statements it carries, shortened: ``BEGIN+SELECT``..."""
    shapes = []
    for query in sent:
        # A statement starts the query or follows a ";" (a literal's bytes may hold one, never
        # followed by a statement's keyword and a space).
        heads = []
        for found in _STATEMENT.finditer(query):
            head = found.group(1).upper()
            if head == "INSERT":
                head += " " + found.group(2).strip("`")
            heads.append(head)
        shapes.append("+".join(heads))
    return shapes


_STATEMENT = re.compile(
    r"(?:^|;)\s*(BEGIN|COMMIT|SELECT|INSERT|UPDATE|DELETE|SET)\b(?: INTO (\S+))?"
)


def _warm() -> None:
    for _ in range(8):  # connections (both shards), the map, the index writers: opened first
        made = Entity.objects.create(id=uuid.uuid4(), title="w", link=f"https://{uuid.uuid4()}")
        made["views"] = 1
        made.save()
        made.delete()


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_the_round_trips_of_each_write(history: bool):
    with HISTORY if history else override_settings():
        _warm()
        entity = Entity.objects.create(title="a", link=f"https://{uuid.uuid4()}", views=0)
        counts: dict[str, list[str]] = {}

        def create_given() -> None:
            Entity.objects.create(id=uuid.uuid4(), title="t", link=f"https://{uuid.uuid4()}")

        def create_generated() -> None:
            Entity.objects.create(title="t", link=f"https://{uuid.uuid4()}")

        def create_unindexed() -> None:
            Entity.objects.create(id=uuid.uuid4(), title="t")

        def save_unindexed_change() -> None:
            entity["views"] = entity["views"] + 1
            entity.save()

        def get_and_save() -> None:
            read = Entity.objects.get(id=entity.id)
            read["views"] = read["views"] + 1
            read.save()

        def update_by_id() -> None:
            Entity.objects.filter(id=entity.id).update(views=7)

        def save_indexed_change() -> None:
            entity["link"] = f"https://{uuid.uuid4()}"
            entity.save()

        def delete() -> None:
            Entity.objects.create(id=uuid.uuid4(), link=f"https://{uuid.uuid4()}").delete()

        for label, write in (
            ("create given", create_given),
            ("create generated", create_generated),
            ("create unindexed", create_unindexed),
            ("save", save_unindexed_change),
            ("get+save", get_and_save),
            ("filter(id).update", update_by_id),
            ("save indexed", save_indexed_change),
        ):
            counts[label] = _shape(_fewest(write))
        json_bodies = isinstance(conf.get().codec, JsonCodec)
        # A delete of an entity made in the same call: its own create's round trip first.
        counts["create+delete"] = _shape(_fewest(delete))
        print("round trips:", {label: len(sent) for label, sent in counts.items()}, counts)

    receipt = "INSERT schemaless_receipts+"
    version = "SELECT+INSERT cell+" if history else ""
    # A create with no index row: the whole entity transaction in one query, the receipt
    # first (its row lock stands for the batch: test_batch_lost_answer.py), the INSERT, its
    # added_id kept, the version, the receipt's added_id filled in, COMMIT.
    inserted = f"BEGIN+{receipt}INSERT entities+SET+{version}UPDATE+COMMIT"
    assert counts["create unindexed"] == [inserted]
    # A new row with index rows: its INSERT first (the key locked before step 3 commits the
    # rows: tests/core/test_rows_under_the_lock.py), the rows, then the receipt and the
    # version with the COMMIT.
    create = [
        "BEGIN+INSERT entities+SET",
        "INSERT index_link",
        f"{receipt}SELECT+{version}UPDATE+COMMIT",
    ]
    assert counts["create given"] == create, counts
    assert counts["create generated"] == create, counts
    # BEGIN with the locking read; the receipt, the UPDATE (and its version) and COMMIT.
    update = ["BEGIN+SELECT", f"{receipt}UPDATE+{version}COMMIT"]
    assert counts["save"] == update, counts
    if json_bodies:  # applied by the server, no read (docs/design.md#partial-updates-on-the-server)
        server = f"SET+{version}SELECT" if history else "SET+SELECT"
        assert counts["filter(id).update"] == [f"BEGIN+{receipt}UPDATE+{server}+UPDATE+COMMIT"]
    else:
        assert counts["filter(id).update"] == update, counts
    assert counts["get+save"] == ["SELECT", *update], counts
    # A changed index value: its new row before the commit; the stale one after it (step 5,
    # a transaction of its own: the row locked again, the index row's delete on the index
    # writer, the COMMIT that releases the lock).
    assert counts["save indexed"] == [
        "BEGIN+SELECT",
        "INSERT index_link",
        f"{receipt}UPDATE+{version}COMMIT",
        "BEGIN+SELECT",
        "DELETE",
        "COMMIT",
    ], counts
    assert counts["create+delete"] == [
        *create,
        "BEGIN+SELECT",
        f"{receipt}DELETE+{version}COMMIT",
        "BEGIN+SELECT",
        "DELETE",
        "COMMIT",
    ], counts


def _in_transaction(alias: str) -> int:
    with shards.statement_cursor(connections[alias]) as cursor:
        cursor.execute("SELECT @@in_transaction")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_a_duplicate_create_fails_at_its_insert_and_leaves_nothing(history: bool):
    with HISTORY if history else override_settings():
        first = Entity.objects.create(title="first", link="https://first", user_id=b"1" * 16)
        versions = len(first.history()) if history else 0
        before, receipts = count_everything(), receipt_table.count(first.shard)
        with statements() as sent, pytest.raises(EntityExists):
            Entity.objects.create(id=first.id, link="https://second", user_id=b"2" * 16)
        # Its INSERT goes before its index rows (the key locked before step 3): it failed
        # there, and nothing after it ran, no index row and no COMMIT.
        batch = [s for s in sent if "INSERT INTO entities" in s]
        assert batch and "COMMIT" not in batch[0], sent
        assert not any("INSERT INTO `index_" in s for s in sent), sent
        assert _in_transaction(first.shard) == 0
        assert count_everything() == before  # no index row was added
        assert receipt_table.count(first.shard) == receipts
        assert not list(Entity.objects.filter_index(link="https://second"))
        assert [e.id for e in Entity.objects.filter_index(link="https://first")] == [first.id]
        if history:
            assert len(first.history()) == versions
        # The connection goes on: the next write on it lands.
        first["title"] = "again"
        first.save()
        assert Entity.objects.get(id=first.id)["title"] == "again"


@HISTORY
@pytest.mark.parametrize("write", ["update", "create", "delete"])
def test_a_statement_failing_in_the_middle_of_the_batch_rolls_everything_back(
    write: str, monkeypatch: pytest.MonkeyPatch
):
    """The history version's INSERT (after the row's statement, before the receipt and the
    COMMIT) fails: the row's statement, already run, is rolled back, the receipt and COMMIT
    never run, the error is the server's, and the connection is usable afterwards."""
    entity = Entity.objects.create(title="kept", link="https://kept", views=1)
    alias = entity.shard
    new_id = uuid.uuid4()
    before, receipts = count_everything(), receipt_table.count(alias)
    versions = len(entity.history())
    broken = cell_table._INSERT_VERSION.replace("created_at)", "no_such_column)")
    monkeypatch.setattr(cell_table, "_INSERT_VERSION", broken)
    with statements() as sent, pytest.raises(DatabaseError, match="no_such_column"):
        if write == "update":
            entity["link"] = "https://changed"
            entity["views"] = 2
            entity.save()
        elif write == "create":
            Entity.objects.create(id=new_id, title="new", link="https://new")
        else:
            entity.delete()
    monkeypatch.undo()
    batch = [s for s in sent if "no_such_column" in s]
    assert len(batch) == 1 and batch[0].rstrip().endswith("COMMIT"), sent
    assert "schemaless_receipts" in batch[0]
    assert _in_transaction(alias) == 0
    stored = Entity.objects.get(id=entity.id)
    assert (stored["link"], stored["views"]) == ("https://kept", 1)
    assert not Entity.objects.get_many([new_id])
    assert len(entity.history()) == versions
    assert receipt_table.count(alias) == receipts
    assert count_everything() == before  # the index rows step 3 added were undone
    assert not list(Entity.objects.filter_index(link="https://changed"))
    assert not list(Entity.objects.filter_index(link="https://new"))
    assert [e.id for e in Entity.objects.filter_index(link="https://kept")] == [entity.id]
    assert len(index_rows("index_link")) == 1
    # The same connection writes again, batch and all.
    stored["views"] = 3
    stored.save()
    assert Entity.objects.get(id=entity.id)["views"] == 3
    assert [v.properties["views"] for v in entity.history()] == [1, 3]


def _stored_added_id(entity: Entity) -> int:
    with connections[entity.shard].cursor() as cursor:
        cursor.execute("SELECT added_id FROM entities WHERE id = %s", [entity.id.bytes])
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_a_create_learns_its_added_id_from_the_batch_and_its_receipt_records_it(history: bool):
    """The new row's ``added_id`` is the ``INSERT``'s answer inside the batch (unindexed; an
    indexed create's ``INSERT`` goes first and keeps it in the session, read back in the
    batch; a history version's ``INSERT`` after it takes another auto-increment value), and
    the receipt the
    server wrote holds the same one: a retry after a lost answer returns it."""
    from schemaless_store.testing.faults import lost_commit_answers

    with HISTORY if history else override_settings():
        made = [Entity.objects.create(id=uuid.uuid4(), title=str(n)) for n in range(3)]
        assert [e.added_id for e in made] == [_stored_added_id(e) for e in made]
        with lost_commit_answers() as lost:
            recalled = Entity.objects.create(id=uuid.uuid4(), link=f"https://{uuid.uuid4()}")
        assert lost.lost == 1
        assert recalled.added_id == _stored_added_id(recalled)
        assert recalled.added_id not in {e.added_id for e in made if e.shard == recalled.shard}


def test_a_shard_connection_opened_without_multi_statements_is_switched_on_once(monkeypatch):
    """``OPTIONS={"multi_statements": False}``: the writes still share round trips; the
    session is switched on once per connection (``mysql_set_server_option()``), and a
    connection opened with the flag, mysqlclient's default, is never asked."""
    import MySQLdb.connections

    switched: list[int] = []
    original = MySQLdb.connections.Connection.set_server_option

    def spy(self: Any, option: int) -> Any:
        switched.append(option)
        return original(self, option)

    monkeypatch.setattr(MySQLdb.connections.Connection, "set_server_option", spy, raising=False)
    _warm()
    assert switched == []  # the default connections have the flag
    key = uuid.uuid4()
    alias = Entity(id=key).shard
    conn = connections[alias]
    conn.close()
    monkeypatch.setitem(conn.settings_dict, "OPTIONS", {**conn.settings_dict["OPTIONS"]})
    conn.settings_dict["OPTIONS"]["multi_statements"] = False
    try:
        made = Entity.objects.create(id=key, title="t", views=1)
        made["views"] = 2
        made.save()
        made["views"] = 3
        made.save()
        assert not conn.connection.client_flag & (1 << 16)  # opened without the flag
        assert switched == [0]  # MYSQL_OPTION_MULTI_STATEMENTS_ON, once
        assert Entity.objects.get(id=key)["views"] == 3
        made.delete()
    finally:
        conn.close()


def test_a_large_body_sends_its_statements_apart():
    """A body whose statements might not fit one query (``tables/literals.MAX_STATEMENT_BYTES``
    with its escaping) is written as before: ``BEGIN`` alone, its ``INSERT``, the receipt with
    the ``COMMIT``; an update's ``UPDATE`` goes apart from its ``COMMIT`` too."""
    _warm()
    big = base64.b64encode(os.urandom(600_000)).decode()  # no codec compresses it much
    key = uuid.uuid4()
    with statements() as sent:
        made = Entity.objects.create(id=key, title=big)
    assert _shape(sent) == ["BEGIN", "INSERT entities", "INSERT schemaless_receipts+COMMIT"]
    assert made.added_id == _stored_added_id(made)
    made["title"] = big + "y"
    with statements() as sent:
        made.save()
    assert _shape(sent) == ["BEGIN+SELECT", "UPDATE", "INSERT schemaless_receipts+COMMIT"]
    assert Entity.objects.get(id=key)["title"] == big + "y"
