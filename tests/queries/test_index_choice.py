"""The planner (docs/queries.md, "Which index serves a query"), with made-up declarations: no
database is touched."""

from __future__ import annotations

import pytest

from schemaless_store.config.indexes import Index
from schemaless_store.exceptions import IndexNotReady, InvalidQuery, NoIndexForQuery
from schemaless_store.query import planner
from schemaless_store.query.conditions import parse_conditions
from schemaless_store.query.planner import check_index, choose_index, suggest
from schemaless_store.tables import lifecycle


@pytest.fixture
def declare(monkeypatch):
    """Make exactly these indexes the declared ones (ready unless named in ``building``)."""

    def declare(*indexes: Index, building: tuple[str, ...] = ()) -> None:
        monkeypatch.setattr(planner, "maintained_indexes", lambda: list(indexes))
        states = {
            index.name: lifecycle.BUILDING if index.name in building else lifecycle.READY
            for index in indexes
        }
        monkeypatch.setattr(lifecycle, "states", lambda refresh=False: states)

    return declare


def chosen(order: str | None = None, **conditions) -> str:
    return choose_index(parse_conditions(conditions), order).name


def refused(order: str | None = None, **conditions) -> str:
    with pytest.raises(NoIndexForQuery) as info:
        chosen(order, **conditions)
    assert isinstance(info.value, InvalidQuery)
    return str(info.value)


def test_an_index_with_a_property_the_query_does_not_name_is_refused(declare):
    """The demo's bug: ``kind="entry"`` answered from (kind, email), which holds only the
    entities that have an email: a silent partial answer."""
    declare(Index(table="index_feed_email", properties=["kind", "email"], shard_on="email"))
    message = refused(kind="entry")
    assert "filter_index(kind='entry')" in message
    assert "index_feed_email" in message
    assert "also requires `email`" in message
    # What would serve: naming the other property (by order) or a declaration of its own.
    assert ".order_by('email')" in message
    assert "Index(table='index_kind', properties=['kind'], shard_on='kind')" in message
    assert "runcleaner --index=index_kind" in message
    # Naming every property of the index makes it serve.
    assert chosen("email", kind="entry") == "index_feed_email"
    assert chosen(kind="entry", email__gte="") == "index_feed_email"


def test_only_an_index_over_exactly_the_named_properties_serves(declare):
    declare(
        Index(table="t_a", properties=["a"], shard_on="a"),
        Index(table="t_ab", properties=["a", "b"], shard_on="a"),
        Index(table="t_abc", properties=["a", "b", "c"], shard_on="a"),
    )
    assert chosen(a=1) == "t_a"
    assert chosen("b", a=1) == "t_ab"
    assert chosen("c", a=1, b=2) == "t_abc"
    assert chosen(a=1, b=2, c__gt=3) == "t_abc"
    message = refused(a=1, d=2)
    assert "has no property `d`" in message


def test_a_pinned_shard_beats_a_scatter(declare):
    declare(
        Index(table="t_a_scatter", properties=["a", "b"], shard_on="b"),
        Index(table="t_b_pinned", properties=["a", "b"], shard_on="a"),
    )
    assert chosen(a=1, b__gt=0) == "t_b_pinned"
    assert chosen(a__in=[1], b__gt=0) == "t_b_pinned"  # one value pins one shard too
    # A range, or an `in` of several values, on shard_on pins nothing: then the name decides.
    assert chosen(a__in=[1, 2], b__gt=0) == "t_a_scatter"


def test_equal_plans_go_to_the_name_that_sorts_first(declare):
    same = {"properties": ["a", "b"], "shard_on": "a"}
    declare(Index(table="t_b", **same), Index(table="t_c", **same), Index(table="t_a", **same))
    assert chosen(a=1, b__lt=3) == "t_a"
    assert chosen(a__in=[1], b=2) == "t_a"


