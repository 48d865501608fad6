from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest
from django.test import override_settings

from schemaless_store.exceptions import (
    BodyTooLarge,
    BulkWriteNotSupported,
    EntityExists,
    IndexValueError,
    IndexValueTooLong,
    InvalidEntityError,
    InvalidEntityId,
    InvalidQuery,
    SchemalessError,
    UnsupportedValue,
)
from schemaless_store.models import Entity
from tests.support import STORE
from tests.support.factories import NumberedFactory, PostFactory
from tests.support.raw import count_everything, entity_rows, index_rows
from tests.support.values import EVERY_TYPE, same

pytestmark = STORE


def test_create_and_get_round_trips_every_supported_type():
    entity = Entity.objects.create(**EVERY_TYPE)
    fetched = Entity.objects.get(id=entity.id)
    body = fetched.properties
    assert body.pop("id") == entity.id
    assert same(body, EVERY_TYPE)


def test_entity_api():
    post = PostFactory()
    e = Entity.objects.create(**post)
    assert isinstance(e.id, uuid.UUID)
    assert e["title"] == post["title"]
    assert e.get("missing", "dflt") == "dflt"
    assert "title" in e and "id" in e and "missing" not in e
    props = e.properties
    props["title"] = "changed"
    assert e["title"] == post["title"], "properties is a copy"
    e["title"] = "new title"
    e.save()
    assert Entity.objects.get(id=e.id)["title"] == "new title"
    del e["title"]
    e.save()
    assert "title" not in Entity.objects.get(id=e.id)
    e.delete()
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=e.id)


def test_instantiate_then_save():
    e = Entity(user_id=b"u" * 16, title="x")
    e.save()
    assert Entity.objects.get(id=e.id)["title"] == "x"


def test_updated_is_a_property_not_the_row_timestamp():
    e = Entity.objects.create(updated=1235697046, title="t")
    fetched = Entity.objects.get(id=e.id)
    assert fetched["updated"] == 1235697046
    assert isinstance(fetched.row_updated, dt.datetime)
    assert fetched.row_updated.year >= 2026


@pytest.mark.parametrize("zone", [None, "Europe/Paris"])
def test_the_read_paths_give_the_row_time_django_reads(zone):
    """get, get_many and a page convert ``updated`` themselves (tables/values.py): to the very
    value Django's own queryset reads, in the connection's time zone (UTC, or the shard's
    ``TIME_ZONE``)."""
    from django.db import connections

    made = Entity.objects.create(user_id=b"t" * 16, title="when")
    conn = connections[made.shard]
    conn.settings_dict["TIME_ZONE"] = zone
    conn.__dict__.pop("timezone", None)  # a cached_property
    try:
        django_read = Entity.objects.using(made.shard).get(row_id=made.row_id).row_updated
        found = [
            Entity.objects.get(id=made.id).row_updated,
            Entity.objects.get_many([made.id])[made.id].row_updated,
            next(iter(Entity.objects.filter_index(user_id=b"t" * 16)[:1])).row_updated,
        ]
        expected_zone = conn.timezone
    finally:
        conn.settings_dict["TIME_ZONE"] = None
        conn.__dict__.pop("timezone", None)
    assert django_read.tzinfo is not None
    for value in found:
        assert value == django_read
        assert value.utcoffset() == django_read.utcoffset()
        assert value.tzinfo == expected_zone


@pytest.mark.parametrize("form", ["uuid", "bytes", "hex"])
def test_ids_in_every_accepted_form(form):
    ident = uuid.uuid4()
    given = {"uuid": ident, "bytes": ident.bytes, "hex": ident.hex}[form]
    e = Entity.objects.create(id=given, title="x")
    assert e.id == ident
    assert Entity.objects.get(id=given).id == ident
    assert Entity.objects.get(id=str(ident)).id == ident


