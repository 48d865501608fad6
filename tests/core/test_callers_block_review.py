"""A caller's ``transaction.atomic()`` around store writes, attacked again after issue 43's
fixes (docs/design.md#a-callers-transaction): what a block that rolls back, or whose commit
answer is lost, leaves of writes the store acknowledged."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.test import override_settings

from schemaless_store.cache import entity_cache
from schemaless_store.models import Entity
from schemaless_store.tables import index_rows as index_table
from schemaless_store.topology import shards
from schemaless_store.writes.rows import rows_of
from tests.cache.test_entity_cache import cache_config
from tests.support import STORE
from tests.support.buckets import id_on

pytestmark = STORE


def _link_on(alias: str) -> str:
    """A ``link`` value whose index row lives on ``alias``."""
    for number in range(10_000):
        link = f"https://example.org/{uuid.uuid4()}/{number}"
        (index, values), *_ = rows_of({"link": link})
        if index_table.home(index, values) == alias:
            return link
    raise AssertionError("no link value lives there")


class _CallerGaveUp(Exception):
    pass


def test_a_callers_block_that_rolls_back_keeps_the_index_rows_of_a_write_elsewhere():
    """The caller holds ``atomic(using=B)``; inside it, a write on A (not the caller's
    shard: it commits at once, with its receipt, acknowledged) has an index row that lives on
    B. The caller's block then rolls back. The write on A stands, so its index row must too
    (I2: a committed entity is always in its indexes); on SQLite step 3 wrote it on Django's
    connection to B, inside the caller's transaction, and the rollback takes it away."""
    a, b = shards.shard_aliases()
    key = id_on(a)
    link = _link_on(b)
    acknowledged = False
    with pytest.raises(_CallerGaveUp), transaction.atomic(using=b):
        try:
            Entity.objects.create(id=key, title="acknowledged", link=link)
            acknowledged = True
        except TransactionManagementError:
            pass  # refused, with nothing written: the caller learns it at once
        raise _CallerGaveUp()
    if not acknowledged:
        assert Entity.objects.get_many([key]) == {}
        assert list(Entity.objects.filter_index(link=link)) == []
        return
    assert Entity.objects.get(id=key)["title"] == "acknowledged"
    assert [e.id for e in Entity.objects.filter_index(link=link)] == [key], (
        "the committed entity on A is missing from its index: its row on B was rolled "
        "back with the caller's block"
    )


def test_on_sqlite_the_refusal_names_the_callers_block_and_the_way_out():
    """On SQLite such a write is refused before anything is written (the entity's own
    transaction rolls back), naming the shard whose block holds the rows and what to do."""
    a, b = shards.shard_aliases()
    if shards.vendor(b) == "mysql":
        pytest.skip("MariaDB writes index rows on a session of their own: nothing to refuse")
    key = id_on(a)
    with (
        pytest.raises(TransactionManagementError, match=f"atomic\\(using='{b}'\\)") as raised,
        transaction.atomic(using=b),
    ):
        Entity.objects.create(id=key, link=_link_on(b))
    assert "nothing was written" in str(raised.value)
    assert Entity.objects.get_many([key]) == {}
    Entity.objects.create(id=key, link=_link_on(b))  # outside the block: written
    assert Entity.objects.get(id=key).id == key


@pytest.fixture
def cached(backend: str):
    """The entity cache on (Redis on MariaDB, Django's local memory on SQLite), empty."""
    caches_setting = {**settings.CACHES, "entities": cache_config(backend)}
    raw = {**settings.SCHEMALESS, "CACHE": "entities"}
    with override_settings(CACHES=caches_setting, SCHEMALESS=raw):
        caches["entities"].clear()
        entity_cache.resume()
        yield
        entity_cache.resume()


class _HookFailed(Exception):
    pass


def _fail() -> None:
    raise _HookFailed("the caller's own on_commit hook failed")


def test_a_callers_failing_on_commit_hook_does_not_leave_a_committed_save_hidden(cached):
    """The caller's block registers an ``on_commit`` hook of its own (a mail to send), then
    saves an entity the cache holds: the store's invalidation waits for the block's commit,
    as a hook after the caller's. The block commits; the caller's hook raises, and Django
    runs none of the hooks after it. The save is committed: ``get()`` must not answer the
    row before it from the cache, for the rest of ``CACHE_TIMEOUT``."""
    entity = Entity.objects.create(title="old", views=1)
    for _ in range(3):
        assert Entity.objects.get(id=entity.id)["views"] == 1
    try:
        with transaction.atomic(using=entity.shard):
            transaction.on_commit(_fail, using=entity.shard)
            entity["views"] = 2
            entity.save()
    except _HookFailed:
        pass  # logged by the caller, say: the block itself committed
    with transaction.atomic(using=entity.shard):  # the shard, bypassing the cache
        assert Entity.objects.get(id=entity.id)["views"] == 2
    assert Entity.objects.get(id=entity.id)["views"] == 2, (
        "the cache hides the committed save: its invalidation, an on_commit hook after the "
        "caller's failing one, never ran"
    )
