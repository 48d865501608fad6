"""``importentities --from-model``: the rows of an ordinary model on ``default`` (a JSONField
and columns) become entities, with ids from a UUID field or a stable uuid5 of the primary key;
chunked, rerunnable, bad rows reported by primary key."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pytest
from django.contrib.auth.models import User

from schemaless_store.backup.frommodel import row_id
from schemaless_store.models import Entity
from tests.support import STORE
from tests.support.backups import command
from tests.support.factories import LegacyPostFactory
from tests.support.invariants import assert_exact
from tests.testapp.models import LegacyPost

pytestmark = STORE


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default reject file is written in the working directory


WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)


def test_json_keys_and_columns_become_properties_and_the_uuid_field_the_id():
    author = User.objects.create(username="bret")
    posts = LegacyPostFactory.create_batch(25, published=WHEN)
    LegacyPost.objects.filter(pk=posts[0].pk).update(author=author)
    run = command(
        "importentities",
        from_model="testapp.LegacyPost",
        id_field="uuid",
        json_field="data",
        fields=["title", "score", "published", "author"],
        batch_size=10,
    )
    assert run.error is None, run
    assert "imported 25 entities (25 new, 0 already stored) from 25 rows" in run.stdout
    for post in LegacyPost.objects.all():
        entity = Entity.objects.get(id=post.uuid)
        assert entity.body_properties() == {
            **post.data,
            "title": post.title,
            "score": post.score,
            "published": WHEN,
            "author": author.pk if post.pk == posts[0].pk else None,
        }
    found = Entity.objects.filter_index(link=posts[3].data["link"])
    assert [e.id for e in found] == [posts[3].uuid]
    assert_exact()


def test_without_an_id_field_the_id_is_a_stable_uuid5_of_the_primary_key():
    (post,) = LegacyPostFactory.create_batch(1)
    command("importentities", from_model="testapp.LegacyPost", json_field="data")
    expected = uuid.uuid5(uuid.NAMESPACE_URL, f"schemaless-store:testapp.legacypost:{post.pk}")
    assert row_id(LegacyPost, post.pk) == expected
    assert Entity.objects.get(id=expected).body_properties() == post.data


def test_rerunning_writes_nothing_twice_and_picks_up_changes():
    posts = LegacyPostFactory.create_batch(12)
    args = {"from_model": "testapp.LegacyPost", "id_field": "uuid", "json_field": "data"}
    command("importentities", **args)
    LegacyPost.objects.filter(pk=posts[4].pk).update(data={"link": "changed"})
    LegacyPost.objects.create(data={"link": "new"})
    run = command("importentities", **args, batch_size=5)
    assert "imported 13 entities (1 new, 1 changed, 11 already stored)" in run.stdout
    assert Entity.objects.get(id=posts[4].uuid).body_properties() == {"link": "changed"}
    assert Entity.objects.all().count() == 13


def test_bad_rows_are_reported_by_primary_key(tmp_path):
    good, not_object, priced, clash = LegacyPostFactory.create_batch(4)
    LegacyPost.objects.filter(pk=not_object.pk).update(data=[1, 2])
    LegacyPost.objects.filter(pk=priced.pk).update(price=decimal.Decimal("1.50"))
    LegacyPost.objects.filter(pk=clash.pk).update(data={"title": "in the JSON too"})
    rejects = tmp_path / "rejects.jsonl"
    run = command(
        "importentities",
        from_model="testapp.LegacyPost",
        id_field="uuid",
        json_field="data",
        fields=["title", "price"],
        rejects=str(rejects),
    )
    assert run.error and "3 items were rejected" in run.error
    assert {e.id for e in Entity.objects.all()} == {good.uuid}
    found = {r["pk"]: r["reason"] for r in map(json.loads, rejects.read_text().splitlines())}
    assert "holds a list, not an object" in found[not_object.pk]
    assert "column 'price' holds a Decimal" in found[priced.pk]
    assert "has a key 'title', a column named too" in found[clash.pk]
    assert f"pk {priced.pk}: TypeError" in run.stderr


def test_strict_stops_at_the_first_bad_row():
    posts = LegacyPostFactory.create_batch(5)
    LegacyPost.objects.filter(pk=posts[3].pk).update(data="text")
    run = command(
        "importentities",
        from_model="testapp.LegacyPost",
        json_field="data",
        strict=True,
        batch_size=2,
    )
    assert run.error and f"--strict: pk {posts[3].pk}" in run.error
    assert Entity.objects.all().count() == 2  # the first batch; not the second (posts 2, 3)


def test_misnamed_options_are_refused():
    for options, message in [
        ({"from_model": "testapp.Nothing", "json_field": "data"}, "--from-model testapp.Nothing"),
        ({"from_model": "testapp.LegacyPost"}, "name the row's properties"),
        ({"from_model": "testapp.LegacyPost", "json_field": "title"}, "is not a JSONField"),
        ({"from_model": "testapp.LegacyPost", "fields": ["nope"]}, "has no field 'nope'"),
        ({"from_model": "testapp.LegacyPost", "json_field": "data", "id_field": "x"}, "no field"),
    ]:
        run = command("importentities", **options)
        assert run.error and message in run.error, (options, run.error)
