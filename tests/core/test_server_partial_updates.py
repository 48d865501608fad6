"""Issue 45, item 2: a partial update of properties no index covers, applied by the server on a
JSON body (``JSON_SET``), with the receipt and the ``COMMIT`` in one round trip and no read
(docs/design.md#partial-updates-on-the-server); ``F()`` integer increments added on the
server; a body that is not JSON, or a check the statement makes, sends the write the
read-under-lock route."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from schemaless_store.cache import entity_cache
from schemaless_store.exceptions import BodyTooLarge
from schemaless_store.models import Entity
from schemaless_store.values.codec import body_format
from schemaless_store.values.jsonbody import SAFE_INT
from schemaless_store.writes import server_updates
from tests.core.test_partial_writes import _round_trips
from tests.kindsapp.models import Note
from tests.support import STORE
from tests.support.raw import index_rows
from tests.support.values import EVERY_TYPE, deep_same, line_values

# The receipt pruning would add a round trip to a write now and then (tests/conftest.py).
pytestmark = [STORE, pytest.mark.usefixtures("no_receipt_pruning")]

JSON_CODEC = "schemaless_store.values.codec.JsonCodec"
MSGPACK_CODEC = "schemaless_store.values.codec.MsgpackCodec"


def _settings(**extra: Any) -> Any:
    return override_settings(SCHEMALESS={**settings.SCHEMALESS, "CODEC": JSON_CODEC, **extra})


@pytest.fixture
def json_bodies() -> Iterator[None]:
    with _settings():
        yield


@contextmanager
def _old_route() -> Iterator[None]:
    """The read-under-lock route only (what every partial update took before)."""
    original = server_updates.applies_here
    server_updates.applies_here = lambda key: False  # type: ignore[assignment]
    try:
        yield
    finally:
        server_updates.applies_here = original  # type: ignore[assignment]


def _once(write: Any) -> list[str]:
    with _round_trips() as sent:
        write()
    return sent


def _mine(sent: list[str]) -> list[str]:
    """The round trips of the writes (a settings change makes the next write read the map)."""
    return [s for s in sent if "entities" in s or "schemaless_receipts" in s]


def _stored(key: uuid.UUID) -> dict[str, Any]:
    return dict(Entity.objects.get(id=key).properties)


# --- one round trip ---------------------------------------------------------------------------


@pytest.mark.mariadb_only
@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_an_unindexed_partial_update_is_one_round_trip(history: bool):
    with _settings(HISTORY=history):
        entity = Entity.objects.create(title="a", link=f"https://{uuid.uuid4()}", views=0)
        for n in range(3):  # connections and the map, opened first
            Entity.objects.filter(id=entity.id).update(views=n)

        def save_some() -> None:
            entity["title"] = "b"
            entity["views"] = 100
            entity.save(update_fields=["title", "views"])

        counts = {
            "save(update_fields)": _once(save_some),
            "filter(id).update": _once(
                lambda: Entity.objects.filter(id=entity.id).update(views=7, note="n")
            ),
            "F() + 1": _once(
                lambda: Entity.objects.filter(id=entity.id).update(views=F("views") + 1)
            ),
        }
        print("round trips:", {label: len(sent) for label, sent in counts.items()})
        for label, sent in counts.items():
            assert len(sent) == 1, (label, sent)
            (query,) = sent
            assert query.startswith("BEGIN;INSERT INTO schemaless_receipts"), (label, query)
            assert "SELECT ... FOR UPDATE" not in query and "FOR UPDATE" not in query
        stored = _stored(entity.id)
        assert stored["views"] == 8 and stored["note"] == "n" and stored["title"] == "b"
        # The instance knows the body the server built, as a later if_unchanged compares it.
        entity["title"] = "c"
        entity.save(update_fields=["title"])
        entity["views"] = 11
        entity.save(if_unchanged=True)
        assert _stored(entity.id)["views"] == 11
        if history:
            versions = entity.history()
            assert len(versions) == 1 + 3 + 3 + 2  # create, warm-up, the 3 above, 2 saves
            latest = dict(versions[-1].properties)
            assert latest == _stored(entity.id)
            assert dict(versions[-2].properties)["title"] == "c"


@pytest.mark.mariadb_only
def test_an_indexed_or_conditional_partial_update_keeps_the_read_under_lock(json_bodies):
    entity = Entity.objects.create(title="a", link="https://a", views=0)
    entity["link"] = "https://b"
    with _round_trips() as sent:
        entity.save(update_fields=["link"])
    assert any("FOR UPDATE" in s for s in sent), sent
    assert [e.id for e in Entity.objects.filter_index(link="https://b")] == [entity.id]
    assert not list(Entity.objects.filter_index(link="https://a"))
    entity["views"] = 5
    with _round_trips() as sent:
        entity.save(update_fields=["views"], if_unchanged=True)
    assert any("FOR UPDATE" in s for s in sent), sent
    assert _stored(entity.id)["views"] == 5


@pytest.mark.mariadb_only
def test_a_kinds_indexed_field_keeps_its_index_and_an_unindexed_one_is_the_servers(json_bodies):
    note = Note.objects.create(title="one", stars=3)
    Entity.objects.filter(id=note.id).update(views=1)  # connections and the map, opened first
    note.title = "two"  # index_note_title reads it, for notes only
    note.save(update_fields=["title"])
    assert [n.id for n in Note.objects.filter_index(title="two")] == [note.id]
    assert not list(Note.objects.filter_index(title="one"))
    assert len(index_rows("index_note_title")) == 1
    note.score = 2.5  # no index reads it
    with _round_trips() as sent:
        note.save(update_fields=["score"])
    assert len(sent) == 1, sent
    stored = Note.objects.get(id=note.id)
    assert (stored.title, stored.score, stored.stars) == ("two", 2.5, 3)
    # A plain entity's "title" is no kind's: the server sets it.
    entity = Entity.objects.create(title="a")
    with _round_trips() as sent:
        Entity.objects.filter(id=entity.id).update(title="b")
    assert len(sent) == 1 and _stored(entity.id)["title"] == "b"


# --- the same result as the read-under-lock route ---------------------------------------------

names = st.sampled_from(["a", "b", "views", "title", "n", "x_1"])
values = line_values | st.sampled_from(list(EVERY_TYPE.values()))
updates = st.dictionaries(names, values | st.just(server_updates.ABSENT), min_size=1, max_size=4)


@pytest.mark.mariadb_only
@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(start=st.dictionaries(names, values, max_size=5), change=updates)
def test_the_server_writes_what_the_read_under_lock_route_writes(json_bodies, start, change):
    ours = Entity.objects.create(**start)
    theirs = Entity.objects.create(**start)
    for entity in (ours, theirs):
        for name, value in change.items():
            if value is server_updates.ABSENT:
                entity.pop(name, None)
            else:
                entity[name] = value
    with _round_trips() as sent:
        ours.save(update_fields=list(change))
    assert len(sent) == 1, sent  # the server applied it
    with _old_route():
        theirs.save(update_fields=list(change))
    mine, other = _stored(ours.id), _stored(theirs.id)
    mine.pop("id"), other.pop("id")
    assert deep_same(mine, other), (mine, other)
    assert list(mine) == list(other)  # the same order of properties, too
    raw = {
        e.id: bytes(Entity.objects.get(id=e.id).row_body) for e in (ours, theirs)
    }  # byte for byte: JSON_COMPACT writes what the codec writes
    assert raw[ours.id] == raw[theirs.id], raw


# --- a body that is not JSON, conditions the statement checks ----------------------------------


@pytest.mark.mariadb_only
@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_a_messagepack_body_takes_the_read_under_lock_route(history: bool):
    msgpack = {**settings.SCHEMALESS, "CODEC": MSGPACK_CODEC, "HISTORY": history}
    with override_settings(SCHEMALESS=msgpack):
        entity = Entity.objects.create(title="old", views=1, link="https://m")
    assert body_format(bytes(entity.row_body)).startswith("msgpack")
    with _settings(HISTORY=history), _round_trips() as sent:
        entity["title"] = "new"
        entity.save(update_fields=["title"])
        Entity.objects.filter(id=entity.id).update(views=F("views") + 1)
    # The server's UPDATE matched nothing (its answer says so) and nothing of it committed
    # but its receipt; then the lock, the read and the write as before.
    mine = _mine(sent)
    assert mine[0].startswith("BEGIN;INSERT INTO schemaless_receipts"), mine
    assert "UPDATE entities SET updated" in mine[0], mine
    assert any("FOR UPDATE" in s for s in mine[1:]), mine
    stored = Entity.objects.get(id=entity.id)
    assert stored["title"] == "new" and stored["views"] == 2 and stored["link"] == "https://m"
    assert body_format(bytes(stored.row_body)) == "json"  # written in the codec's format now
    with _settings(HISTORY=history):
        with _round_trips() as sent:
            Entity.objects.filter(id=entity.id).update(views=F("views") + 1)
        assert len(_mine(sent)) == 1 and _stored(entity.id)["views"] == 3
        if history:  # the create, then one version per write: none of a statement that
            # changed nothing
            versions = entity.history()
            assert [dict(v.properties)["views"] for v in versions] == [1, 1, 2, 3]


@pytest.mark.mariadb_only
def test_a_missing_entity_or_an_oversize_body_changes_nothing(json_bodies):
    assert Entity.objects.filter(id=uuid.uuid4()).update(title="x") == 0
    with _settings(MAX_BODY_BYTES=300):
        entity = Entity.objects.create(title="a", pad="x" * 200)
        entity["pad"] = "y" * 280
        with pytest.raises(BodyTooLarge):
            entity.save(update_fields=["pad"])
        with pytest.raises(BodyTooLarge):
            Entity.objects.filter(id=entity.id).update(more="z" * 120)
    assert _stored(entity.id)["pad"] == "x" * 200 and "more" not in _stored(entity.id)


# --- a caller's transaction ----------------------------------------------------------------------


@pytest.mark.mariadb_only
def test_inside_a_callers_transaction_the_update_rolls_back_with_it(json_bodies):
    entity = Entity.objects.create(views=0)
    with pytest.raises(RuntimeError), transaction.atomic(using=entity.shard):
        Entity.objects.filter(id=entity.id).update(views=F("views") + 5)
        assert _stored(entity.id)["views"] == 5  # its own transaction sees it
        raise RuntimeError("roll back")
    assert _stored(entity.id)["views"] == 0
    with transaction.atomic(using=entity.shard):
        Entity.objects.filter(id=entity.id).update(views=F("views") + 5)
    assert _stored(entity.id)["views"] == 5


# --- the entity cache ----------------------------------------------------------------------------


def test_the_update_invalidates_the_entity_cache():
    locmem = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "partial"}
    with (
        override_settings(CACHES={**settings.CACHES, "partial": locmem}),
        _settings(CACHE="partial"),
    ):
        entity_cache.resume()
        entity = Entity.objects.create(title="a", views=0)
        assert Entity.objects.get(id=entity.id)["views"] == 0  # read, and cached
        assert Entity.objects.get(id=entity.id)["views"] == 0
        Entity.objects.filter(id=entity.id).update(views=F("views") + 1)
        assert Entity.objects.get(id=entity.id)["views"] == 1
        entity["title"] = "b"
        entity.save(update_fields=["title"])
        assert Entity.objects.get(id=entity.id)["title"] == "b"


# --- which updates the server applies ------------------------------------------------------------


def test_which_updates_the_server_can_apply(json_bodies):
    how = server_updates.plan({"title": "t", "views": F("views") + 1})
    assert how is not None
    # Kinds' indexes read "title": the statement leaves an entity of those kinds alone.
    assert set(how.changes.not_kinds) == {"note", "book", "novel"}
    assert server_updates.plan({"views": 1}).changes.not_kinds == []
    assert server_updates.plan({"title": server_updates.ABSENT}) is not None
    assert server_updates.plan({"link": "https://a"}) is None  # index_link reads it
    assert server_updates.plan({"user_id": b"1" * 16, "title": "t"}) is None  # a composite's
    assert server_updates.plan({"kind": "Note"}) is None  # a kind's index reads the kind
    assert server_updates.plan({"a.b": 1}) is None  # not a plain name: no path to spell
    assert server_updates.plan({'x"y': 1}) is None
    assert server_updates.plan({"title": object()}) is None  # the other route raises
    assert server_updates.plan({"views": F("other") + 1}) is None  # resolved under the lock
    assert server_updates.plan({"views": F("views") * 2}) is None
    assert server_updates.plan({"views": F("views") + 1.5}) is None
    with _settings(MAX_BODY_BYTES=50):
        assert server_updates.plan({"title": "x" * 60}) is None  # could never fit
    with override_settings(SCHEMALESS={**settings.SCHEMALESS, "CODEC": MSGPACK_CODEC}):
        assert server_updates.plan({"title": "t"}) is None


@pytest.mark.parametrize(
    ("expression", "delta"),
    [
        (F("n") + 1, 1),
        (5 + F("n"), 5),
        (F("n") - 3, -3),
        (F("n"), 0),
        (F("n") + SAFE_INT, SAFE_INT),
        (F("n") + (SAFE_INT + 1), None),
        (F("n") + True, None),
        (F("m") + 1, None),
        (3 - F("n"), None),
        (F("n") + F("n"), None),
    ],
    ids=repr,
)
def test_an_increment_is_an_int_added_to_its_own_property(expression, delta):
    assert server_updates.increment("n", expression) == delta