def test_equality_first_then_one_range(declare):
    declare(
        Index(table="t_ab", properties=["a", "b"], shard_on="a"),
        Index(table="t_ba", properties=["b", "a"], shard_on="a"),
    )
    assert chosen(a=1, b=2) == "t_ab"  # both serve: the name decides
    assert chosen(a=1, b__gt=2) == "t_ab"  # t_ba cannot seek to a after a range on b
    message = refused(a__gt=1, b__gt=2)
    assert "cannot seek to `b` after `a`" in message
    assert "no index can serve ranges on both `a`, `b`" in message


def test_orderings_an_index_can_serve(declare):
    declare(Index(table="t_abc", properties=["a", "b", "c"], shard_on="b"))
    assert chosen("a", a__in=[1, 2], b=1, c=1) == "t_abc"  # an equality property
    assert chosen("c", a__in=[1, 2], b=1) == "t_abc"  # the next one
    assert "cannot seek to `c` after `b`" in refused("b", a=1, c__gt=1)
    assert "cannot order by `c` after a range on `b`" in refused("c", a=1, b__gt=1)


def test_a_building_index_is_not_used_unless_allowed(declare, monkeypatch):
    declare(Index(table="t_a", properties=["a"], shard_on="a"), building=("t_a",))
    with pytest.raises(IndexNotReady):
        chosen(a=1)
    found = choose_index(parse_conditions({"a": 1}), allow_building=True)
    assert found.name == "t_a"


def test_cell_indexes_follow_the_same_rule(declare):
    declare(
        Index(table="t_entities", properties=["email"], shard_on="email"),
        Index(table="t_cells", properties=["school", "year"], shard_on="school", column="users"),
    )
    conditions = parse_conditions({"school": "x"})
    with pytest.raises(NoIndexForQuery) as info:
        choose_index(conditions, column="users")
    assert "also requires `year`" in str(info.value)
    assert choose_index(conditions, "year", column="users").name == "t_cells"
    # Entity queries and cell queries never use each other's indexes.
    with pytest.raises(NoIndexForQuery):
        choose_index(parse_conditions({"email": "x"}), column="users")


@pytest.mark.parametrize(
    ("properties", "conditions", "order", "reason"),
    [
        (["a"], {"a": 1}, None, None),
        (["a", "b"], {"a": 1}, None, "also requires `b`"),
        (["a", "b", "c"], {"a": 1}, None, "also requires `b`, `c`"),
        (["a"], {"a": 1, "z": 2}, None, "has no property `z`"),
        (["a"], {"a": 1}, "z", "has no property `z`"),
        (["a", "b"], {"a__gt": 1, "b": 2}, None, "cannot seek to `b`"),
        (["a", "b"], {"a__gt": 1}, "b", "cannot order by `b`"),
        (["a", "b"], {"a": 1, "b__gt": 1}, "a", None),
    ],
)
def test_reasons(properties, conditions, order, reason):
    index = Index(table="t", properties=properties, shard_on=properties[0])
    found = check_index(index, parse_conditions(conditions), order)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


@pytest.mark.parametrize(
    ("conditions", "order", "declaration"),
    [
        ({"kind": 1}, None, "properties=['kind'], shard_on='kind'"),
        ({"kind": 1}, "published", "properties=['kind', 'published'], shard_on='kind'"),
        ({"kind__in": [1], "user": 2}, None, "properties=['kind', 'user'], shard_on='user'"),
        ({"a": 1, "b__gte": 2}, "b", "properties=['a', 'b'], shard_on='a'"),
        ({"a__gte": 2}, None, "properties=['a'], shard_on='a'"),
    ],
)
def test_suggested_declarations(conditions, order, declaration):
    assert declaration in suggest(parse_conditions(conditions), order, None)


def test_no_declaration_serves_a_range_and_another_ordering():
    assert "no index can serve a range on `a` ordered by `b`" in suggest(
        parse_conditions({"a__gt": 1}), "b", None
    )
