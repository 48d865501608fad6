"""Property test: filter_index equals the same filter applied in Python to every entity,
in the same order, across page boundaries, with stale index rows present."""

from __future__ import annotations

import uuid

from django.db import connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemaless_store import keys, shards
from schemaless_store.indexes import registry
from schemaless_store.models import Entity
from tests.conftest import STORE
from tests.helpers import insert_index_row

pytestmark = STORE

USERS = [bytes([n]) * 4 for n in (1, 2, 3, 200)]
INDEX = "index_user_published"


def wipe() -> None:
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM entities")
            for index in registry.valid():
                cursor.execute(f"DELETE FROM {connections[alias].ops.quote_name(index.name)}")


entities = st.lists(
    st.fixed_dictionaries(
        {"user_id": st.sampled_from(USERS), "published": st.integers(-5, 15)},
        optional={"title": st.text(max_size=5)},
    ),
    min_size=1,
    max_size=18,
)
bound = st.integers(-6, 16)
ranges = st.fixed_dictionaries(
    {},
    optional={
        "published__gt": bound,
        "published__gte": bound,
        "published__lt": bound,
        "published__lte": bound,
    },
)
pinned = st.builds(
    lambda user, rng, order: ({"user_id": user, **rng}, order),
    st.sampled_from(USERS),
    ranges,
    st.sampled_from([None, "published", "-published"]),
)
listed = st.builds(
    lambda users, order: ({"user_id__in": users}, order),
    st.lists(st.sampled_from(USERS), max_size=3, unique=True),
    st.sampled_from([None, "published", "-published"]),
)
scattered = st.builds(
    lambda lo, order: ({"user_id__gte": lo}, order),
    st.sampled_from([b"", *USERS]),
    st.sampled_from(["user_id", "-user_id"]),
)
queries = st.one_of(pinned, listed, scattered)


def matches(props: dict, conditions: dict) -> bool:
    for key, target in conditions.items():
        prop, _, lookup = key.partition("__")
        value = props[prop]
        if prop == "user_id":  # key column: compare encoded keys, as the index does
            value = keys.encode_key(value)
            target = (
                [keys.encode_key(t) for t in target] if lookup == "in" else keys.encode_key(target)
            )
        ok = {
            "": lambda v, t: v == t,
            "in": lambda v, t: v in t,
            "gt": lambda v, t: v > t,
            "gte": lambda v, t: v >= t,
            "lt": lambda v, t: v < t,
            "lte": lambda v, t: v <= t,
        }[lookup](value, target)
        if not ok:
            return False
    return True


def expected_order(
    rows: list[Entity], conditions: dict, order: str | None, index_properties: tuple[str, ...]
) -> list[uuid.UUID]:
    """The documented order: the ordered property, then the index's other non-fixed columns
    in index order, then the entity id; descending flips the whole key."""
    fixed = {k for k in conditions if "__" not in k}
    columns = [order.lstrip("-")] if order else []
    columns += [p for p in index_properties if p not in fixed and p not in columns]

    def key(e: Entity):
        return (
            *(keys.encode_key(e[c]) if c == "user_id" else e[c] for c in columns),
            e.id.bytes,
        )

    return [e.id for e in sorted(rows, key=key, reverse=bool(order and order.startswith("-")))]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    bags=entities,
    moved=st.lists(st.integers(0, 5), max_size=4),
    query=queries,
    size=st.integers(1, 6),
)
def test_filter_index_equals_python_filter(bags, moved, query, size):
    wipe()
    made = Entity.objects.bulk_put(bags) if bags else []
    # Move some entities and leave their old index rows behind, as a crash would.
    for n in set(moved):
        if n < len(made):
            e = made[n]
            old_user, old_published = e["user_id"], e["published"]
            e["published"] = old_published + 7
            e["user_id"] = USERS[(USERS.index(old_user) + 1) % len(USERS)]
            e.save()
            value = keys.encode_key(old_user)
            insert_index_row(
                INDEX, shards.alias_for(keys.encode_key(value)), (value, old_published, e.id.bytes)
            )
    conditions, order = query
    qs = Entity.objects.filter_index(**conditions)
    if order:
        qs = qs.order_by(order)
    current = list(Entity.objects.get_many([e.id for e in made]).values())
    chosen = [e for e in current if matches(e.body_properties(), conditions)]
    want = expected_order(chosen, conditions, order, qs.index.properties)
    assert [e.id for e in qs] == want

    paged, cursor = [], None
    while True:
        page = qs.page(after=cursor, size=size)
        paged.extend(e.id for e in page)
        if not page.has_next:
            break
        cursor = page.next_cursor
    assert paged == want
    assert qs.count() == len(want)
