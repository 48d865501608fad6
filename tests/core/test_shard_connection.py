"""The connection the store writes and reads with is the one Django gives the caller, always:
a caller's ``transaction.atomic(using=alias)`` then holds the store's writes too. A hostile
review of issue 45's item 5 broke this twice with a connection held per thread (since
reverted): after ``del connections[alias]``, and in a thread running an event loop
(``DJANGO_ALLOW_ASYNC_UNSAFE``, as in Jupyter), where Django keeps a connection per task."""

from __future__ import annotations

import asyncio

import pytest
from django.db import connections, transaction

from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support import STORE

pytestmark = STORE


class CallerRollsBack(Exception):
    pass


def _saved_then_rolled_back(alias: str, entity: Entity) -> None:
    """A store save inside the caller's block, which then rolls back."""
    with pytest.raises(CallerRollsBack), transaction.atomic(using=alias):
        assert shards.connection(alias).in_atomic_block  # the store sees the caller's block
        entity["title"] = "rolled back"
        entity.save()
        raise CallerRollsBack()


def test_after_django_replaces_a_connection_the_store_uses_the_new_one():
    entity = Entity.objects.create(title="original")
    alias = entity.shard
    old = shards.connection(alias)
    Entity.objects.get(id=entity.id)
    old.close()
    del connections[alias]
    assert shards.connection(alias) is connections[alias] is not old
    _saved_then_rolled_back(alias, Entity.objects.get(id=entity.id))
    assert old.connection is None  # not reopened behind Django's back
    assert Entity.objects.get(id=entity.id)["title"] == "original"


def test_each_task_of_an_event_loop_writes_on_its_own_connection(monkeypatch):
    """With a loop running in the thread, Django gives each task its own connection; a task's
    ``atomic()`` must hold that task's store writes (the store reading first in another
    task must not leave it on that task's connection)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    entity = Entity.objects.create(title="original")
    alias = entity.shard
    seen: dict[str, object] = {}

    def closing_its_connections(work):
        async def task() -> None:
            try:
                work()
            finally:  # the task's own connections (Django's, per task here)
                connections.close_all()

        return task()

    def reader() -> None:
        Entity.objects.get(id=entity.id)
        seen["reader"] = shards.connection(alias)

    def writer() -> None:
        seen["writer"] = shards.connection(alias)
        assert seen["writer"] is connections[alias]
        _saved_then_rolled_back(alias, Entity.objects.get(id=entity.id))

    async def main() -> None:
        await asyncio.create_task(closing_its_connections(reader))
        await asyncio.create_task(closing_its_connections(writer))

    asyncio.run(main())
    assert Entity.objects.get(id=entity.id)["title"] == "original"
