"""Property test: filter_index equals the same filter applied in Python to every entity, in the
same order, across page boundaries, with stale index rows present, over every lookup and
ordering: equality, ``in`` and ranges on either property of a composite index, scatter queries
with every range lookup, and list-valued properties. Entities inserted between pages never make
an entity appear twice, nor hide one that existed when the first page was read."""

from __future__ import annotations

import uuid
from itertools import product
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map
from schemaless_store.values import index_values
from tests.support import STORE
from tests.support.queries import COMPARE, wipe
from tests.support.raw import insert_index_row, walk_pages

# Hundreds of hypothesis examples against the databases: run once (CI: on Django 5.2).
pytestmark = [STORE, pytest.mark.slow]

USERS = [bytes([n]) * 4 for n in (1, 2, 3, 200)]
TAGS = ["a", "b", "c"]  # few values: entities share them, so their rows interleave
INT_PROPERTIES = {"published"}  # int columns; every other property is a `key` column


# Mostly lists (several rows per entity: what paging must not repeat), sometimes a scalar,
# sometimes empty (no row at all).
tags = st.one_of(
    st.lists(st.sampled_from(TAGS), min_size=2, max_size=4),
    st.lists(st.sampled_from(TAGS), max_size=1),
    st.sampled_from(TAGS),
)
entities = st.lists(
    st.fixed_dictionaries(
        {"user_id": st.sampled_from(USERS), "published": st.integers(-5, 15), "tags": tags},
        optional={"title": st.text(max_size=5)},
    ),
    min_size=6,
    max_size=18,
)
bound = st.integers(-6, 16)
user_bound = st.sampled_from([b"", bytes([2]), *USERS, bytes([255]) * 5])
tag_bound = st.one_of(st.sampled_from(TAGS), st.sampled_from(["", "bb", "d"]))


def ranges_on(prop: str, values: st.SearchStrategy, min_size: int = 0) -> st.SearchStrategy:
    """A lower bound (``gt`` or ``gte``), an upper one (``lt`` or ``lte``), both or neither;
    at least ``min_size`` of them. (All four at once would mostly select nothing.)"""

    def side(lookups: tuple[str, str]) -> st.SearchStrategy:
        return st.one_of(
            st.just({}),
            st.builds(lambda lookup, v: {f"{prop}__{lookup}": v}, st.sampled_from(lookups), values),
        )

    found = st.builds(lambda low, high: {**low, **high}, side(("gt", "gte")), side(("lt", "lte")))
    return found.filter(lambda conditions: len(conditions) >= min_size)


def on(prop: str, values: st.SearchStrategy, min_size: int = 0) -> st.SearchStrategy:
    """Conditions on one property: exact, ``in`` or ranges (none at all if ``min_size`` is 0)."""
    return st.one_of(
        values.map(lambda v: {prop: v}),
        st.lists(values, max_size=4).map(lambda vs: {f"{prop}__in": vs}),
        ranges_on(prop, values, min_size),
    )


def query(conditions: st.SearchStrategy, orders: list[str | None]) -> st.SearchStrategy:
    return st.tuples(conditions, st.sampled_from(orders))


PUBLISHED_ORDERS = [None, "published", "-published"]
USER_ORDERS = [None, "user_id", "-user_id"]
# Each family gets its own examples (one strategy of all of them would leave some untried).
QUERIES = {
    # Pinned: user_id, then any lookup on published (index_user_published).
    "pinned": query(
        st.builds(lambda u, c: {"user_id": u, **c}, st.sampled_from(USERS), on("published", bound)),
        PUBLISHED_ORDERS,
    ),
    # Several users (`in`), then any lookup on published; ordered by either property.
    "user-in": query(
        st.builds(
            lambda us, c: {"user_id__in": us, **c},
            st.lists(st.sampled_from(USERS), max_size=3, unique=True),
            on("published", bound),
        ),
        PUBLISHED_ORDERS + USER_ORDERS,
    ),
    # Scatter: ranges on user_id alone (index_user_id) ...
    "scatter-user": query(ranges_on("user_id", user_bound, min_size=1), USER_ORDERS),
    # ... or on published alone (index_published, sharded on published).
    "scatter-published": query(ranges_on("published", bound, min_size=1), PUBLISHED_ORDERS),
    # List-valued: any lookup on tags (an entity has a row per element).
    "tags": query(on("tags", tag_bound, min_size=1), [None, "tags", "-tags"]),
}


