"""The async API (issue 28, part 1), under pytest-asyncio, on the test backend's real servers:
each async method against its sync twin, ``SynchronousOnlyOperation`` for sync calls made in
an event loop, and the demo's async view."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.test import AsyncClient

from project.feed.models import Comment, Entry, Like, User
from schemaless_store.exceptions import Conflict, EntityExists, InvalidCursor
from schemaless_store.models import Entity
from tests.support import STORE
from tests.support.factories import NumberedFactory
from tests.support.raw import index_rows

pytestmark = [STORE, pytest.mark.asyncio]


async def test_acreate_aget_asave_adelete_round_trip():
    entity = await Entity.objects.acreate(link="https://a", n=1)
    read = await Entity.objects.aget(id=entity.id)
    assert read.properties == {"id": entity.id, "link": "https://a", "n": 1}
    read["n"] = 2
    await read.asave()
    assert (await Entity.objects.aget(id=entity.id))["n"] == 2
    with pytest.raises(EntityExists):
        await Entity.objects.acreate(id=entity.id)
    assert await read.adelete() == (1, {"schemaless_store.Entity": 1})
    with pytest.raises(Entity.DoesNotExist):
        await Entity.objects.aget(id=entity.id)
    assert await sync_to_async(index_rows)("index_link") == []


async def test_asave_if_unchanged_and_amodify():
    entity = await Entity.objects.acreate(n=1)
    other = await Entity.objects.aget(id=entity.id)
    other["n"] = 5
    await other.asave(if_unchanged=True)
    entity["n"] = 7
    with pytest.raises(Conflict):
        await entity.asave(if_unchanged=True)
    with pytest.raises(Conflict):
        await entity.adelete(if_unchanged=True)

    def double(e: Entity) -> None:
        e["n"] *= 2

    saved = await Entity.objects.amodify(entity.id, double)
    assert saved["n"] == 10


async def test_aget_many_and_abulk_put():
    put = await Entity.objects.abulk_put(NumberedFactory.build_batch(5, tags=["x"]))
    ids = [e.id for e in put]
    found = await Entity.objects.aget_many([*ids, uuid.uuid4()])
    assert sorted(e["n"] for e in found.values()) == list(range(5))


async def test_queries_async_for_afirst_acount_aexists_apage():
    await Entity.objects.abulk_put(NumberedFactory.build_batch(7, tags=["x"]))
    query = Entity.objects.filter_index(tags="x")
    assert sorted([e["n"] async for e in query]) == list(range(7))
    assert await query.acount() == 7
    assert await query.aexists()
    assert not await Entity.objects.filter_index(tags="nothing").aexists()
    assert await Entity.objects.filter_index(tags="nothing").afirst() is None
    assert (await query.afirst())["tags"] == ["x"]
    seen, cursor = [], None
    while True:
        page = await query.apage(size=3, cursor=cursor)
        seen += [e["n"] for e in page]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == list(range(7))


async def test_all_async_for_acount_aexists_afirst_apage():
    assert not await Entity.objects.all().aexists()
    assert await Entity.objects.all().afirst() is None
    await Entity.objects.abulk_put(NumberedFactory.build_batch(9))
    everything = Entity.objects.all()
    assert await everything.acount() == 9
    assert sorted([e["n"] async for e in everything]) == list(range(9))
    assert (await everything.afirst()) is not None
    pages, cursor = [], None
    while True:
        page = await Entity.objects.all().apage(size=4, cursor=cursor)
        pages.append([e["n"] for e in page])
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [len(p) for p in pages] == [4, 4, 1]
    # The order of iterating all(): shard after shard, by added_id.
    assert [n for p in pages for n in p] == [e["n"] async for e in Entity.objects.all()]
    with pytest.raises(InvalidCursor):
        await Entity.objects.all().apage(size=4, cursor="forged")
    chunked = [e["n"] async for e in Entity.objects.all().aiterator(chunk_size=2)]
    assert chunked == [e["n"] async for e in Entity.objects.all()]


async def test_sync_calls_in_an_event_loop_raise_synchronous_only_operation():
    entity = await Entity.objects.acreate(n=1)
    calls = [
        lambda: Entity.objects.get(id=entity.id),
        lambda: Entity.objects.get_many([entity.id]),
        lambda: Entity.objects.create(n=2),
        lambda: Entity.objects.bulk_put([{"n": 3}]),
        lambda: Entity.objects.modify(entity.id, lambda e: None),
        entity.save,
        entity.delete,
        lambda: list(Entity.objects.filter_index(tags="x")),
        lambda: Entity.objects.filter_index(tags="x").count(),
        lambda: Entity.objects.filter_index(tags="x").first(),
        lambda: Entity.objects.filter_index(tags="x").exists(),
        lambda: Entity.objects.filter_index(tags="x").page(size=2),
        lambda: list(Entity.objects.all()),
        lambda: Entity.objects.all().count(),
        lambda: Entity.objects.all().first(),
        lambda: Entity.objects.all().page(size=2),
        lambda: list(Entity.objects.all().iterator()),
    ]
    for call in calls:
        with pytest.raises(SynchronousOnlyOperation):
            call()
    assert (await Entity.objects.aget(id=entity.id))["n"] == 1  # nothing was written


async def test_the_demo_async_view(feed_site):
    user = await User.objects.acreate(username="ann", email="ann@example.com")
    entry = await Entry.objects.acreate(user=user, title="Hello", link="https://example.com")
    await sync_to_async(Like.toggle)(entry, user)
    for body in ("first", "second"):
        await Comment.objects.acreate(entry_id=entry.id, user_id=user.id, body=body)
    response = await AsyncClient().get(f"/e/{entry.id}/json/")
    assert response.status_code == 200
    data = response.json()
    assert data["author"] == "ann" and data["title"] == "Hello"
    assert (data["likes"], data["comments"]) == (1, 2)
    assert (await AsyncClient().get(f"/e/{uuid.uuid4()}/json/")).status_code == 404


async def test_a_sync_get_answered_by_the_entity_cache_still_raises(settings):
    """No connection is opened for a cache hit, so Django's own check on connecting would not
    see it: the store's methods check themselves."""
    from django.core.cache import caches

    from schemaless_store.cache import entity_cache

    settings.CACHES = {
        **settings.CACHES,
        "entities": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    settings.SCHEMALESS = {**settings.SCHEMALESS, "CACHE": "entities"}
    await sync_to_async(caches["entities"].clear)()
    entity_cache.resume()
    entity = await Entity.objects.acreate(n=1)
    await Entity.objects.aget(id=entity.id)  # fills the cache
    hits = entity_cache.stats.hits
    await Entity.objects.aget(id=entity.id)
    assert entity_cache.stats.hits == hits + 1  # a read of this entity is a cache hit now
    with pytest.raises(SynchronousOnlyOperation):
        Entity.objects.get(id=entity.id)
    with pytest.raises(SynchronousOnlyOperation):
        Entity.objects.get_many([entity.id])
