"""What the backup tests share: running the two commands, emptying the store, and what a store
answers (every entity, every declared index's queries) to compare two stores by."""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import shards
from tests.support.invariants import conditions_for


@dataclass
class Run:
    stdout: str
    stderr: str
    error: str | None  # the CommandError's message, if it raised one


def command(name: str, *args: str, **options: Any) -> Run:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err, **options)
    except CommandError as exc:
        return Run(out.getvalue(), err.getvalue(), str(exc))
    return Run(out.getvalue(), err.getvalue(), None)


def export(path: Path, *args: str) -> Run:
    run = command("exportentities", "--output", str(path), *args)
    assert run.error is None, run
    return run


def wipe(cells: bool = True) -> None:
    """Empty every shard's entities, cells and index tables (raw, bypassing the store)."""
    for alias in shards.shard_aliases():
        conn = connections[alias]
        with conn.cursor() as cursor:
            cursor.execute("DELETE FROM entities")
            if cells:
                cursor.execute("DELETE FROM cell")
                cursor.execute("DELETE FROM cell_head")
            for index in registry.valid():
                cursor.execute(f"DELETE FROM {conn.ops.quote_name(index.name)}")


def entities() -> dict[uuid.UUID, dict[str, Any]]:
    """Every entity of the store (as the settings in force route it), by id."""
    return {e.id: e.body_properties() for e in Entity.objects.all().iterator()}


def placement() -> dict[uuid.UUID, str]:
    """The shard each entity's row is on."""
    return {e.id: e._state.db for e in Entity.objects.all().iterator()}


def answers(stored: dict[uuid.UUID, dict[str, Any]]) -> dict[tuple[str, str], list[uuid.UUID]]:
    """The answer of every declared entity index to every equality query its entities imply
    (naming every property of the index, so that index serves it), in the query's order."""
    found = {}
    for index in registry.valid():
        # Cell indexes, and a kind's own indexes: only its manager's queries use one, and a
        # plain index naming the same properties serves Entity.objects first (tests/kinds
        # covers a kind's export and import).
        if index.column is not None or index.kind is not None:
            continue
        for properties in stored.values():
            for conditions in conditions_for(index, properties):
                key = (index.name, repr(sorted(conditions.items(), key=lambda kv: kv[0])))
                if key not in found:
                    query = Entity.objects.filter_index(**conditions)
                    assert query.index.name == index.name, (query.index.name, index.name)
                    found[key] = [e.id for e in query]
    return found
