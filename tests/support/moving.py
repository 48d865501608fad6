"""What the bucket-move tests share: a store to move (``populate``), the buckets they move, and
the check that a move left every entity once, on its bucket's owner, with exact indexes."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

from schemaless_store.models import Cell, Entity
from schemaless_store.moves.mover import Mover
from schemaless_store.topology import bucket_map, shards
from tests.support import buckets
from tests.support.factories import PostFactory
from tests.support.invariants import assert_exact

MOVED = "0-299"
MOVED_SET = set(range(300))


def source_and_target() -> tuple[str, str]:
    source = bucket_map.current().owners[0]
    return source, buckets.other_alias(source)


def populate(n: int = 60) -> dict[uuid.UUID, dict]:
    """Posts (half in the moving buckets) by seven users, with tags, a unique username on every
    tenth (``user0``, ``user10``, ...), and cells on the first ten: rows in every table a move
    copies. Returns each id's properties."""
    made = {}
    for number in range(n):
        entity_id = buckets.id_in_bucket(number % 300) if number % 2 else uuid.uuid4()
        props = PostFactory(user_id=bytes([number % 7]) * 16, tags=["a", "b"])
        if number % 10 == 0:
            props["username"] = f"user{number}"
        Entity.objects.create(id=entity_id, **props)
        made[entity_id] = props
    for entity_id in list(made)[:10]:
        Cell.objects.put(entity_id, "profile", {"v": 1})
        Cell.objects.put(entity_id, "profile", {"v": 2})
    return made


def ids_per_shard() -> dict[bytes, list[str]]:
    found: dict[bytes, list[str]] = {}
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT id FROM entities")
            for (entity_id,) in cursor.fetchall():
                found.setdefault(bytes(entity_id), []).append(alias)
    return found


def assert_moved_and_exact(expected: dict[uuid.UUID, dict], target: str) -> None:
    bucket_map.forget()
    placed = ids_per_shard()
    assert {uuid.UUID(bytes=k) for k in placed} == set(expected)
    for key, aliases in placed.items():
        assert aliases == [bucket_map.alias_for(key)], (uuid.UUID(bytes=key), aliases)
        if bucket_map.bucket_for(key) in MOVED_SET:
            assert aliases == [target]
    for entity_id, props in expected.items():
        stored = Entity.objects.get(id=entity_id)
        assert {k: stored[k] for k in props} == props
    assert_exact()
    for user in {p["user_id"] for p in expected.values()}:
        want = {i for i, p in expected.items() if p["user_id"] == user}
        assert {e.id for e in Entity.objects.filter_index(user_id=user)} == want


def run(*args: str) -> str:
    """``manage.py movebuckets ARGS``; what it printed."""
    out = io.StringIO()
    call_command("movebuckets", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


class MoverDied(Exception):
    """The mover's process "died" (a test made a phase raise this)."""


def dies_at(
    monkeypatch: Any, phase: str, *args: str, before: Callable[[], Any] = lambda: None
) -> None:
    """Run ``movebuckets ARGS`` with the mover dying as its ``phase`` method (``"flip"``,
    ``"verify"``...) starts, after calling ``before``: the move is left where a killed mover
    leaves it, and the next run resumes it."""

    def die(_mover: Any) -> None:
        before()
        raise MoverDied

    with monkeypatch.context() as patched:
        patched.setattr(Mover, phase, die)
        with pytest.raises(MoverDied):
            run(*args)
