from __future__ import annotations

import threading
import uuid

import pytest

from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import InvalidQuery, NoIndexForQuery, SchemalessError
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import index_values
from tests.support import STORE
from tests.support.factories import PostFactory
from tests.support.raw import index_rows, insert_index_row, record_reads

pytestmark = STORE


def make_posts(user: bytes, count: int, start: int = 1000) -> list[Entity]:
    return Entity.objects.bulk_put(
        [PostFactory(user_id=user, published=start + n) for n in range(count)]
    )


def test_equality_with_bytes_user_ids():
    alice, bob = uuid.uuid4().bytes, uuid.uuid4().bytes
    mine = make_posts(alice, 5)
    make_posts(bob, 3)
    found = list(Entity.objects.filter_index(user_id=alice))
    assert {e.id for e in found} == {e.id for e in mine}
    assert all(e["user_id"] == alice for e in found)


def test_no_index_covers_the_filter_names_the_indexes():
    """The refusal names the query, each declared index that shares a property with it and
    why it does not serve, and a declaration that would."""
    with pytest.raises(NoIndexForQuery) as info:
        list(Entity.objects.filter_index(user_id=b"u", title="x"))
    message = str(info.value)
    assert isinstance(info.value, SchemalessError) and isinstance(info.value, InvalidQuery)
    assert "filter_index(user_id=b'u', title='x')" in message
    assert "index_user_id (user_id; shard_on user_id) [ready]: has no property `title`" in message
    assert "index_user_published" in message
    assert "index_link" not in message  # unrelated: counted, not listed
    assert "other declared indexes share no property with the query" in message
    assert "properties=['user_id', 'title'], shard_on='user_id'" in message
    with pytest.raises(NoIndexForQuery) as info:
        list(Entity.objects.filter_index(title="x"))
    assert "shard_on='title'" in str(info.value)


def test_composite_prefix_range_and_order():
    alice = uuid.uuid4().bytes
    make_posts(alice, 20)
    make_posts(uuid.uuid4().bytes, 10)
    newest = Entity.objects.filter_index(user_id=alice).order_by("-published")[:5]
    assert [e["published"] for e in newest] == [1019, 1018, 1017, 1016, 1015]
    oldest = list(Entity.objects.filter_index(user_id=alice).order_by("published")[:3])
    assert [e["published"] for e in oldest] == [1000, 1001, 1002]
    window = Entity.objects.filter_index(user_id=alice, published__gte=1005, published__lt=1008)
    assert sorted(e["published"] for e in window) == [1005, 1006, 1007]
    assert Entity.objects.filter_index(user_id=alice, published__gt=1017).count() == 2
    assert Entity.objects.filter_index(user_id=alice, published__lte=1001).count() == 2


def test_in_lookup():
    users = [uuid.uuid4().bytes for _ in range(3)]
    for user in users:
        make_posts(user, 2)
    found = Entity.objects.filter_index(user_id__in=users[:2])
    assert found.count() == 4
    assert list(Entity.objects.filter_index(user_id__in=[])) == []


def test_slicing_first_exists_count_ids():
    alice = uuid.uuid4().bytes
    made = make_posts(alice, 12)
    qs = Entity.objects.filter_index(user_id=alice).order_by("-published")
    assert qs.count() == 12
    assert qs.exists()
    assert qs.first()["published"] == 1011
    assert [e["published"] for e in qs[2:5]] == [1009, 1008, 1007]
    assert [e["published"] for e in qs[2:5][1:2]] == [1008]
    assert qs[3]["published"] == 1008
    assert set(qs.ids()) == {e.id for e in made}
    assert not Entity.objects.filter_index(user_id=b"nobody").exists()
    assert Entity.objects.filter_index(user_id=b"nobody").first() is None


