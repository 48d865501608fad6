"""Property test of what a query matches (docs/design.md#query-rule, docs/queries.md): an entity
matches only if it has every property the query names, in its conditions and its ordering, and
meets the conditions. Entities here are *sparse* (each property missing at random, ``None`` a
value like any other) and the declared indexes are composite, so their trailing properties are
often absent: an index over more properties than the query names holds only part of the matches.

Every query is drawn from a declared index: equality on a prefix of its properties, then any
lookup on the next, and an ordering on a named property or the one after. The oracle is
independent of the planner: a query must be answered exactly when some declared index has
exactly the properties it names (each drawn query is servable by the index it was drawn from
when it names all of its properties), and then its answer is the rule applied in Python to every
entity; otherwise it must raise ``NoIndexForQuery``, never give a partial answer.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from schemaless_store.config.indexes import Index, registry
from schemaless_store.exceptions import NoIndexForQuery
from schemaless_store.models import Entity
from schemaless_store.values import index_values
from tests.support import STORE, child
from tests.support.queries import COMPARE, wipe
from tests.support.raw import walk_pages

# Hundreds of hypothesis examples against the databases: run once (CI: on Django 5.2).
pytestmark = [STORE, pytest.mark.slow]

SPARSE_INDEXES = [
    Index(table="index_sp_genre_mail", properties=["genre", "mail"], shard_on="mail"),
    Index(
        table="index_sp_genre_stamp",
        properties=["genre", "stamp"],
        shard_on="genre",
        types={"stamp": "int"},
    ),
    Index(table="index_sp_mail_owner", properties=["mail", "owner"], shard_on="owner"),
    Index(
        table="index_sp_genre_owner_stamp",
        properties=["genre", "owner", "stamp"],
        shard_on="owner",
        types={"stamp": "int"},
    ),
]
INT_PROPERTIES = {"stamp"}
GENRES = ["entry", "like", "user"]
MAILS = [None, "a@x", "b@x", "c@x"]  # None is a value: an entity with it has a mail
USERS = [bytes([n]) * 4 for n in (1, 2, 3)]
VALUES = {
    "genre": st.sampled_from(GENRES),
    "mail": st.sampled_from(MAILS),
    "owner": st.sampled_from(USERS),
    "stamp": st.integers(0, 9),
}
BOUNDS = {
    "genre": st.sampled_from([*GENRES, "", "m", "zz"]),
    "mail": st.sampled_from([*MAILS, "", "b", "zz"]),
    "owner": st.sampled_from([*USERS, b"", bytes([2]), bytes([9]) * 5]),
    "stamp": st.integers(-1, 10),
}

# Each property present about two times in three: most entities lack something.
sparse_entities = st.lists(
    st.fixed_dictionaries({}, optional={**VALUES, "title": st.text(max_size=3)}),
    min_size=4,
    max_size=16,
)


@pytest.fixture
def sparse_indexes():
    with contextlib.ExitStack() as stack:
        for index in SPARSE_INDEXES:
            stack.enter_context(child.declared(index))
        yield


def column(prop: str, value: Any) -> Any:
    return value if prop in INT_PROPERTIES else index_values.encode_key(value)


@st.composite
def queries(draw: Any) -> tuple[dict[str, Any], str | None]:
    """Conditions and an ordering drawn from one declared index (see the module docs)."""
    index = draw(st.sampled_from(SPARSE_INDEXES))
    props = list(index.properties)
    named = draw(st.integers(1, len(props)))
    conditions: dict[str, Any] = {}
    for prop in props[: named - 1]:  # equality on a prefix
        if draw(st.booleans()):
            conditions[prop] = draw(VALUES[prop])
        else:
            conditions[f"{prop}__in"] = draw(st.lists(VALUES[prop], min_size=1, max_size=3))
    last = props[named - 1]
    lookup = draw(st.sampled_from(["exact", "in", "gt", "gte", "lt", "lte", "range"]))
    if lookup == "exact":
        conditions[last] = draw(VALUES[last])
    elif lookup == "in":
        conditions[f"{last}__in"] = draw(st.lists(VALUES[last], max_size=3))
    elif lookup == "range":
        conditions[f"{last}__gte"] = draw(BOUNDS[last])
        conditions[f"{last}__lt"] = draw(BOUNDS[last])
    else:
        conditions[f"{last}__{lookup}"] = draw(BOUNDS[last])
    orderable = props[:named]
    if lookup in ("exact", "in") and named < len(props):
        orderable.append(props[named])  # the next property, named by the ordering alone
    order = draw(st.one_of(st.none(), st.sampled_from(orderable)))
    if order is not None and draw(st.booleans()):
        order = "-" + order
    return conditions, order


def named_properties(conditions: dict[str, Any], order: str | None) -> set[str]:
    names = {key.partition("__")[0] for key in conditions}
    return names | ({order.lstrip("-")} if order else set())


def matches(props: dict[str, Any], conditions: dict[str, Any], order: str | None) -> bool:
    """The rule, in Python: every named property present, every condition met."""
    if not named_properties(conditions, order) <= set(props):
        return False
    for key, target in conditions.items():
        prop, _, lookup = key.partition("__")
        value = column(prop, props[prop])
        target = [column(prop, t) for t in target] if lookup == "in" else column(prop, target)
        if not COMPARE[lookup or "exact"](value, target):
            return False
    return True


@settings(
    max_examples=200,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(bags=sparse_entities, query=queries(), size=st.integers(1, 4))
def test_a_query_answers_every_entity_that_has_what_it_names(sparse_indexes, bags, query, size):
    wipe()
    made = Entity.objects.bulk_put(bags)
    conditions, order = query
    named = named_properties(conditions, order)
    servable = any(
        set(i.properties) == named for i in registry.valid() if i.column is None and i.kind is None
    )
    qs = Entity.objects.filter_index(**conditions)
    if not servable:
        with pytest.raises(NoIndexForQuery):
            qs = qs.order_by(order) if order else qs
            list(qs)
        return
    if order:
        qs = qs.order_by(order)
    want = {e.id for e in made if matches(e.body_properties(), conditions, order)}
    got = [e.id for e in qs]
    assert len(got) == len(set(got)), "an entity came twice"
    assert set(got) == want
    assert walk_pages(qs, size) == got
    assert qs.count() == len(want)
    if order:
        prop = order.lstrip("-")
        keys_in_order = [column(prop, e[prop]) for e in qs]
        assert keys_in_order == sorted(keys_in_order, reverse=order.startswith("-"))


def test_the_demo_bug_is_refused_not_answered_partially(sparse_indexes):
    """The demo's ``kind="entry"`` (here ``genre``) while only (genre, mail) and (genre, stamp)
    hold genre: raising is the only honest answer; naming the other property answers every
    entity that has it."""
    with_mail = Entity.objects.create(genre="entry", mail="a@x")
    with_time = Entity.objects.create(genre="entry", stamp=3)
    Entity.objects.create(genre="entry")
    with pytest.raises(NoIndexForQuery) as info:
        list(Entity.objects.filter_index(genre="entry"))
    assert "index_sp_genre_mail" in str(info.value)
    assert "also requires `mail`" in str(info.value)
    by_mail = Entity.objects.filter_index(genre="entry").order_by("mail")
    assert [e.id for e in by_mail] == [with_mail.id]
    by_time = Entity.objects.filter_index(genre="entry").order_by("-stamp")
    assert [e.id for e in by_time] == [with_time.id]


def test_none_is_a_value_and_missing_is_not(sparse_indexes):
    none = Entity.objects.create(genre="user", mail=None)
    Entity.objects.create(genre="user")
    found = Entity.objects.filter_index(genre="user", mail=None)
    assert [e.id for e in found] == [none.id]
    assert [e.id for e in Entity.objects.filter_index(genre="user").order_by("mail")] == [none.id]
    assert isinstance(none.id, uuid.UUID)
