"""A read on MariaDB goes through the driver's own calls, without a cursor (issue 45, item 5:
``topology.shards._fetch_all``). It renders the statement as mysqlclient's cursor does, and
an interrupt as its round trip returns (``KeyboardInterrupt``, a signal handler's exception)
leaves the session in step: the answer is read before the interrupt goes on, as closing a
cursor does, or the session is closed and the next read opens another."""

from __future__ import annotations

import uuid

import MySQLdb
import pytest
from django.db import DatabaseError, ProgrammingError, connections

from schemaless_store.models import Entity
from schemaless_store.sql import sessions
from schemaless_store.tables import entities as entity_table
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]


class Interrupted(BaseException):
    pass


def _interrupt_after_the_round_trip(monkeypatch: pytest.MonkeyPatch, alias: str) -> None:
    """The next query on ``alias``'s session reaches the server and returns, then raises."""
    connections[alias].ensure_connection()
    driver = connections[alias].connection
    cls = type(driver)
    original = cls.query
    armed = [True]

    def query(self: object, sql: bytes) -> None:
        original(self, sql)
        if self is driver and armed:
            armed.clear()
            raise Interrupted()

    monkeypatch.setattr(cls, "query", query)


def test_a_read_gives_what_the_cursor_gave():
    entity = Entity.objects.create(title="naïve %s 'quoted'", n=3)
    alias = bucket_map.alias_for(entity.row_id)
    row = entity_table.select_one(alias, entity.row_id)
    assert row is not None and bytes(row[1]) == entity.row_id
    with connections[alias].cursor() as cursor:  # Django's cursor, the same statement
        cursor.execute(entity_table._SELECT_ONE, [entity.row_id])
        assert cursor.fetchall()[0] == row
    assert shards.read(alias, "SELECT %s, %s, %s", ["a'b", 5, None]) == [("a'b", 5, None)]
    assert shards.read(alias, "SELECT 1 FROM entities WHERE 1 = 0", []) == []
    assert Entity.objects.get(id=entity.id).body_properties() == {
        "title": "naïve %s 'quoted'",
        "n": 3,
    }


def test_an_interrupted_read_leaves_the_session_in_step(monkeypatch):
    alias = "shard_0"
    _interrupt_after_the_round_trip(monkeypatch, alias)
    driver = connections[alias].connection
    with pytest.raises(Interrupted):
        shards.read(alias, "SELECT 41", [])
    # Its answer was read: the same session answers the next read.
    assert connections[alias].connection is driver
    assert shards.read(alias, "SELECT 42", []) == [(42,)]


def test_a_session_that_cannot_be_read_is_closed_and_the_next_read_opens_another(monkeypatch):
    alias = "shard_1"
    _interrupt_after_the_round_trip(monkeypatch, alias)
    first = connections[alias].connection
    with monkeypatch.context() as patch:
        patch.setattr(sessions, "read_to_the_end", lambda driver: False)
        with pytest.raises(Interrupted):
            shards.read(alias, "SELECT 41", [])
    assert connections[alias].connection is None
    assert shards.read(alias, "SELECT 42", []) == [(42,)]
    assert connections[alias].connection is not first
    missing = uuid.uuid4()
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=missing)


def test_every_answer_of_the_query_is_read_and_a_later_error_raises():
    assert shards.read("shard_0", "SELECT 1; SELECT 2", []) == [(1,)]
    assert shards.read("shard_0", "SELECT 3", []) == [(3,)]  # nothing left unread
    with pytest.raises(DatabaseError):
        shards.read("shard_0", "SELECT 1; SELECT * FROM no_such_table", [])
    assert shards.read("shard_0", "SELECT 4", []) == [(4,)]


def test_placeholders_that_do_not_match_the_values_raise_djangos_programming_error():
    with pytest.raises(ProgrammingError):
        shards.read("shard_0", "SELECT %s, %s", [1])
    assert shards.read("shard_0", "SELECT 5", []) == [(5,)]


class _LostWhileReading:
    """A driver whose connection is lost as the interrupted answer is read."""

    Error = MySQLdb.Error

    def store_result(self) -> None:
        raise MySQLdb.OperationalError(2013, "Lost connection to server during query")

    def next_result(self) -> int:
        return -1


def test_a_connection_lost_while_the_answer_is_read_is_not_in_step():
    assert sessions.read_to_the_end(_LostWhileReading()) is False