def test_a_query_is_a_sequence_as_a_django_queryset_is(monkeypatch):
    alice = uuid.uuid4().bytes
    make_posts(alice, 7)
    qs = Entity.objects.filter_index(user_id=alice).order_by("published")
    assert len(qs) == 7 and bool(qs)
    # Evaluated once: indexing, slicing and len() use the results already read.
    monkeypatch.setattr(type(qs), "_results", lambda self: iter(()))
    assert qs[6]["published"] == 1006 and [e["published"] for e in qs[1:3]] == [1001, 1002]
    with pytest.raises(IndexError):
        qs[7]
    monkeypatch.undo()
    fresh = Entity.objects.filter_index(user_id=alice).order_by("published")
    assert [e["published"] for e in fresh[::3]] == [1000, 1003, 1006]
    assert [e["published"] for e in fresh[1:6:2]] == [1001, 1003, 1005]
    for bad in (-1, slice(-2, None), slice(None, -1)):
        with pytest.raises(ValueError, match="Negative indexing is not supported"):
            fresh[bad]
    with pytest.raises(TypeError):
        fresh["a"]
    nobody = Entity.objects.filter_index(user_id=b"nobody")
    assert not nobody and len(nobody) == 0


def test_scatter_gather_merges_in_order_across_shards():
    # A range on a composite index's first column does not pin a shard: all shards are read.
    users = [uuid.uuid4().bytes for _ in range(8)]
    for n, user in enumerate(users):
        make_posts(user, 3, start=2000 + n * 10)
    got = [e["user_id"] for e in Entity.objects.filter_index(user_id__gte=b"").order_by("user_id")]
    assert got == sorted(got) and len(got) == 24


def test_stale_rows_do_not_shorten_a_page():
    alice = uuid.uuid4().bytes
    made = make_posts(alice, 30)
    # The newest twenty (more than a batch of index rows) move to another user, and their old
    # rows linger (as after a crash): the page must skip them and refill from further rows.
    for e in made[10:]:
        e["user_id"] = b"someone else"
        e.save()
        value = index_values.encode_key(alice)
        insert_index_row(
            "index_user_published",
            bucket_map.alias_for(index_values.encode_key(value)),
            (value, e["published"], e.id.bytes),
        )
    page = Entity.objects.filter_index(user_id=alice).order_by("-published")[:5]
    assert [e["published"] for e in page] == [1009, 1008, 1007, 1006, 1005]
    # The stale rows are really there:
    assert len(Entity.objects.filter_index(user_id=alice).order_by("-published").ids()) == 30


@pytest.mark.parametrize(
    "call",
    [
        lambda: Entity.objects.filter_index(user_id__startswith="x"),
        lambda: Entity.objects.filter_index(),
        lambda: Entity.objects.filter_index(user_id__in="abc"),
        lambda: list(Entity.objects.filter_index(user_id=b"x").order_by("title")),
        lambda: Entity.objects.filter_index(user_id=b"x")[-1],
        lambda: list(Entity.objects.filter_index(user_id=b"x", published="soon")),
    ],
    ids=["lookup", "empty", "in-string", "order-unindexed", "negative", "wrong-type"],
)
def test_bad_queries_are_clear_errors(call):
    with pytest.raises((InvalidQuery, NoIndexForQuery)):
        call()


def test_a_page_reads_each_entity_from_the_shard_that_owns_it():
    """A pinned page joins the entities of the index's own shard: a stale copy of an entity
    left on a shard that does not own its id (e.g. after a bucket move) must not answer."""
    from django.db import connections

    from schemaless_store.config import conf

    user = uuid.uuid4().bytes
    index = registry.get("index_user_published")  # what the page below reads
    index_alias = bucket_map.alias_for(index.routing_key(index.column_value("user_id", user)))
    # Ids chosen so the page mixes both shards, whatever uuid4 draws: three posts owned by the
    # index's shard, three by another.
    ids = {True: [], False: []}
    while len(ids[True]) < 3 or len(ids[False]) < 3:
        candidate = uuid.uuid4()
        local = bucket_map.alias_for(candidate.bytes) == index_alias
        if len(ids[local]) < 3:
            ids[local].append(candidate)
    posts = Entity.objects.bulk_put(
        [
            PostFactory(id=entity_id, user_id=user, published=1000 + n)
            for n, entity_id in enumerate(ids[True] + ids[False])
        ]
    )
    foreign = [p for p in posts if p.shard != index_alias]
    assert len(foreign) == 3
    # The premise: the page's index rows are on index_alias, next to the stale copy below.
    assert len(index_rows("index_user_published", index_alias)) == 6
    stale = foreign[0]
    copy = {**stale.body_properties(), "title": "stale copy"}
    conn = connections[index_alias]
    with conn.cursor() as cursor:
        cursor.execute(
            "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)",
            [
                stale.row_id,
                conn.ops.adapt_datetimefield_value(stale.row_updated),
                conf.get().codec.encode(copy),
            ],
        )
    page = Entity.objects.filter_index(user_id=user).order_by("-published").page(size=10)
    assert [e.id for e in page] == [p.id for p in sorted(posts, key=lambda p: -p["published"])]
    assert all(e["title"] != "stale copy" for e in page)
    assert {e.id: e.shard for e in page} == {p.id: p.shard for p in posts}
    sliced = list(Entity.objects.filter_index(user_id=user).order_by("published")[:3])
    assert [e.id for e in sliced] == [p.id for p in posts[:3]]


