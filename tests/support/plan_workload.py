"""What the plan test runs while it captures (tests/queries/test_captured_plans.py): every kind
of statement the store sends to a shard, each reached through the public API or the command
an operator runs.

Each part is a function of its own, so that a test can run one (the test that reverts
``keys_where`` runs :func:`writes` only). The parts, in order: writes (insert, an indexed value
changed, an unindexed one, a unique value claimed and let go, delete, conditional save,
``filter(id=...).update()``, ``modify``, partial updates the server applies to JSON bodies,
``bulk_put`` of new and of existing entities, receipts
pruned on every write and one looked up), cells, reads (``get``, ``get_many``, a walk of
every entity), query pages (equality, range, ``in``, order, continuation cursors, a page
across shards, and with JSON bodies re-checked on the server), the cleaner (a new index's
backfill, then missing and stale rows repaired; the same over JSON bodies, with the rows the
server reads out of them), a bucket move with a writer running (copy, replay, verify, purge)
and back (its mover dying after the flip, then resumed: the target's pre-images read),
``mapentities``, and the health page's counts.
"""

from __future__ import annotations

import contextlib
import io
import random
import threading
import time
import uuid
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.models import F
from django.test import override_settings

from schemaless_store.cleaner import Cleaner
from schemaless_store.config.indexes import Index
from schemaless_store.exceptions import NotOwner
from schemaless_store.models import Cell, Entity
from schemaless_store.moves.mover import Mover
from schemaless_store.tables import counts
from schemaless_store.tables import receipts as receipt_table
from schemaless_store.topology import shards
from schemaless_store.writes import receipts
from tests.support import buckets, child
from tests.support.cleaner import plant_stale_link
from tests.support.factories import PostFactory
from tests.support.moving import MoverDied, source_and_target
from tests.support.raw import raw_delete

USERS = [bytes([n]) * 16 for n in range(1, 5)]
JSON_CODEC = "schemaless_store.values.codec.JsonCodec"


def writes(monkeypatch: Any) -> list[Entity]:
    """Every kind of write; returns the entities left (the later parts read them)."""
    monkeypatch.setattr(receipts, "PRUNE_EVERY", 1)  # every write prunes its shard's receipts
    made = [
        Entity.objects.create(**PostFactory(user_id=USERS[n % 3], tags=["a", f"t{n % 4}"]))
        for n in range(16)
    ]
    moved = made[0]
    moved["user_id"] = USERS[3]  # an indexed value changes: the old index rows go
    moved.save()
    moved["link"] = "https://example.com/moved"
    moved["tags"] = ["b"]
    moved.save()
    moved["title"] = "an unindexed value"
    moved.save()
    claimer = Entity.objects.create(username="claimer", **PostFactory(user_id=USERS[0]))
    claimer["username"] = "claimer-renamed"  # a unique value let go, another claimed
    claimer.save()
    made[1].delete()
    checked = Entity.objects.get(id=made[2].id)
    checked["title"] = "only if unchanged"
    checked.save(if_unchanged=True)
    Entity.objects.filter(id=made[3].id).update(title="partial")
    Entity.objects.filter(id__in=[e.id for e in made[4:8]]).update(user_id=USERS[2])
    Entity.objects.modify(made[8].id, lambda e: e.__setitem__("published", 1))
    # Partial updates the server applies (JSON bodies, history on: JSON_SET, the added_id
    # kept, the version copied by INSERT ... SELECT); the first meets a MessagePack body and
    # falls back to the read under the lock.
    json_bodies = {**settings.SCHEMALESS, "CODEC": JSON_CODEC, "HISTORY": True}
    with override_settings(SCHEMALESS=json_bodies):
        Entity.objects.filter(id=made[9].id).update(title="server", n=1)
        Entity.objects.filter(id=made[9].id).update(n=F("n") + 1, gone=None)
        server = Entity.objects.get(id=made[9].id)
        server["title"] = "saved by the server"
        del server["gone"]
        server.save(update_fields=["title", "gone"])
    batch = Entity.objects.bulk_put(
        [PostFactory(user_id=USERS[n % 3], tags=["c"]) for n in range(60)], batch_size=25
    )
    Entity.objects.bulk_put(
        [{**e.body_properties(), "id": e.id, "user_id": USERS[3]} for e in batch[:30]],
        batch_size=25,
    )
    Entity.objects.bulk_put([{**batch[30].body_properties(), "id": batch[30].id, "n": 1}])
    Entity.objects.get(id=batch[31].id).delete()
    for alias in shards.shard_aliases():
        receipts.prune(alias)
        receipt_table.find(alias, uuid.uuid4().bytes, int(time.time()), galera=False)
    monkeypatch.setattr(receipts, "PRUNE_EVERY", 10**12)
    return [e for e in made if e.id != made[1].id] + batch[:31] + [claimer]


