"""The invariants (docs/design.md#invariants), checked from outside the store (raw reads of
the shards).

- I1 ``check_no_false_positives``: a query never returns an entity that does not match.
- I2 ``check_no_false_negatives``: every entity is found by every ready index that covers it.
- I3 ``assert_exact``: index tables hold exactly the rows the entities imply, on the right shards.

Each asserts; ``false_positives``, ``false_negatives`` and ``inexact`` return the problems
instead, for the reliability suite to count them (``tests/support/reliability_report.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from django.db import connections

from schemaless_store.config.indexes import KIND_PROPERTY, Index, registry
from schemaless_store.models import Entity
from schemaless_store.tables import lifecycle
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values.codec import decode_body
from tests.support.raw import index_rows

# (index name, alias of the shard holding the row, column values, entity id)
PlacedRow = tuple[str, str, tuple[Any, ...], bytes]


def committed_entities() -> dict[bytes, dict[str, Any]]:
    """Every entity on every shard, decoded: what is committed, read without the store."""
    found = {}
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT id, body FROM entities")
            for entity_id, body in cursor.fetchall():
                found[bytes(entity_id)] = decode_body(bytes(body))
    return found


def implied_rows(indexes: Iterable[Index]) -> set[PlacedRow]:
    rows = set()
    entities = committed_entities()
    for index in indexes:
        for entity_id, properties in entities.items():
            for values in index.rows_for(properties):
                alias = bucket_map.alias_for(index.routing_key(values[index.shard_position]))
                rows.add((index.name, alias, values, entity_id))
    return rows


def stored_rows(indexes: Iterable[Index]) -> set[PlacedRow]:
    rows = set()
    for index in indexes:
        for *values, entity_id, alias in index_rows(index.name):
            rows.add((index.name, alias, tuple(values), entity_id))
    return rows


def inexact(indexes: Iterable[Index] | None = None) -> str | None:
    """I3: None if stored rows == implied rows, for every given (default: declared) index;
    else what differs."""
    indexes = list(registry.valid() if indexes is None else indexes)
    implied, stored = implied_rows(indexes), stored_rows(indexes)
    missing, extra = implied - stored, stored - implied
    if not missing and not extra:
        return None
    return (
        f"index tables are not exact: {len(missing)} missing, e.g. {sorted(missing)[:3]}; "
        f"{len(extra)} extra, e.g. {sorted(extra)[:3]}"
    )


def assert_exact(indexes: Iterable[Index] | None = None) -> None:
    """I3, asserted (see :func:`inexact`)."""
    problem = inexact(indexes)
    assert problem is None, problem


def ready_indexes() -> list[Index]:
    states = lifecycle.states(refresh=True)
    return [i for i in registry.valid() if states.get(i.name) == lifecycle.READY]


def conditions_for(index: Index, properties: dict[str, Any]) -> list[dict[str, Any]]:
    """Equality conditions on every property of ``index`` that the entity should match (one per
    element combination of list values). Naming every property picks this very index; a
    kind's own index (docs/kinds.md) is asked with the kind named, and only of its entities."""
    if index.kind is not None and properties.get(KIND_PROPERTY) != index.kind:
        return []
    pinned = {} if index.kind is None else {KIND_PROPERTY: index.kind}
    per_property = []
    for prop in index.properties:
        if prop not in properties:
            return []
        value = properties[prop]
        per_property.append(value if type(value) is list else [value])
    return [
        {**pinned, **dict(zip(index.properties, combo, strict=True))}
        for combo in itertools.product(*per_property)
    ]


def matches(entity: Entity, conditions: dict[str, Any]) -> bool:
    for prop, wanted in conditions.items():
        if prop not in entity:
            return False
        actual = entity[prop]
        if not (actual == wanted or (type(actual) is list and wanted in actual)):
            return False
    return True


def false_positives(conditions: Iterable[dict[str, Any]]) -> list[str]:
    """I1 over the given queries (run only if a ready index serves them): one problem per
    non-matching entity returned."""
    ready = {i.name for i in ready_indexes()}
    problems = []
    for query in conditions:
        found = Entity.objects.filter_index(**query)
        if found.index.name not in ready:
            continue
        for entity in found:
            if not matches(entity, query):
                problems.append(f"{query} returned non-matching {entity.properties}")
    return problems


def check_no_false_positives(conditions: Iterable[dict[str, Any]]) -> None:
    """I1, asserted (see :func:`false_positives`)."""
    problems = false_positives(conditions)
    assert not problems, problems[0]


def false_negatives() -> tuple[list[dict[str, Any]], list[str]]:
    """I2 for every committed entity and ready index: the queries it ran (for I1), and one
    problem per (entity, query) that does not find the entity."""
    queries, problems = [], []
    entities = committed_entities()
    for index in ready_indexes():
        for entity_id, properties in entities.items():
            for query in conditions_for(index, properties):
                found = {e.id.bytes for e in Entity.objects.filter_index(**query)}
                if entity_id not in found:
                    problems.append(
                        f"entity {entity_id.hex()} {properties} not found by {index.name} {query}"
                    )
                queries.append(query)
    return queries, problems


def check_no_false_negatives() -> list[dict[str, Any]]:
    """I2, asserted (see :func:`false_negatives`); returns the queries it ran (for I1)."""
    queries, problems = false_negatives()
    assert not problems, problems[0]
    return queries
