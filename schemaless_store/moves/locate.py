"""Where an entity lives: its bucket, the shard that owns it, that shard's server, and whether a
move is under way for it (``manage.py shardmap --id``, the admin's entity page; docs/resharding.md).

What it says comes from the stored map (read afresh), the owner's own bucket table (the authority
on what it serves) and the move records; a shard that cannot be reached is said so, not raised.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import connections

from ..config import conf
from ..config.metadata import BucketMove
from ..exceptions import ShardUnavailable
from ..sql import dialects
from ..tables import buckets as bucket_table
from ..topology import bucket_map
from ..values.bucket_hash import bucket_of
from .plan import from_ranges, unfinished


@dataclass(frozen=True)
class Location:
    entity_id: uuid.UUID
    bucket: int
    buckets: int  # how many there are
    shard: str  # the owner by the stored map
    server: str  # where that shard's database is (no credentials)
    state: str  # what the owner's bucket table says of the bucket ("owned", ...), or why unknown
    map_version: int
    move: str  # the move under way for the bucket, in words, or ""

    def lines(self) -> list[str]:
        moving = self.move or "no move is under way for this bucket"
        return [
            f"entity {self.entity_id}",
            f"  bucket: {self.bucket} of {self.buckets}",
            f"  shard: {self.shard} (map version {self.map_version})",
            f"  server: {self.server}",
            f"  the shard's bucket table: {self.state}",
            f"  move: {moving}",
        ]


def locate(entity_id: uuid.UUID) -> Location:
    """Where ``entity_id`` lives now (whether or not an entity with that id is stored)."""
    found = bucket_map.refresh()
    number = bucket_of(entity_id.bytes, conf.get().buckets)
    shard = found.owners[number]
    return Location(
        entity_id=entity_id,
        bucket=number,
        buckets=found.buckets,
        shard=shard,
        server=server_of(shard),
        state=_state(shard, number),
        map_version=found.version,
        move=_move_of(number, marked=number in found.moving),
    )


def server_of(alias: str) -> str:
    """``host:port/database`` of a MariaDB shard (each node of a Galera one), a SQLite file's
    path: never the user or the password."""
    settings = connections[alias].settings_dict
    name = str(settings.get("NAME") or "")
    if dialects.of(connections[alias]).file_database:
        return f"SQLite file {name}"
    nodes = (settings.get("OPTIONS") or {}).get("nodes")
    where = (
        str(nodes)
        if nodes
        else f"{settings.get('HOST') or '127.0.0.1'}:{settings.get('PORT') or 3306}"
    )
    return f"{where}/{name}"


def _state(alias: str, number: int) -> str:
    try:
        states = bucket_table.states(alias, [number])
    except ShardUnavailable as exc:
        return f"unknown: {exc}"
    state = states.get(number)
    if state is None:
        return "no row for the bucket (run migrateall)"
    return bucket_table.NAMES.get(state, f"state {state}")


def _move_of(number: int, *, marked: bool) -> str:
    move: BucketMove | None = unfinished()
    if move is not None and number in set(from_ranges(move.buckets)):
        return f"move #{move.pk} to {move.target} is {move.phase}"
    if marked:
        return "the map marks the bucket moving (no move record is unfinished)"
    return ""
