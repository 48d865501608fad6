"""A commit batch interrupted as its round trip returns, whose later statement failed on the
server: the batch's answers are read (``commit_batch``), and the transaction, open with the
statements before the failed one, is rolled back before the interrupt goes on. Left open,
the session's next ``BEGIN`` would commit them (a receipt without its write)."""

from __future__ import annotations

import pytest
from django.db import connections

from schemaless_store.topology import shards
from schemaless_store.writes.transaction import own_transaction
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]

ALIAS = "shard_0"


class Interrupted(BaseException):
    pass


def test_an_interrupted_batch_whose_statement_failed_is_rolled_back(monkeypatch):
    conn = connections[ALIAS]
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS batch_rollback_probe (n INT) ENGINE=InnoDB")
        cursor.execute("DELETE FROM batch_rollback_probe")
    conn.ensure_connection()
    driver = conn.connection
    cls = type(driver)
    original = cls.query
    armed = [True]

    def query(self: object, sql: bytes) -> None:
        original(self, sql)
        if self is driver and armed and b"batch_rollback_probe" in sql:
            armed.clear()
            raise Interrupted()

    monkeypatch.setattr(cls, "query", query)
    with pytest.raises(Interrupted), own_transaction(ALIAS, conn) as tx:
        tx.defer("INSERT INTO batch_rollback_probe (n) VALUES (%s)", [1])
        tx.defer("INSERT INTO no_such_table_for_the_probe (n) VALUES (%s)", [2])
    monkeypatch.undo()
    assert conn.connection is driver  # read to the end, so kept
    assert shards.read(ALIAS, "SELECT @@in_transaction", []) == [(0,)]
    with conn.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("COMMIT")
        cursor.execute("SELECT COUNT(*) FROM batch_rollback_probe")
        assert cursor.fetchone() == (0,)  # the statement before the failed one never committed
        cursor.execute("DROP TABLE batch_rollback_probe")
