"""A kind's Django querysets are pinned to the kind (docs/kinds.md#use-it):
``Note.objects.using(alias)``, ``filter(id=...)``, Django's base manager, and every method on
them, never give another kind's entity (or a plain one) as a ``Note``."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from schemaless_store.exceptions import InvalidQuery
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.kindsapp.models import Note, Tag
from tests.support import STORE, buckets

pytestmark = STORE


@pytest.fixture
def one_shard():
    """A note, two tags and a plain entity, all on one shard: (alias, note, tag, other tag,
    plain), the note written second so that neither end of the shard's order is it."""
    alias = shards.shard_aliases()[0]
    first, second, third, fourth = buckets.ids_on(alias, 4)
    tag = Tag.objects.create(id=first, name="t", user_id=first)
    note = Note.objects.create(id=second, title="n")
    other = Tag.objects.create(id=third, name="u", user_id=third)
    plain = Entity.objects.create(id=fourth, title="plain")
    return alias, note, tag, other, plain


def test_using_a_shard_gives_only_the_kind(one_shard):
    alias, note, tag, other, _plain = one_shard
    on_shard = Note.objects.using(alias)
    assert [n.id for n in on_shard.all()] == [note.id]
    assert [n.id for n in on_shard.order_by("-added_id")] == [note.id]
    assert on_shard.count() == 1 and on_shard.exists() and len(on_shard.all()) == 1
    assert on_shard.first().id == note.id and on_shard.last().id == note.id
    assert [n.id for n in on_shard.all()[:1]] == [note.id]  # not the tag before it
    assert on_shard.all()[0].id == note.id
    with pytest.raises(IndexError):
        on_shard.all()[1]
    assert on_shard.earliest("added_id").id == note.id
    assert on_shard.latest("added_id").id == note.id
    assert on_shard.get().id == note.id  # one note among four rows
    assert list(on_shard.iterator(chunk_size=1)) == [note]
    assert set(on_shard.in_bulk([note.added_id, tag.added_id])) == {note.id}
    assert on_shard.contains(note) and not on_shard.contains(Tag.objects.get(id=tag.id))
    assert [t.id for t in Tag.objects.using(alias).order_by("added_id")] == [tag.id, other.id]
    assert Note.objects.using(shards.shard_aliases()[1]).count() == 0


def test_filter_by_id_gives_another_kinds_entity_as_nothing(one_shard):
    alias, note, tag, _other, plain = one_shard
    for wrong in (tag, plain):
        by_id = Note.objects.using(alias).filter(id=wrong.id)
        assert list(by_id) == [] and by_id.count() == 0 and not by_id.exists()
        assert by_id.first() is None
        with pytest.raises(Note.DoesNotExist):
            by_id.get()
        with pytest.raises(Note.DoesNotExist):
            Note.objects.using(alias).get(row_id=wrong.row_id)
        with pytest.raises(Note.DoesNotExist):
            Note.objects.using(alias).filter(id__in=[wrong.id]).earliest("added_id")
    assert Note.objects.using(alias).filter(id=note.id).get() == note
    assert [n.id for n in Note.objects.using(alias).filter(id__in=[tag.id, note.id])] == [note.id]


def test_a_delete_through_a_kinds_queryset_leaves_other_kinds(one_shard):
    alias, note, tag, other, plain = one_shard
    assert Note.objects.using(alias).filter(id__in=[tag.id, plain.id]).delete()[0] == 0
    assert Note.objects.using(alias).all().delete()[0] == 1
    assert set(Entity.objects.get_many([note.id, tag.id, other.id, plain.id])) == {
        tag.id,
        other.id,
        plain.id,
    }


def test_djangos_base_manager_is_pinned_too(one_shard):
    alias, note, *_rest = one_shard
    assert [n.id for n in Note._base_manager.using(alias).all()] == [note.id]
    assert [n.id for n in Note._default_manager.using(alias).all()] == [note.id]


@pytest.mark.asyncio
async def test_the_async_queryset_methods_are_pinned(one_shard):
    # Django's database thread may hold a connection from an earlier test that a bucket
    # move's fence has since ended (test_kinds_as_entities); Django's querysets do not retry.
    await sync_to_async(connections.close_all)()
    alias, note, *_rest = one_shard
    on_shard = Note.objects.using(alias)
    assert [n.id async for n in on_shard.all()] == [note.id]
    assert [n.id async for n in on_shard.aiterator(chunk_size=1)] == [note.id]
    assert await on_shard.acount() == 1 and (await on_shard.afirst()).id == note.id


def test_what_cannot_be_pinned_is_refused(one_shard):
    alias = one_shard[0]
    on_shard = Note.objects.using(alias)
    for refused in (
        lambda: on_shard.values("row_id"),
        lambda: on_shard.values_list("row_id", flat=True),
        lambda: on_shard.aggregate(),
        lambda: on_shard.raw("SELECT * FROM entities"),
        lambda: on_shard.dates("row_updated", "day"),
    ):
        with pytest.raises(InvalidQuery, match="other kinds"):
            refused()