def test_get_many_returns_what_exists_by_id():
    made = [PostFactory.create() for _ in range(7)]
    missing = uuid.uuid4()
    found = Entity.objects.get_many([e.id for e in made] + [missing])
    assert set(found) == {e.id for e in made}
    assert all(found[e.id]["title"] == e["title"] for e in made)


def test_get_requires_id_only():
    with pytest.raises(InvalidQuery):
        Entity.objects.get(title="x")


def test_create_with_an_existing_id_raises_and_keeps_the_original():
    e = Entity.objects.create(title="first", user_id=b"a" * 16)
    before = count_everything()
    with pytest.raises(EntityExists):
        Entity.objects.create(id=e.id, title="second", user_id=b"b" * 16)
    assert Entity.objects.get(id=e.id)["title"] == "first"
    assert count_everything() == before


def test_save_with_a_known_id_replaces():
    e = Entity.objects.create(title="first")
    Entity(id=e.id, title="second").save()
    assert Entity.objects.get(id=e.id).properties == {"id": e.id, "title": "second"}


def test_bulk_put_inserts_and_replaces():
    posts = PostFactory.build_batch(25)
    made = Entity.objects.bulk_put(posts, batch_size=7)
    assert len(made) == 25
    ids = [e.id for e in made]
    again = [{"id": i, "title": "replaced"} for i in ids[:5]]
    Entity.objects.bulk_put(again)
    found = Entity.objects.get_many(ids)
    assert len(found) == 25
    assert all(found[i]["title"] == "replaced" for i in ids[:5])
    assert found[ids[6]]["title"] == posts[6]["title"]


def test_all_scatters_over_shards():
    made = {Entity.objects.create(n=n).id for n in range(30)}
    assert {e.id for e in Entity.objects.all()} == made
    assert Entity.objects.all().count() == 30


# --- bad input: a clear error and nothing written ---------------------------------------


def assert_nothing_written(call, error):
    before = count_everything()
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, SchemalessError)
    assert count_everything() == before
    return info.value


def test_not_a_dict():
    assert_nothing_written(lambda: Entity.objects.bulk_put([["a", 1]]), InvalidEntityError)
    assert_nothing_written(lambda: Entity.objects.bulk_put(["text"]), InvalidEntityError)
    assert_nothing_written(lambda: Entity.objects.bulk_put([{1: "x"}]), InvalidEntityError)
    assert_nothing_written(lambda: Entity.objects.bulk_put([{"a": 1}, None]), InvalidEntityError)


@pytest.mark.parametrize("bad", [b"short", "xyz", 12345, b"x" * 17])
def test_bad_ids(bad):
    assert_nothing_written(lambda: Entity.objects.create(id=bad, title="x"), InvalidEntityId)


@pytest.mark.parametrize("value", [{1, 2}, object(), (1, 2), dt.datetime(2020, 1, 1)], ids=repr)
def test_unsupported_values(value):
    assert_nothing_written(
        lambda: Entity.objects.create(user_id=b"u" * 16, title=value), UnsupportedValue
    )


def test_one_bad_entity_in_a_bulk_put_writes_nothing():
    good = PostFactory.build_batch(10)
    assert_nothing_written(lambda: Entity.objects.bulk_put([*good, {"x": {1}}]), UnsupportedValue)


def test_body_over_the_limit():
    with override_settings(SCHEMALESS={"MAX_BODY_BYTES": 1000}):
        err = assert_nothing_written(
            lambda: Entity.objects.create(blob=os.urandom(3000)), BodyTooLarge
        )
    assert "1000" in str(err)


def test_index_value_too_long_is_refused_not_truncated():
    err = assert_nothing_written(
        lambda: Entity.objects.create(user_id=b"u" * 16, link="https://x/" + "a" * 400),
        IndexValueTooLong,
    )
    assert "index_link" in str(err) and "link" in str(err)