# --- scatter-gather: the shape, concurrency, limits ----------------------------------


def newest_first(entities: list[Entity], before: int) -> list[uuid.UUID]:
    """The documented order of ``published__lt=before`` by ``-published``: published, then
    entity id, both descending."""
    chosen = [e for e in entities if e["published"] < before]
    chosen.sort(key=lambda e: (e["published"], e.id.bytes), reverse=True)
    return [e.id for e in chosen]


def spread_posts(users: int = 8, each: int = 12) -> list[Entity]:
    # Published times collide across users (ties are broken by id).
    return Entity.objects.bulk_put(
        [
            PostFactory(user_id=bytes([n + 1]) * 16, published=1000 + (k * 3 + n) // 2)
            for n in range(users)
            for k in range(each)
        ]
    )


def test_a_range_on_published_alone_scatters_over_every_shard(published_first, monkeypatch):
    made = spread_posts()
    before = 1000 + 40
    qs = Entity.objects.filter_index(published__lt=before).order_by("-published")
    assert qs.index is published_first
    want = newest_first(made, before)
    assert len(want) > 60
    reads = record_reads(monkeypatch, published_first.name)
    assert [e.id for e in qs[:30]] == want[:30]
    assert sorted(r.alias for r in reads) == sorted(shards.shard_aliases())
    assert [e.id for e in qs] == want
    for size in (1, 7, 30):
        got, cursor = [], None
        while True:
            page = qs.page(after=cursor, size=size)
            got.extend(e.id for e in page)
            if not page.has_next:
                break
            cursor = page.next_cursor
        assert got == want, f"pages of {size}"


@pytest.mark.parametrize(("start", "stop"), [(0, 30), (10, 40), (0, 1)])
def test_the_limit_is_pushed_down_to_every_shard(published_first, monkeypatch, start, stop):
    """A slice of a scatter query asks each shard for ``offset + limit`` rows, once: what is
    read follows the page, not the table."""
    made = spread_posts(users=8, each=25)
    qs = Entity.objects.filter_index(published__lt=10**6).order_by("-published")
    reads = record_reads(monkeypatch, published_first.name)
    assert [e.id for e in qs[start:stop]] == newest_first(made, 10**6)[start:stop]
    assert len(reads) == len(shards.shard_aliases())
    assert all(r.sql.endswith(f"LIMIT {stop}") for r in reads), [r.sql for r in reads]
    assert sum(r.rows for r in reads) <= stop * len(reads) < len(made)


def test_scatter_reads_the_shards_at_once(published_first, monkeypatch):
    """The first batches of every shard run concurrently: each read waits for the others at a
    barrier, which reads made one after the other would never pass."""
    spread_posts(users=6, each=4)
    aliases = shards.shard_aliases()
    assert len(aliases) > 1
    barrier = threading.Barrier(len(aliases), timeout=10)
    waiting = list(aliases)
    real = shards.read

    def read(alias, sql, params, conn=None):
        if published_first.name in sql and alias in waiting:
            waiting.remove(alias)
            barrier.wait()
        return real(alias, sql, params, conn)

    monkeypatch.setattr(shards, "read", read)
    page = Entity.objects.filter_index(published__gte=0).order_by("published").page(size=5)
    assert len(page) == 5
    assert not waiting
