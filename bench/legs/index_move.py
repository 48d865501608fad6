"""Leg ``index_move``: a writer whose updates change an indexed value (entities moving between
users), before and during the addition of a new index (issue 45, item 0).

The other live-writer legs insert new entities, whose index rows are only added. Here every
write moves an entity to another user: the store writes the new rows of ``index_user_id`` and
``index_user_published`` and deletes the old ones by their key, so a delete that scans its index
table (the one-row ``IN`` of issue 45) gets slower as the index grows, and more so while a
backfill writes into the same servers. The writer's latency is recorded before and during:

- ``ours_backfill``: ``Entity.objects.filter(id=...).update(user_id=...)`` on the store while
  ``runcleaner`` backfills a new index on ``link`` (as the ``index_add`` leg does);
- ``alter_inplace_lock_none`` and ``alter_default``: ``UPDATE json_entities SET body =
  JSON_SET(body, '$.user_id', ...)`` on the JSON column's table while ``ALTER TABLE ... ADD
  INDEX`` runs on it (its ``(user_id, published)`` index moves the row too).

Both writers move :data:`MOVERS` entities of their own, made for the leg with the write legs'
users (``WRITER_USERS_0`` ...), the same rows on both sides; every move goes to the next user,
so each write changes the value. They are removed afterwards with the other legs' writes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from .. import peer, raw
from ..context import Bench
from ..data import WRITER_USERS, WRITER_USERS_0, writer_properties
from . import index_add

MOVERS = 2_000  # entities the writer moves between users, each in turn
JSON_MOVE = (
    f"UPDATE {peer.TABLE} SET body = JSON_SET(body, '$.user_id', %s), updated = UTC_TIMESTAMP(6) "
    "WHERE id = %s"
)


def new_user(n: int, count: int) -> int:
    """The user write ``n`` moves its entity (number ``n % count``) to: its first user plus one
    per visit, so that each write changes the value."""
    entity, visit = n % count, n // count + 1
    return WRITER_USERS_0 + (entity + visit) % WRITER_USERS


def make_movers(bench: Bench, count: int) -> list[bytes]:
    """``count`` entities of the writer's users, in the store and in the JSON column's table
    (same ids, same bodies); their ids."""
    from schemaless_store.models import Entity

    bags = [{**writer_properties(n, "mover"), "id": uuid.uuid4()} for n in range(count)]
    Entity.objects.bulk_put(bags)
    cursor = bench.peer.conn.cursor()
    cursor.executemany(
        f"INSERT INTO {peer.TABLE} (id, updated, body) VALUES (%s, UTC_TIMESTAMP(6), %s)",
        [
            (bag["id"].bytes, json.dumps({k: v for k, v in bag.items() if k != "id"}))
            for bag in bags
        ],
    )
    bench.peer.conn.commit()
    return [bag["id"].bytes for bag in bags]


def store_mover(ids: list[bytes]) -> Callable[[], Callable[[int], None]]:
    """Partial updates of ``user_id`` through the store (its index rows follow)."""

    def make() -> Callable[[int], None]:
        from schemaless_store.models import Entity

        keys = [uuid.UUID(bytes=key) for key in ids]

        def op(n: int) -> None:
            changed = Entity.objects.filter(id=keys[n % len(keys)]).update(
                user_id=new_user(n, len(keys))
            )
            if changed != 1:
                raise AssertionError(f"moved {changed} entities, not 1")

        return op

    return make


def json_mover(ids: list[bytes]) -> Callable[[], Callable[[int], None]]:
    """``JSON_SET`` of ``user_id`` on the JSON column's table, on the thread's connection."""
    from django.conf import settings

    def make() -> Callable[[int], None]:
        cursor = raw.connect(settings.DATABASES["peer"]).cursor()

        def op(n: int) -> None:
            changed = cursor.execute(JSON_MOVE, (new_user(n, len(ids)), ids[n % len(ids)]))
            if changed != 1:
                raise AssertionError(f"moved {changed} rows, not 1")

        return op

    return make


def run(bench: Bench) -> list[dict[str, Any]]:
    count = min(MOVERS, max(100, bench.size // 10))
    bench.log(f"index move: {count:,} entities move between users while an index is added")
    records = []
    for name in ("alter_inplace_lock_none", "alter_default"):
        # Each run removes the writes after it (forget_writes): the movers are made again.
        ids = make_movers(bench, count)
        records += index_add.run_alters(
            bench, writer=json_mover(ids), alters=(name,), leg="index_move"
        )
    if index_add.cleaner_available():
        ids = make_movers(bench, count)
        records.append(
            index_add.run_ours(
                bench, writer=store_mover(ids), leg="index_move", table="index_link_moving"
            )
        )
    for record in records:
        record["movers"] = count
    return records