def test_index_value_of_the_wrong_type():
    err = assert_nothing_written(
        lambda: Entity.objects.create(user_id=b"u" * 16, published="yesterday"), IndexValueError
    )
    assert "index_user_published" in str(err)
    assert_nothing_written(
        lambda: Entity.objects.create(user_id=b"u" * 16, link={"a": 1}), IndexValueError
    )
    assert_nothing_written(
        lambda: Entity.objects.create(user_id=b"u" * 16, link=float("nan")), IndexValueError
    )


def test_update_of_an_existing_entity_with_bad_value_keeps_it():
    e = Entity.objects.create(user_id=b"u" * 16, link="https://ok")
    e["link"] = "https://x/" + "a" * 400
    assert_nothing_written(e.save, IndexValueTooLong)
    assert Entity.objects.get(id=e.id)["link"] == "https://ok"


def test_id_cannot_change():
    e = Entity.objects.create(title="x")
    with pytest.raises(InvalidEntityError):
        e["id"] = uuid.uuid4()


def test_queryset_bulk_apis_refuse():
    Entity.objects.create(title="x")
    qs = Entity.objects.using("shard_0")
    with pytest.raises(BulkWriteNotSupported, match="bulk_put"):
        qs.update(row_body=b"")
    with pytest.raises(BulkWriteNotSupported, match="bulk_put"):
        Entity.objects.bulk_create([Entity(title="y")])


def test_queryset_delete_removes_index_rows():
    from tests.support.raw import index_rows

    for _ in range(5):
        PostFactory.create()
    for alias in ("shard_0", "shard_1"):
        Entity.objects.using(alias).all().delete()
    assert not entity_rows("shard_0") and not entity_rows("shard_1")
    assert index_rows("index_user_id") == []


def test_unrouted_orm_query_is_a_clear_error():
    with pytest.raises(InvalidQuery, match="shard"):
        list(Entity.objects.filter(added_id=1))


# --- the fast paths for new entities ----------------------------------------------------------


@pytest.mark.mariadb_only
def test_a_new_entity_is_inserted_without_django_save_when_only_the_store_listens(monkeypatch):
    from django.db import models

    def refuse(*args, **kwargs):
        raise AssertionError("save_base was called")

    monkeypatch.setattr(models.Model, "save_base", refuse)
    entity = Entity.objects.create(user_id="u-direct", link="https://direct", published=5)
    assert entity.added_id and entity.row_updated.tzinfo is not None
    assert entity.shard == entity._state.db
    assert Entity.objects.get(id=entity.id).body_properties() == entity.body_properties()
    assert [e.id for e in Entity.objects.filter_index(link="https://direct")] == [entity.id]
    assert [e.id for e in Entity.objects.filter_index(user_id="u-direct")] == [entity.id]
    entity["link"] = "https://later"  # then a normal save (through save_base) is needed
    monkeypatch.undo()
    entity.save()
    assert [e.id for e in Entity.objects.filter_index(link="https://later")] == [entity.id]
    assert not list(Entity.objects.filter_index(link="https://direct"))


def test_a_new_entity_still_sends_save_signals_to_other_listeners():
    from django.db.models.signals import post_save, pre_save

    heard = []

    def before(sender, instance, **kwargs):
        heard.append(("pre", instance.id))

    def after(sender, instance, created, **kwargs):
        heard.append(("post", instance.id, created))

    Entity.objects.create(link="https://unheard")  # the store remembers: only its receivers
    pre_save.connect(before, sender=Entity)
    post_save.connect(after, sender=Entity)
    try:
        entity = Entity.objects.create(link="https://heard")
    finally:
        pre_save.disconnect(before, sender=Entity)
        post_save.disconnect(after, sender=Entity)
    assert heard == [("pre", entity.id), ("post", entity.id, True)]
    assert [e.id for e in Entity.objects.filter_index(link="https://heard")] == [entity.id]
    Entity.objects.create(link="https://unheard-again")  # disconnected: no one hears it
    assert len(heard) == 2