def cells(entities: list[Entity]) -> None:
    for entity in entities[:4]:
        Cell.objects.put(entity.id, "profile", {"v": 1})
        Cell.objects.put(entity.id, "profile", {"v": 2})
        Cell.objects.get_cell(entity.id, "profile")
        Cell.objects.get_cell(entity.id, "profile", ref_key=1)
        Cell.objects.versions(entity.id, "profile")


def reads(entities: list[Entity]) -> None:
    for entity in entities[:6]:
        Entity.objects.get(id=entity.id)
    Entity.objects.get_many([entities[0].id])
    Entity.objects.get_many([e.id for e in entities])
    list(Entity.objects.all())
    entities[0].refresh_from_db()


def _walk(qs: Any, size: int) -> int:
    seen, cursor = 0, None
    while True:
        page = qs.page(after=cursor, size=size)
        seen += len(page)
        if not page.has_next:
            return seen
        cursor = page.next_cursor


def pages() -> None:
    user = USERS[0]
    list(Entity.objects.filter_index(user_id=user))
    _walk(Entity.objects.filter_index(user_id=user).order_by("-published"), 3)
    _walk(Entity.objects.filter_index(user_id=user).order_by("published"), 4)
    list(Entity.objects.filter_index(user_id=user, published__gt=1_700_000_005))
    list(Entity.objects.filter_index(user_id=user, published__lte=1_700_000_050)[:5])
    list(Entity.objects.filter_index(user_id__in=USERS[:2]))
    list(Entity.objects.filter_index(user_id__in=USERS[1:2]))
    list(Entity.objects.filter_index(tags="a"))
    _walk(Entity.objects.filter_index(tags__in=["a", "c"]), 5)
    list(Entity.objects.filter_index(link="https://example.com/moved"))
    list(Entity.objects.filter_index(username="claimer-renamed"))
    Entity.objects.filter_index(user_id=user).count()
    json_pages()
    first = Index(
        table="index_published",
        properties=["published"],
        shard_on="published",
        types={"published": "int"},
    )
    with child.declared(first):  # on a store with entities: backfilled by the cleaner
        Cleaner(indexes=[first.name], once=True, batch_size=20).run()
        _walk(Entity.objects.filter_index(published__lt=2_000_000_000).order_by("-published"), 7)
        _walk(Entity.objects.filter_index(published__gte=1).order_by("published"), 9)


def cleaner(entities: list[Entity]) -> None:
    with child.declared("index_cleaner_published") as index:
        Cleaner(indexes=[index.name], once=True, batch_size=20).run()
    raw_delete("index_link", entities[0].id.bytes)  # a missing row
    plant_stale_link(entities[1])  # a stale one
    Cleaner(indexes=["index_link", "index_tags"], once=True, batch_size=20).run()
    json_bodies()


def json_bodies() -> None:
    """The cleaner's passes over JSON bodies (issue 45 item 3): the server reads the index rows
    (streamed: the buckets are on two shards), and the ``INSERT ... SELECT`` a shard that
    serves every bucket sends, sent here for the entities of one shard."""
    from django.conf import settings
    from django.test import override_settings

    from schemaless_store.tables import json_index

    raw = {**settings.SCHEMALESS, "CODEC": "schemaless_store.values.codec.JsonCodec"}
    with override_settings(SCHEMALESS=raw), child.declared("index_cleaner_color") as color:
        for n in range(30):
            Entity.objects.create(color=["red", "blue", b"\x00"][n % 3], n=n)
        Cleaner(indexes=[color.name], once=True, batch_size=20).run()
        found = json_index.Extraction(color)
        alias = shards.shard_aliases()[0]
        batch = json_index.read_batch(color, found, alias, 0, 2**62, 500)
        ids = [row.added_id for row in batch if row.values is not None]
        json_index.insert_select(color, found, alias, ids, lambda conn, buckets: frozenset())


