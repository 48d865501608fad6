"""A move's change-capture trigger left behind never fails a write
(docs/resharding.md#left-over-triggers).

A 30-minute Galera history soak found a trigger of a finished move still on a shard whose
server and sessions were being killed: the server listed it and it fired, but ``DROP TRIGGER
IF EXISTS`` found no trigger by its name, so once the move dropped its log every write the
trigger fired on failed, and the next move into that shard could never copy. MariaDB keeps a
table's triggers in its ``.TRG`` file and each trigger's name in a ``.TRN`` file; a trigger
whose ``.TRN`` is gone behaves exactly so, which is how the test makes one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections

from schemaless_store.models import Entity
from schemaless_store.tables import move_log as capture
from schemaless_store.tables.moved_rows import moved_tables
from schemaless_store.topology import bucket_map
from tests.support import STORE

pytestmark = [STORE, pytest.mark.usefixtures("buckets_restored")]


def trigger_file(alias: str, name: str) -> Path:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT @@datadir, DATABASE()")
        datadir, database = cursor.fetchone()
    return Path(datadir) / database / f"{name}.TRN"


def test_a_trigger_the_server_cannot_drop_by_name_never_fails_a_write():
    if connections["shard_0"].vendor != "mysql":
        pytest.skip("MariaDB's trigger files; SQLite drops a trigger with its schema row")
    entity = Entity.objects.create(title="before")
    source = bucket_map.alias_for(entity.id.bytes)
    tables = moved_tables()
    name = capture.trigger_name("entities", "u")
    named = trigger_file(source, name)
    kept = None
    try:
        capture.install(source, tables)
        kept = named.read_bytes()
        named.unlink()  # the server still has the trigger, and no longer finds it by name
        assert capture.remove(source, tables) == [name]
        entity["title"] = "after"
        entity.save()  # the trigger fires and its log is gone: the write goes on
        assert Entity.objects.get(id=entity.id)["title"] == "after"
    finally:
        if kept is not None and not named.exists():
            named.write_bytes(kept)
        capture.remove(source, tables)
    assert capture.leftovers(source) == []