def column(prop: str, value: Any) -> Any:
    """A value as the index column compares it."""
    return value if prop in INT_PROPERTIES else index_values.encode_key(value)


def first_match(
    props: dict, conditions: dict, order: str | None, properties: tuple[str, ...]
) -> tuple | None:
    """The documented place of an entity in the results: among the index rows its properties
    imply (one per combination of list elements) that meet every condition, the first in the
    result order (the ordered property, then the index's other properties not fixed by an
    exact condition, then the id; descending flips the key). None if no row matches."""
    if any(p not in props for p in properties):
        return None
    rows = [
        dict(zip(properties, combination, strict=True))
        for combination in product(
            *(props[p] if isinstance(props[p], list) else [props[p]] for p in properties)
        )
    ]
    fixed = {k for k in conditions if "__" not in k}
    sort = [order.lstrip("-")] if order else []
    sort += [p for p in properties if p not in fixed and p not in sort]
    found = []
    for row in rows:
        meets = True
        for key, target in conditions.items():
            prop, _, lookup = key.partition("__")
            target = [column(prop, t) for t in target] if lookup == "in" else column(prop, target)
            meets = meets and COMPARE[lookup or "exact"](column(prop, row[prop]), target)
        if meets:
            found.append(tuple(column(p, row[p]) for p in sort))
    if not found:
        return None
    return max(found) if order and order.startswith("-") else min(found)


def expected(
    rows: list[Entity], conditions: dict, order: str | None, properties: tuple[str, ...]
) -> list[uuid.UUID]:
    placed = {}
    for e in rows:
        key = first_match(e.body_properties(), conditions, order, properties)
        if key is not None:
            placed[e.id] = (*key, e.id.bytes)
    return sorted(placed, key=placed.get, reverse=bool(order and order.startswith("-")))


def leave_stale_rows(entity: Entity) -> None:
    """Move an entity and leave its old rows behind, as a crash would."""
    old_user, old_published, old_tags = entity["user_id"], entity["published"], entity["tags"]
    entity["published"] = old_published + 7
    entity["user_id"] = USERS[(USERS.index(old_user) + 1) % len(USERS)]
    entity["tags"] = ["bb"]
    entity.save()
    user = index_values.encode_key(old_user)
    alias = bucket_map.alias_for(index_values.encode_key(user))
    insert_index_row("index_user_published", alias, (user, old_published, entity.id.bytes))
    insert_index_row(
        "index_published",
        bucket_map.alias_for(index_values.encode_key(old_published)),
        (old_published, entity.id.bytes),
    )
    for tag in set(old_tags) if isinstance(old_tags, list) else {old_tags}:
        tag = index_values.encode_key(tag)
        insert_index_row(
            "index_tags", bucket_map.alias_for(index_values.encode_key(tag)), (tag, entity.id.bytes)
        )


@pytest.mark.parametrize("family", QUERIES)
@settings(
    max_examples=150,
    deadline=None,
    # Explaining a failure re-runs it hundreds of times against the databases: minutes.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    bags=entities,
    moved=st.lists(st.integers(0, 5), max_size=4),
    data=st.data(),
    size=st.integers(1, 4),
    arriving=st.one_of(st.just([]), entities),
)
def test_filter_index_equals_python_filter(
    published_first, family, bags, moved, data, size, arriving
):
    wipe()
    made = Entity.objects.bulk_put(bags)
    for n in set(moved):
        if n < len(made):
            leave_stale_rows(made[n])
    conditions, order = data.draw(QUERIES[family], label="query")
    qs = Entity.objects.filter_index(**conditions)
    if order:
        qs = qs.order_by(order)
    properties = qs.index.properties
    current = list(Entity.objects.get_many([e.id for e in made]).values())
    want = expected(current, conditions, order, properties)
    assert [e.id for e in qs] == want
    assert walk_pages(qs, size) == want
    assert qs.count() == len(want)

    # Entities arriving while a reader pages: every entity that existed when the first page
    # was read is returned once; an arrival may or may not be; nothing comes twice, and the
    # order holds.
    new: list[Entity] = []
    paged = walk_pages(qs, size, between=lambda: new.extend(Entity.objects.bulk_put(arriving)))
    assert len(set(paged)) == len(paged)
    assert set(want) <= set(paged)
    everything = expected(current + new, conditions, order, properties)
    assert set(paged) <= set(everything)
    assert paged == [i for i in everything if i in set(paged)]
