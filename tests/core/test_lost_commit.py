"""A write whose connection is lost is run again on a fresh one (docs/design.md#the-fence): a
move's fence ends the store's connections, and a failover ends them too. The hard case is a
commit that landed on the server while its answer was lost: the write runs again and must not
fail on, or duplicate, what it already wrote."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import MySQLdb
import MySQLdb.connections
import pytest
from django.db import connections, transaction

from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.models import Cell, Entity
from schemaless_store.testing.faults import lost_commit_answers
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]


def test_a_create_whose_commit_answer_was_lost_returns_and_is_stored_once():
    key = uuid.uuid4()
    with lost_commit_answers() as lost:
        made = Entity.objects.create(id=key, user_id="u1", link="https://lost")
    assert lost.lost == 1, "no commit was sent"
    assert made.id == key
    assert Entity.objects.get(id=key)["link"] == "https://lost"
    assert [e.id for e in Entity.objects.filter_index(link="https://lost")] == [key]


def test_a_create_of_a_generated_id_whose_commit_answer_was_lost_returns():
    with lost_commit_answers() as lost:
        made = Entity.objects.create(user_id="u1", link="https://generated")
    assert lost.lost == 1
    assert Entity.objects.get(id=made.id)["link"] == "https://generated"


def test_an_update_whose_commit_answer_was_lost_returns_with_its_index_rows_exact():
    entity = Entity.objects.create(user_id="u1", link="https://old")
    entity["link"] = "https://new"
    with lost_commit_answers() as lost:
        entity.save()
    assert lost.lost == 1
    assert Entity.objects.get(id=entity.id)["link"] == "https://new"
    assert [e.id for e in Entity.objects.filter_index(link="https://new")] == [entity.id]
    assert list(Entity.objects.filter_index(link="https://old")) == []


def test_a_cell_version_whose_commit_answer_was_lost_is_left_to_the_caller():
    """A cell version is appended, not replaced: a second try could add a second version, so
    the caller hears of the lost answer (and can read what landed)."""
    row = uuid.uuid4()
    with lost_commit_answers() as lost, pytest.raises(ShardUnavailable):
        Cell.objects.put(row, "profile", {"name": "a"})
    assert lost.lost == 1
    assert [c.body for c in Cell.objects.versions(row, "profile")] == [{"name": "a"}]


def test_inside_a_callers_transaction_a_lost_connection_reaches_the_caller():
    entity = Entity.objects.create(user_id="u1", link="https://mine")
    alias = entity._state.db
    with pytest.raises(ShardUnavailable), transaction.atomic(using=alias):
        entity["link"] = "https://killed"
        with connection_killed_at_next_statement(alias):
            entity.save()
    assert Entity.objects.get(id=entity.id)["link"] == "https://mine"


@contextlib.contextmanager
def connection_killed_at_next_statement(alias: str) -> Iterator[None]:
    conn = connections[alias]
    thread = conn.connection.thread_id()
    settings = conn.settings_dict
    admin = MySQLdb.connect(
        host=settings["HOST"], port=int(settings["PORT"]), user=settings["USER"]
    )
    try:
        admin.query(f"KILL CONNECTION {int(thread)}")
        yield
    finally:
        admin.close()