def test_init_signals_still_hear_every_entity_built():
    from django.db.models.signals import post_init, pre_init

    heard = []

    def before(sender, args, kwargs, **rest):
        heard.append("pre")

    def after(sender, instance, **rest):
        heard.append(("post", type(instance).__name__))

    created = Entity.objects.create(link="https://built")  # no listeners: built without them
    pre_init.connect(before, sender=Entity)
    post_init.connect(after, sender=Entity)
    try:
        Entity.objects.create(link="https://built-heard")
        assert heard == ["pre", ("post", "Entity")]
        Entity.objects.get(id=created.id)
        Entity.objects.get_many([created.id])
        assert heard == ["pre", ("post", "Entity")] * 3
    finally:
        pre_init.disconnect(before, sender=Entity)
        post_init.disconnect(after, sender=Entity)


def test_a_new_entity_has_the_field_values_model_init_gives_it():
    from django.db import models

    fast = Entity(link="https://fast")
    slow = Entity.__new__(Entity)
    models.Model.__init__(slow)
    fields = [f.attname for f in Entity._meta.concrete_fields if f.attname != "row_id"]
    assert {f: getattr(fast, f) for f in fields} == {f: getattr(slow, f) for f in fields}
    assert (
        (fast._state.adding, fast._state.db)
        == (slow._state.adding, slow._state.db)
        == (
            True,
            None,
        )
    )


def test_bulk_put_of_generated_ids_twice_updates_instead_of_inserting():
    entities = Entity.objects.bulk_put([{"link": "https://one"}, {"link": "https://two"}])
    for entity in entities:
        entity["link"] += "/changed"
    Entity.objects.bulk_put(entities)
    # Still two entities (updated, not inserted again), each with its one index_link row.
    assert count_everything() == 4
    assert sorted(entity_id for _value, entity_id, _alias in index_rows("index_link")) == sorted(
        e.id.bytes for e in entities
    )
    found = sorted(e["link"] for e in Entity.objects.get_many([e.id for e in entities]).values())
    assert found == ["https://one/changed", "https://two/changed"]
    assert not list(Entity.objects.filter_index(link="https://one"))


def test_get_many_of_many_ids_over_both_shards(monkeypatch):
    from schemaless_store.query import fetch

    entities = NumberedFactory.create_batch(150)
    assert len({e.shard for e in entities}) == 2
    read_on = set()
    fetch_shard = fetch.fetch_shard

    def watched(model, alias, source, ids, used=None):
        import threading

        read_on.add(threading.current_thread().name.startswith("schemaless-scatter"))
        return fetch_shard(model, alias, source, ids, used)

    monkeypatch.setattr(fetch, "fetch_shard", watched)
    wanted = [e.id for e in entities] + [uuid.uuid4()]  # one that does not exist
    found = Entity.objects.get_many(wanted)
    assert list(found) == [e.id for e in entities]  # in the order asked, missing ones left out
    assert [found[e.id]["n"] for e in entities] == list(range(150))
    # On MySQL shards the two IN queries run at once: one in this thread, one on a scatter
    # thread.
    assert read_on == ({True, False} if _mysql() else {False})


def test_get_many_inside_a_transaction_sees_its_own_writes():
    from django.db import transaction

    entities = NumberedFactory.create_batch(100)
    shard = entities[0].shard
    with transaction.atomic(using=shard):
        entities[0]["n"] = "changed"
        entities[0].save()
        found = Entity.objects.get_many([e.id for e in entities])
        assert found[entities[0].id]["n"] == "changed"


def _mysql() -> bool:
    from django.db import connections

    return connections["default"].vendor == "mysql"


def test_bulk_put_over_stored_entities_gives_them_their_pk():
    first = Entity.objects.create(n=1)
    written, new = Entity.objects.bulk_put([{"id": first.id, "n": 2}, {"n": 3}])
    assert written.pk == first.pk and first.pk is not None
    assert new.pk is None  # a new row's key is not read back (docs/usage.md)
    assert Entity.objects.get(id=first.id)["n"] == 2
