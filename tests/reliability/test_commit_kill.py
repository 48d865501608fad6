"""The history run's ``kill-commit`` fault (``schemaless_store.testing.history.commit_kill``)
must send nothing inside the transaction it kills the commit of. It once asked the session
for its port and database with a statement: on Galera, a transaction that another node's write
had aborted while idle answered that statement with error 1213, the fault swallowed it, and the
``COMMIT`` then answered success for a transaction that no longer existed. The 30-minute Galera
soak counted that write as acknowledged and lost (docs/reliability.md, seed 4912, ``reg-2``)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import MySQLdb
import pytest
from django.db import connections

from schemaless_store.sql import sessions
from schemaless_store.testing.history.commit_kill import CommitKiller, _where
from schemaless_store.testing.history.records import Recorder
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.raw import own_session

pytestmark = [STORE, pytest.mark.mariadb_only]


class Watched:
    """A driver connection that notes every statement or cursor asked of it."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.asked: list[str] = []
        self.port, self.database = real.port, real.database

    def thread_id(self) -> int:
        return int(self.real.thread_id())

    def cursor(self, *args: Any) -> Any:
        self.asked.append("cursor")
        return self.real.cursor(*args)

    def query(self, sql: Any) -> Any:
        self.asked.append(f"query {sql!r}")
        return self.real.query(sql)


def test_the_commit_killer_sends_nothing_inside_the_transaction(tmp_path: Path):
    alias = shards.shard_aliases()[0]
    real = own_session(alias)
    recorder = Recorder(tmp_path / "faults.jsonl")
    client = SimpleNamespace(process="p0", seed=7, index=1, recorder=recorder)
    killer = CommitKiller(client, share=1.0)  # type: ignore[arg-type]
    watched = Watched(real)
    try:
        real.autocommit(False)
        real.query("SELECT 1")
        real.store_result()
        session = real.thread_id()
        with contextlib.suppress(MySQLdb.OperationalError):  # the KILL met the commit (2013)
            killer.commit(watched, real.commit)
        assert watched.asked == []
        [fault] = [
            json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()
        ]
        assert fault["nemesis"] == "kill-commit"
        assert (fault["detail"]["port"], fault["detail"]["session"]) == (real.port, session)
    finally:
        recorder.close()
        for connection in (real, *killer.killers.values()):
            with contextlib.suppress(MySQLdb.Error):
                connection.close()


def test_the_commit_killer_finds_the_session_without_the_drivers_attributes():
    """mysqlclient before 2.2.5 keeps no ``port`` or ``database`` on its connection: they are
    taken from the Django connection that holds it, still without a statement."""
    alias = shards.shard_aliases()[0]
    wrapper = connections[alias]
    wrapper.ensure_connection()
    real, bare = wrapper.connection, SimpleNamespace()
    wrapper.connection = bare
    try:
        settings = wrapper.settings_dict
        assert _where(bare) == (int(settings["PORT"]), settings["NAME"])
        assert _where(real) == (real.port, real.database)
        setattr(bare, sessions.NODE, ("127.0.0.1", 4567))  # a Galera backend's node
        assert _where(bare) == (4567, settings["NAME"])
    finally:
        wrapper.connection = real
