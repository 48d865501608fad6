"""A deadlock that a signal receiver catches inside a write's transaction (a hostile review of
the Galera soak's lost write). MariaDB rolls the whole transaction back on a deadlock and
says so to that one statement only; caught, the write's receipt and ``COMMIT`` then ran in a
new transaction of their own and committed without the write's rows: the write was
acknowledged, and a recall would have found its receipt. On Galera another node's write does
the same to an idle transaction. The store now notes the deadlock on the shard's cursors and
runs the write again (writes/swallowed.py).

The receiver makes the server's two moves by hand, on the write's own connection: ``ROLLBACK``
(what the deadlock did), then a statement that fails with error 1213 (``SIGNAL``), through
Django's cursor or the store's own driver route (a hostile review found the first version
of the guard blind to the latter)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from django.db import OperationalError, connections, transaction
from django.db.models.signals import post_delete, post_save, pre_save

from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, shards
from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]

DEADLOCK = (
    "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, "
    "MESSAGE_TEXT = 'Deadlock found when trying to get lock; try restarting transaction'"
)


def _by_django_cursor(alias: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute("ROLLBACK")
        cursor.execute(DEADLOCK)


def _by_store_read(alias: str) -> None:  # the driver's own route (topology/shards.py)
    shards.read(alias, "ROLLBACK", ())
    shards.read(alias, DEADLOCK, ())


def _by_store_statement(alias: str) -> None:
    with shards.statement_cursor(connections[alias]) as cursor:
        cursor.execute("ROLLBACK")
        cursor.execute(DEADLOCK)


def _in_an_atomic_block_of_its_own(alias: str) -> None:
    """Django's advice for catching errors inside a transaction: the block's savepoint is gone
    with the transaction, so Django marks the write's block for rollback, and the store's
    next statement raises ``TransactionManagementError`` (a review found the write then
    failing, not running again)."""
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute("ROLLBACK")
        cursor.execute(DEADLOCK)


@pytest.fixture(
    params=[_by_django_cursor, _by_store_read, _by_store_statement, _in_an_atomic_block_of_its_own]
)
def swallowing(request) -> Iterator[list[str]]:
    """A receiver of post_save and post_delete that, once the test appends "armed" to the
    list it yields, meets a deadlock on the write's connection the next time it runs (through
    Django's cursor, a read of the store's, or the store's statement cursor) and catches it;
    it notes each signal it receives there too."""
    heard: list[str] = []
    deadlock = request.param

    def receiver(sender, instance, **kwargs) -> None:
        if "armed" not in heard:
            return
        heard.append("save" if kwargs.get("signal") is post_save else "delete")
        if len(heard) > 2:
            return
        with contextlib.suppress(OperationalError):  # the mistake: going on regardless
            deadlock(bucket_map.alias_for(instance.id.bytes))

    post_save.connect(receiver, sender=Entity, dispatch_uid="swallowing")
    post_delete.connect(receiver, sender=Entity, dispatch_uid="swallowing")
    try:
        yield heard
    finally:
        post_save.disconnect(sender=Entity, dispatch_uid="swallowing")
        post_delete.disconnect(sender=Entity, dispatch_uid="swallowing")


def test_a_save_whose_receiver_caught_a_deadlock_runs_again(swallowing):
    entity = Entity(title="kept", user_id="u-swallowed")
    swallowing.append("armed")
    entity.save()
    assert swallowing == ["armed", "save", "save"]  # the first attempt's transaction was gone
    assert Entity.objects.get(id=entity.id)["title"] == "kept"
    assert [e.id for e in Entity.objects.filter_index(user_id="u-swallowed")] == [entity.id]


def test_a_delete_whose_receiver_caught_a_deadlock_runs_again(swallowing):
    entity = Entity.objects.create(title="doomed")
    swallowing.append("armed")
    entity.delete()
    assert swallowing == ["armed", "delete", "delete"]
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=entity.id)


def test_a_pre_save_receiver_that_caught_a_deadlock_in_its_own_block_runs_the_write_again():
    """Before the row's statement: the store's next statement meets Django's broken block
    (``TransactionManagementError``), and the deadlock the watch saw is raised instead."""
    runs: list[str] = []

    def receiver(sender, instance, **kwargs) -> None:
        runs.append("pre_save")
        if len(runs) == 1:
            with contextlib.suppress(OperationalError):
                _in_an_atomic_block_of_its_own(bucket_map.alias_for(instance.id.bytes))

    pre_save.connect(receiver, sender=Entity, dispatch_uid="swallowing-pre")
    try:
        entity = Entity(title="kept")
        entity.save()
    finally:
        pre_save.disconnect(sender=Entity, dispatch_uid="swallowing-pre")
    assert runs == ["pre_save", "pre_save"]
    assert Entity.objects.get(id=entity.id)["title"] == "kept"
