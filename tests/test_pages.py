from __future__ import annotations

import uuid

import pytest

from schemaless_store.exceptions import InvalidCursor, InvalidQuery
from schemaless_store.models import Entity
from tests.conftest import STORE
from tests.factories import PostFactory

pytestmark = STORE


def posts(user: bytes, count: int, start: int = 0) -> list[Entity]:
    return Entity.objects.bulk_put(
        [PostFactory(user_id=user, published=start + n) for n in range(count)]
    )


def test_pages_walk_everything_once_in_order():
    alice = uuid.uuid4().bytes
    posts(alice, 23)
    qs = Entity.objects.filter_index(user_id=alice).order_by("-published")
    seen, cursor, pages = [], None, 0
    while True:
        page = qs.page(after=cursor, size=5)
        pages += 1
        seen.extend(e["published"] for e in page)
        if not page.has_next:
            break
        cursor = page.next_cursor
    assert seen == list(range(22, -1, -1))
    assert pages == 5


def test_pages_are_stable_under_concurrent_inserts():
    alice = uuid.uuid4().bytes
    before = {e.id for e in posts(alice, 10, start=100)}
    qs = Entity.objects.filter_index(user_id=alice).order_by("-published")
    first = qs.page(size=4)
    posts(alice, 5, start=200)  # newer entries arrive while the reader pages
    posts(alice, 2, start=104)  # and some land among entries already read
    walked, cursor = list(first), first.next_cursor
    while cursor:
        page = qs.page(after=cursor, size=4)
        walked.extend(page)
        cursor = page.next_cursor
    ids = [e.id for e in walked]
    assert len(set(ids)) == len(ids), "no entity twice"
    assert before <= set(ids), "nothing that existed at the first read is skipped"
    published = [e["published"] for e in walked]
    assert published == sorted(published, reverse=True)


def test_tampered_and_foreign_cursors_are_clear_errors():
    alice, bob = uuid.uuid4().bytes, uuid.uuid4().bytes
    posts(alice, 6)
    posts(bob, 6)
    page = Entity.objects.filter_index(user_id=alice).order_by("-published").page(size=2)
    cursor = page.next_cursor
    assert cursor
    tampered = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    with pytest.raises(InvalidCursor):
        Entity.objects.filter_index(user_id=alice).order_by("-published").page(after=tampered)
    with pytest.raises(InvalidCursor, match="another query"):
        Entity.objects.filter_index(user_id=bob).order_by("-published").page(after=cursor)
    with pytest.raises(InvalidCursor):
        Entity.objects.filter_index(user_id=alice).order_by("-published").page(after="garbage")
    with pytest.raises(InvalidQuery):
        Entity.objects.filter_index(user_id=alice).page(size=0)
    assert isinstance(InvalidCursor("x"), InvalidQuery)


def test_scatter_gather_pages_merge_shards_in_order():
    users = sorted(uuid.uuid4().bytes for _ in range(6))
    for user in users:
        posts(user, 4)
    qs = Entity.objects.filter_index(user_id__gte=b"").order_by("user_id")
    got, cursor = [], None
    while True:
        page = qs.page(after=cursor, size=7)
        got.extend((e["user_id"], e["published"]) for e in page)
        if not page.has_next:
            break
        cursor = page.next_cursor
    # Ordered by user_id, then entity id (the index's own order); every entity exactly once.
    assert [u for u, _p in got] == [u for u in users for _ in range(4)]
    assert sorted(got) == [(u, p) for u in users for p in range(4)]