def move() -> None:
    """A move of buckets 0-299 while a writer creates, changes and deletes entities in them."""
    stop = threading.Event()
    errors: list[BaseException] = []
    source, target = source_and_target()

    def write() -> None:
        rng = random.Random(5)
        mine: list[uuid.UUID] = []
        try:
            while not stop.is_set():
                try:
                    if rng.random() < 0.5 or not mine:
                        made = Entity.objects.create(
                            id=buckets.id_in_bucket(rng.randrange(300)),
                            **PostFactory(user_id=rng.choice(USERS)),
                        )
                        mine.append(made.id)
                    elif rng.random() < 0.6:
                        found = Entity.objects.get(id=rng.choice(mine))
                        found["user_id"] = rng.choice(USERS)
                        found.save()
                    else:
                        gone = mine.pop(rng.randrange(len(mine)))
                        Entity.objects.get(id=gone).delete()
                except (NotOwner, Entity.DoesNotExist):
                    continue
                time.sleep(0.002)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.2)
        out = io.StringIO()
        call_command("movebuckets", "--to", target, "--buckets", "0-299", stdout=out)
        time.sleep(0.2)
    finally:
        stop.set()
        writer.join()
    assert not errors, errors
    assert "verified" in out.getvalue(), out.getvalue()
    move_back_resumed(source)


def move_back_resumed(source: str) -> None:
    """The move back, its mover dying as the verification starts (its snapshot of the flip
    goes with it), an entity written by the new owner, and the move resumed: the resumed
    verification's reads of the target's pre-images."""

    def dies(_mover: Any) -> None:
        raise MoverDied

    verify = Mover.verify
    Mover.verify = dies  # type: ignore[method-assign]
    try:
        with contextlib.suppress(MoverDied):
            call_command("movebuckets", "--to", source, "--buckets", "0-299", stdout=io.StringIO())
    finally:
        Mover.verify = verify  # type: ignore[method-assign]
    Entity.objects.create(id=buckets.id_in_bucket(7), **PostFactory(user_id=USERS[0]))
    out = io.StringIO()
    call_command("movebuckets", "--to", source, "--buckets", "0-299", stdout=out)
    assert "verified" in out.getvalue(), out.getvalue()


def mapping() -> None:
    call_command(
        "mapentities",
        "tests.support.mapfuncs.rename_link",
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )


def json_pages() -> None:
    """With JSON bodies the server re-checks (tables/rechecks.py): a pinned page of placed
    entities (the checked join), pages whose entities are fetched joined to their rows (the
    checked fetch), on one shard and across shards."""
    codec = "schemaless_store.values.codec.JsonCodec"
    with override_settings(SCHEMALESS={**settings.SCHEMALESS, "CODEC": codec}):
        owner = bytes([9]) * 16
        bags = [{"user_id": owner, "published": n, "title": "json"} for n in range(8)]
        Entity.objects.bulk_put(bags, placed_with="user_id")
        _walk(Entity.objects.filter_index(user_id=owner).order_by("-published"), 3)
        _walk(Entity.objects.filter_index(user_id=USERS[0]).order_by("-published"), 3)
        list(Entity.objects.filter_index(user_id__in=USERS[:2]))


def health() -> None:
    for alias in shards.shard_aliases():
        counts.count_tables(alias, ["entities", "index_user_id"])
        counts.exact_count(alias, "entities")


def everything(monkeypatch: Any) -> None:
    entities = writes(monkeypatch)
    cells(entities)
    reads(entities)
    pages()
    cleaner(entities)
    move()
    mapping()
    health()
