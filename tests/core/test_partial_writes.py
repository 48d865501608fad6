"""Issue 35's write-path items: a create with a given id reads nothing first (its ``INSERT``
relies on the primary key), and ``save(update_fields=...)`` writes only those properties'
change over the stored body (docs/usage.md#saving-only-some-properties,
docs/design.md#write-protocol)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError, connections, transaction
from django.db.models.signals import post_save, pre_save
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from schemaless_store.config import conf
from schemaless_store.exceptions import EntityExists, IndexValueError
from schemaless_store.models import Entity
from schemaless_store.values.codec import JsonCodec
from tests.kindsapp.models import Note
from tests.support import STORE
from tests.support.raw import count_everything, index_rows

# The receipt pruning would add a round trip to a write now and then (tests/conftest.py).
pytestmark = [STORE, pytest.mark.usefixtures("no_receipt_pruning")]

HISTORY = override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})


def _statements(entity_id: uuid.UUID, write: Any) -> list[str]:
    """The statements ``write()`` sends on the shard connection of ``entity_id``."""
    conn = connections[Entity(id=entity_id).shard]
    with CaptureQueriesContext(conn) as captured:
        write()
    return [q["sql"] for q in captured.captured_queries]


def _reads_entities(statements: list[str]) -> bool:
    return any(s.lstrip().upper().startswith("SELECT") and "entities" in s for s in statements)


# --- a create with a given id -----------------------------------------------------------------


def test_a_create_with_a_given_id_reads_nothing_first():
    Entity.objects.create(title="warm-up")  # connections and the map, once
    given = uuid.uuid4()
    sent = _statements(given, lambda: Entity.objects.create(id=given, title="t", link="https://a"))
    assert any(s.lstrip().upper().startswith("INSERT") for s in sent)
    assert not _reads_entities(sent), sent
    # An update still locks and reads its row first (the old index rows come from it).
    entity = Entity.objects.get(id=given)
    entity["link"] = "https://b"
    assert _reads_entities(_statements(given, entity.save))
    assert [e.id for e in Entity.objects.filter_index(link="https://b")] == [given]
    assert index_rows("index_link") and len(index_rows("index_link")) == 1


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_an_existing_id_created_again_raises_and_changes_nothing(history: bool):
    with HISTORY if history else override_settings():
        first = Entity.objects.create(username="ringo", link="https://first", user_id=b"1" * 16)
        before = count_everything()
        versions = len(first.history()) if history else 0
        with pytest.raises(EntityExists):
            Entity.objects.create(
                id=first.id, username="george", link="https://second", user_id=b"2" * 16
            )
        assert Entity.objects.get(id=first.id).properties == first.properties
        assert count_everything() == before
        assert not list(Entity.objects.filter_index(link="https://second"))
        assert not list(Entity.objects.filter_index(username="george"))
        assert [e.id for e in Entity.objects.filter_index(username="ringo")] == [first.id]
        if history:
            assert len(first.history()) == versions


def test_an_existing_id_created_inside_a_callers_transaction_leaves_it_usable():
    first = Entity.objects.create(title="first", link="https://first")
    other = uuid.uuid4()
    shard = first.shard
    with transaction.atomic(using=shard):
        with pytest.raises(EntityExists):
            Entity.objects.create(id=first.id, title="second", link="https://second")
        if Entity(id=other).shard == shard:
            Entity.objects.create(id=other, title="other")
    assert Entity.objects.get(id=first.id)["title"] == "first"
    assert not list(Entity.objects.filter_index(link="https://second"))


def test_a_kind_created_with_an_existing_id_raises():
    note = Note.objects.create(title="one")
    with pytest.raises(EntityExists):
        Note.objects.create(id=note.id, title="two")
    assert Note.objects.get(id=note.id).title == "one"
    assert len(index_rows("index_note_title")) == 1


@contextmanager
def _round_trips() -> Iterator[list[str]]:
    """Every request the MariaDB driver sends, on any connection (a statement or several in
    one query, a commit, a rollback, an autocommit switch): one round trip each."""
    import MySQLdb.connections

    cls = MySQLdb.connections.Connection
    sent: list[str] = []
    originals = {name: getattr(cls, name) for name in ("query", "commit", "rollback", "autocommit")}

    def spy(name: str) -> Any:
        def call(self: Any, *args: Any) -> Any:
            sent.append(name if name != "query" else bytes(args[0])[:200].decode(errors="replace"))
            return originals[name](self, *args)

        return call

    for name in originals:
        setattr(cls, name, spy(name))
    try:
        yield sent
    finally:
        for name, original in originals.items():
            setattr(cls, name, original)


@pytest.mark.mariadb_only
def test_a_create_with_a_given_id_costs_no_locking_read_round_trip():
    for _ in range(8):  # connections (both shards), the map, the index writers: opened first
        Entity.objects.create(id=uuid.uuid4(), title="warm-up", link=f"https://{uuid.uuid4()}")
    counts: dict[str, int] = {}
    locked: list[list[str]] = []
    for label, given in (("generated", False), ("given", True)):
        tries = []
        for _ in range(3):  # the fewest of three: a receipt pruning may add one now and then
            props: dict[str, Any] = {"title": "t", "link": f"https://{uuid.uuid4()}"}
            if given:
                props["id"] = uuid.uuid4()
            with _round_trips() as sent:
                Entity.objects.create(**props)
            locked += [sent] if any("FOR UPDATE" in s for s in sent) else []
            tries.append(len(sent))
        counts[label] = min(tries)
    print("round trips of a create:", counts)
    assert not locked, locked
    # A given id costs what a generated one does: no locking read before its INSERT.
    assert counts["given"] == counts["generated"], counts
    given = uuid.uuid4()
    with _round_trips() as sent:
        Entity.objects.create(id=given, title="t", link=f"https://{given}")
    print("a create with a given id:", sent)
    # BEGIN and the row's INSERT (its key locked before its index rows:
    # tests/core/test_rows_under_the_lock.py), the index rows, then the receipt and the
    # COMMIT (tests/core/test_write_round_trips.py has every write's round trips).
    assert sent[0].startswith("BEGIN; INSERT INTO entities"), sent
    assert sent[1].startswith("INSERT INTO `index_link`"), sent
    assert sent[2].startswith("INSERT INTO schemaless_receipts"), sent
    assert len(sent) == counts["given"] == 3, sent
    # An update of an existing entity still locks its row first.
    entity = Entity.objects.get(id=given)
    entity["title"] = "u"
    with _round_trips() as sent:
        entity.save()
    assert any(s.startswith(("SELECT", "BEGIN; SELECT")) and "FOR UPDATE" in s for s in sent), sent


@pytest.mark.mariadb_only
def test_changing_one_property_by_id_costs_no_get():
    # "views": no unique index covers it (one over a changed property takes atomic()'s two
    # SET autocommit round trips: its claim may check the holder on this connection).
    entity = Entity.objects.create(title="a", link="https://a", views=0)
    for n in range(3):  # connections and the map, on the entity's shard, opened first
        Entity.objects.filter(id=entity.id).update(views=n)
    counts: dict[str, int] = {}

    def get_and_save() -> None:
        read = Entity.objects.get(id=entity.id)
        read["views"] = 10
        read.save()

    def save_some() -> None:
        entity["views"] = 11
        entity.save(update_fields=["views"])

    for label, write in (
        ("get+save", get_and_save),
        ("save(update_fields)", save_some),
        ("filter(id).update", lambda: Entity.objects.filter(id=entity.id).update(views=12)),
    ):
        tries = []
        for _ in range(3):  # the fewest of three: a receipt pruning may add one now and then
            with _round_trips() as sent:
                write()
            tries.append(len(sent))
        counts[label] = min(tries)
    print("round trips of a one-property change:", counts)
    # BEGIN with the locked read; the UPDATE with the receipt and the COMMIT; a get adds its
    # read.
    # With JSON bodies the server applies them: one round trip, no read
    # (docs/design.md#partial-updates-on-the-server).
    partial = 1 if isinstance(conf.get().codec, JsonCodec) else 2
    assert counts["filter(id).update"] == counts["save(update_fields)"] == partial, counts
    assert counts["get+save"] == 3, counts


# --- save(update_fields=...) ------------------------------------------------------------------


def test_update_fields_writes_only_those_properties():
    entity = Entity.objects.create(title="a", link="https://a", user_id=b"1" * 16)
    entity["title"] = "b"
    entity["link"] = "https://b"  # unsaved, and stays so
    entity.save(update_fields=["title"])
    stored = Entity.objects.get(id=entity.id)
    assert stored["title"] == "b" and stored["link"] == "https://a"
    assert entity["link"] == "https://b"  # the unsaved change stays in memory
    assert [e.id for e in Entity.objects.filter_index(link="https://a")] == [entity.id]
    assert not list(Entity.objects.filter_index(link="https://b"))


def test_update_fields_keeps_another_clients_change_of_other_properties():
    mine = Entity.objects.create(title="a", link="https://a", user_id=b"1" * 16)
    theirs = Entity.objects.get(id=mine.id)
    theirs["link"] = "https://theirs"
    theirs.save()
    mine["title"] = "mine"
    mine.save(update_fields=["title"])
    stored = Entity.objects.get(id=mine.id)
    assert stored.properties == {
        "id": mine.id,
        "title": "mine",
        "link": "https://theirs",
        "user_id": b"1" * 16,
    }
    assert [e.id for e in Entity.objects.filter_index(link="https://theirs")] == [mine.id]
    assert len(index_rows("index_link")) == 1  # the stale row of https://a went


def test_update_fields_moves_index_rows_and_removes_a_deleted_property():
    entity = Entity.objects.create(title="a", link="https://a", username="pete")
    entity["link"] = "https://b"
    entity["username"] = "stuart"  # unsaved: its unique claim stays pete's
    entity.save(update_fields=["link"])
    assert [e.id for e in Entity.objects.filter_index(link="https://b")] == [entity.id]
    assert not list(Entity.objects.filter_index(link="https://a"))
    assert [e.id for e in Entity.objects.filter_index(username="pete")] == [entity.id]
    assert not list(Entity.objects.filter_index(username="stuart"))
    del entity["link"]
    entity.save(update_fields=["link"])
    assert "link" not in Entity.objects.get(id=entity.id)
    assert not index_rows("index_link")
    # A unique property named is claimed like any other write's.
    entity.save(update_fields=["username"])
    assert [e.id for e in Entity.objects.filter_index(username="stuart")] == [entity.id]
    assert not list(Entity.objects.filter_index(username="pete"))


def test_update_fields_validates_only_what_it_writes():
    entity = Entity.objects.create(title="a", user_id=b"1" * 16, published=2020)
    entity["title"] = "b"
    entity["link"] = object()  # unsaved and unencodable: not written, not checked
    entity.save(update_fields=["title"])
    assert Entity.objects.get(id=entity.id)["title"] == "b"
    before = count_everything()
    entity["title"] = "c"
    entity["published"] = "soon"  # index_user_published takes an int
    with pytest.raises(IndexValueError):
        entity.save(update_fields=["title", "published"])
    assert count_everything() == before
    assert Entity.objects.get(id=entity.id).properties == {
        "id": entity.id,
        "title": "b",
        "user_id": b"1" * 16,
        "published": 2020,
    }


def test_update_fields_refuses_what_it_cannot_do():
    entity = Entity.objects.create(title="a")
    with pytest.raises(ValueError, match="cannot force an insert"):
        entity.save(force_insert=True, update_fields=["title"])
    with pytest.raises(ValueError, match="'id'"):
        entity.save(update_fields=["id"])
    missing = Entity(title="never stored")
    before = count_everything()
    with pytest.raises(DatabaseError, match="does not exist"):
        missing.save(update_fields=["title"])
    assert count_everything() == before
    entity["title"] = "b"
    sent = _statements(entity.id, lambda: entity.save(update_fields=[]))
    assert sent == [] and Entity.objects.get(id=entity.id)["title"] == "a"


def test_update_fields_reaches_the_signals_and_the_history():
    heard: list[Any] = []

    def listen(sender: Any, update_fields: Any, **kwargs: Any) -> None:
        heard.append(update_fields)

    pre_save.connect(listen, sender=Entity)
    post_save.connect(listen, sender=Entity)
    try:
        with HISTORY:
            entity = Entity.objects.create(title="a", link="https://a")
            entity["title"] = "b"
            entity["link"] = "https://unsaved"
            entity.save(update_fields=["title"])
            versions = entity.history()
    finally:
        pre_save.disconnect(listen, sender=Entity)
        post_save.disconnect(listen, sender=Entity)
    assert heard == [None, None, frozenset({"title"}), frozenset({"title"})]
    assert versions[-1].properties == {"id": entity.id, "title": "b", "link": "https://a"}


def test_a_kind_saves_only_its_named_fields():
    note = Note.objects.create(title="one", stars=3)
    other = Note.objects.get(id=note.id)
    other.stars = 5
    other.save()
    note.title = "two"
    note.stars = 1
    note.save(update_fields=["title"])
    stored = Note.objects.get(id=note.id)
    assert (stored.title, stored.stars) == ("two", 5)
    assert [n.id for n in Note.objects.filter_index(title="two")] == [note.id]
    assert len(index_rows("index_note_title")) == 1


@pytest.mark.asyncio
async def test_asave_passes_update_fields():
    from asgiref.sync import sync_to_async

    entity = await sync_to_async(Entity.objects.create)(title="a", link="https://a")
    entity["title"] = "b"
    entity["link"] = "https://b"
    await entity.asave(update_fields=["title"])
    stored = await sync_to_async(Entity.objects.get)(id=entity.id)
    assert (stored["title"], stored["link"]) == ("b", "https://a")


# --- filter(id=...).update(...) ---------------------------------------------------------------


def test_update_by_id_changes_the_entity_and_its_index_rows_without_a_get():
    mine = Entity.objects.create(title="a", link="https://a", user_id=b"1" * 16)
    theirs = Entity.objects.get(id=mine.id)
    theirs["user_id"] = b"2" * 16
    theirs.save()
    sent = _statements(
        mine.id, lambda: Entity.objects.filter(id=mine.id).update(title="b", link="https://b")
    )
    # The row is read once, under its lock in the write's own transaction (no separate get).
    reads = [s for s in sent if s.lstrip().upper().startswith("SELECT") and "entities" in s]
    assert len(reads) <= 2, sent  # step 1, and step 5's re-check of the stale link row
    stored = Entity.objects.get(id=mine.id)
    assert stored.properties == {
        "id": mine.id,
        "title": "b",
        "link": "https://b",
        "user_id": b"2" * 16,  # another client's change of another property is kept
    }
    assert [e.id for e in Entity.objects.filter_index(link="https://b")] == [mine.id]
    assert not list(Entity.objects.filter_index(link="https://a"))
    assert len(index_rows("index_link")) == 1


def test_update_by_ids_counts_what_it_changed_and_a_missing_id_as_0():
    made = [Entity.objects.create(title=f"t{n}", link=f"https://{n}") for n in range(6)]
    missing = uuid.uuid4()
    changed = Entity.objects.filter(id__in=[e.id for e in made] + [missing]).update(
        link="https://same"
    )
    assert changed == 6
    assert {e.id for e in Entity.objects.filter_index(link="https://same")} == {e.id for e in made}
    assert len(index_rows("index_link")) == 6
    assert Entity.objects.filter(id=missing).update(title="x") == 0
    assert not Entity.objects.get_many([missing])
    assert Entity.objects.filter(id__in=[]).update(title="x") == 0


def test_update_by_id_writes_history_and_validates_first():
    with HISTORY:
        entity = Entity.objects.create(title="a", user_id=b"1" * 16, published=1)
        assert Entity.objects.filter(id=entity.id).update(published=2) == 1
        assert [v.properties["published"] for v in entity.history()] == [1, 2]
        before = count_everything()
        with pytest.raises(IndexValueError):
            Entity.objects.filter(id=entity.id).update(published="soon")
        assert count_everything() == before
        assert Entity.objects.get(id=entity.id)["published"] == 2


def test_update_refuses_anything_but_ids():
    entity = Entity.objects.create(title="a")
    shard = entity.shard
    from schemaless_store.exceptions import BulkWriteNotSupported

    with pytest.raises(BulkWriteNotSupported, match="named by id only"):
        Entity.objects.using(shard).update(title="x")
    with pytest.raises(BulkWriteNotSupported, match="named by id only"):
        Entity.objects.using(shard).filter(added_id=entity.added_id).update(title="x")
    with pytest.raises(BulkWriteNotSupported, match="named by id only"):
        Entity.objects.filter(id=entity.id).exclude(added_id=0).update(title="x")
    with pytest.raises(ValueError, match="'id'"):
        Entity.objects.filter(id=entity.id).update(id=uuid.uuid4())
    # A kind's filtered set updates through its own queryset (issue 44, docs/kinds.md).
    note = Note.objects.create(title="one")
    assert Note.objects.filter(id=note.id).update(title="two") == 1
    assert Note.objects.get(id=note.id).title == "two"
    assert Entity.objects.get(id=entity.id)["title"] == "a"
    # Reading by id on a shard still works.
    assert list(Entity.objects.using(shard).filter(id=entity.id)) == [entity]
