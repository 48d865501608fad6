"""A kind is an entity in every other respect (docs/kinds.md#use-it): placement, the entity
cache and the near cache, cells and history, export and import, moves, ``manage.py
mapentities --kind``."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.conf import settings
from django.core.cache import caches
from django.core.management import CommandError, call_command
from django.test import override_settings

from schemaless_store.cache import entity_cache
from schemaless_store.models import Cell, Entity
from schemaless_store.topology import bucket_map
from tests.cache.test_near_cache import held, near_on, sneak
from tests.kindsapp.models import Note, Tag
from tests.support import STORE, buckets
from tests.support.backups import command, export, wipe

pytestmark = STORE


def test_a_placed_kind_lives_with_its_index_rows():
    user = uuid.uuid4()
    note = Note.objects.create(placed_with="user_id", title="placed", user_id=user)
    index = Note._kind.indexes[0]
    assert note.shard == bucket_map.alias_for(
        index.routing_key(index.column_value("user_id", user))
    )
    assert [n.id for n in Note.objects.filter_index(user_id=user)] == [note.id]


def test_kinds_read_through_the_entity_cache():
    caches_setting = {
        **settings.CACHES,
        "entities": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "k"},
    }
    raw = {**settings.SCHEMALESS, "CACHE": "entities"}
    with override_settings(CACHES=caches_setting, SCHEMALESS=raw), buckets.restored_afterwards():
        caches["entities"].clear()
        entity_cache.resume()
        entity_cache.reset_stats()
        note = Note.objects.create(title="cached")
        tag = Tag.objects.create(name="t", user_id=uuid.uuid4())
        assert Note.objects.get(id=note.id).title == "cached"
        assert Note.objects.get(id=note.id).title == "cached"
        assert entity_cache.stats.hits >= 1
        try:
            Note.objects.get(id=tag.id)
            raise AssertionError("a cached tag was answered as a note")
        except Note.DoesNotExist:
            pass
        again = Note.objects.get(id=note.id)
        again.title = "changed"
        again.save()
        assert Note.objects.get(id=note.id).title == "changed"  # the write invalidated it


def test_a_kind_reads_through_the_near_cache():
    """The near cache (docs/cache.md#the-near-cache) serves a kind's reads from process memory
    as instances of the kind, never another kind's entity as one; the kind's own write is read
    back at once."""
    with near_on(DROP_TIMEOUT=2.0):
        note = Note.objects.create(title="near", stars=2)
        tag = Tag.objects.create(name="t", user_id=uuid.uuid4())
        held(note.id)
        held(tag.id)
        sneak(note.id, kind="note", title="sneaked", stars=1)  # the row, behind the store
        entity_cache.reset_stats()
        got = Note.objects.get(id=note.id)
        assert type(got) is Note and (got.title, got.stars) == ("near", 2)  # from memory
        assert entity_cache.stats.near_hits == 1
        with pytest.raises(Note.DoesNotExist):
            Note.objects.get(id=tag.id)  # a tag held in memory is still no note
        assert set(Note.objects.get_many([note.id, tag.id])) == {note.id}
        assert type(Tag.objects.get(id=tag.id)) is Tag
        assert entity_cache.stats.near_hits == 5 and entity_cache.stats.misses == 0
        got.stars = 4
        got.save()
        again = Note.objects.get(id=note.id)
        assert (again.title, again.stars) == ("near", 4)


@override_settings(SCHEMALESS={**settings.SCHEMALESS, "HISTORY": True})
def test_a_kinds_cells_live_beside_it():
    """Cells keyed by a kind's id (docs/cells.md) are on its shard, with its history."""
    note = Note.objects.create(title="v1")
    cell = Cell.objects.put(note.id, "attachments", {"name": "a.png"})
    assert cell.shard == note.shard
    Cell.objects.put(note.id, "attachments", {"name": "b.png"})
    note.title = "v2"
    note.save()
    assert [c.body["name"] for c in Cell.objects.versions(note.id, "attachments")] == [
        "a.png",
        "b.png",
    ]
    assert Cell.objects.row(note.id)["attachments"].body == {"name": "b.png"}
    assert [v.properties["title"] for v in Note.objects.get(id=note.id).history()] == [
        "v1",
        "v2",
    ]
    assert Note.objects.get(id=note.id).title == "v2"  # the cells are no entity of any kind


def mend_stars(entry):
    """A mapentities function (by dotted path): a stored ``stars`` that no longer fits."""
    if not isinstance(entry, Note):
        raise TypeError(f"given a {type(entry).__name__}, not a Note")
    if not isinstance(entry["stars"], int):
        entry["stars"] = 3


def test_mapentities_command_with_a_kind(fresh_runs):
    """``manage.py mapentities PATH --kind note`` (docs/kinds.md#renaming-or-retyping-a-field):
    only notes, given as ``Note`` instances, saved without the kind's validation (it mends
    values that no longer fit); ``--where`` goes through the kind's indexes."""
    user = uuid.uuid4()
    mine = Entity.objects.create(kind="note", title="mine", stars="many", user_id=user)
    other = Entity.objects.create(kind="note", title="other", stars="lots")
    fine = Note.objects.create(title="fine", stars=5, user_id=user)
    tag = Tag.objects.create(name="t", user_id=user, stars="many")
    plain = Entity.objects.create(title="plain", stars="many", user_id=user)
    path = f"{__name__}.mend_stars"

    def run(*args: str) -> str:
        out = StringIO()
        call_command("mapentities", path, "--kind", "note", *args, stdout=out, stderr=out)
        return out.getvalue()

    # The id as typed on a command line is text: converted by the kind's UUIDField.
    assert "2 seen, 1 changed" in run("--where", f"user_id={user}")
    assert (Note.objects.get(id=mine.id).stars, Note.objects.get(id=other.id).stars) == (3, "lots")
    assert " 1 changed," in run()  # every entity is seen; only the other note changes
    assert Note.objects.get(id=other.id).stars == 3 and Note.objects.get(id=fine.id).stars == 5
    assert Tag.objects.get(id=tag.id)["stars"] == "many"
    assert Entity.objects.get(id=plain.id)["stars"] == "many"
    with pytest.raises(CommandError, match="user_id"):
        run("--where", "user_id=not-an-id")
    with pytest.raises(CommandError, match="no kind"):
        call_command("mapentities", path, "--kind", "nothing", stdout=StringIO())


def test_kinds_survive_export_and_import(tmp_path):
    user = uuid.uuid4()
    note = Note.objects.create(title="kept", user_id=user, stars=5)
    tag = Tag.objects.create(name="t", user_id=user, shade=2)
    path = tmp_path / "dump.jsonl"
    export(path)
    wipe()
    assert Entity.objects.all().count() == 0
    run = command("importentities", str(path))
    assert run.error is None, run
    assert Note.objects.get(id=note.id).stars == 5
    assert Tag.objects.get(id=tag.id)["shade"] == 2
    assert [n.id for n in Note.objects.filter_index(user_id=user)] == [note.id]
    assert [t.id for t in Tag.objects.filter_index(user_id=user)] == [tag.id]


@pytest.mark.usefixtures("buckets_restored")
def test_a_kind_moves_with_its_bucket_and_its_pinned_index_rows():
    from schemaless_store.moves import plan
    from schemaless_store.moves.mover import Mover

    user = uuid.uuid4()
    source = bucket_map.current().owners[0]
    target = buckets.other_alias(source)
    note = Note.objects.create(id=buckets.id_in_bucket(5), title="moving", user_id=user)
    tag = Tag.objects.create(id=buckets.id_in_bucket(6), name="t", user_id=user)
    assert note.shard == source
    Mover(plan.start(plan.plan(target, list(range(300))))).run()
    moved = Note.objects.get(id=note.id)
    assert moved.shard == target and moved.title == "moving"
    assert [n.id for n in Note.objects.filter_index(user_id=user)] == [note.id]
    with pytest.raises(Note.DoesNotExist):
        Note.objects.get(id=tag.id)  # still a tag, on its new shard too
    moved.title = "moved"
    moved.full_clean()
    moved.save(if_unchanged=True)  # read after the move: no Conflict
    assert Note.objects.get(id=note.id).title == "moved"
    assert Entity.objects.get(id=note.id)["kind"] == Note._kind.name
