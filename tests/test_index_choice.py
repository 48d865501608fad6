"""The planner's choice among indexes that serve a query (docs/queries.md, "Which index
serves a query"), with made-up declarations: no database is touched."""

from __future__ import annotations

import pytest

from schemaless_store import lifecycle, query
from schemaless_store.exceptions import NoIndexForQuery
from schemaless_store.indexes import Index
from schemaless_store.query import choose_index, parse_conditions


@pytest.fixture
def declare(monkeypatch):
    """Make exactly these indexes the declared, ready ones."""

    def declare(*indexes: Index) -> None:
        monkeypatch.setattr(query, "maintained_indexes", lambda: list(indexes))
        ready = {index.name: lifecycle.READY for index in indexes}
        monkeypatch.setattr(lifecycle, "states", lambda refresh=False: ready)

    return declare


def chosen(order: str | None = None, **conditions) -> str:
    return choose_index(parse_conditions(conditions), order).name


def test_a_pinned_shard_beats_fewer_properties(declare):
    declare(
        Index(table="t_short_scatter", properties=["a", "b"], shard_on="b"),
        Index(table="t_long_pinned", properties=["a", "b", "c"], shard_on="a"),
    )
    assert chosen(a=1, b__gt=0) == "t_long_pinned"
    # An `in` or a range on shard_on does not pin one shard: then the shorter index wins.
    assert chosen(a__in=[1, 2], b__gt=0) == "t_short_scatter"


def test_fewer_properties_win_among_pinned_indexes(declare):
    declare(
        Index(table="t_a_long", properties=["a", "b", "c"], shard_on="a"),
        Index(table="t_b_short", properties=["a", "b"], shard_on="a"),
        Index(table="t_c_longest", properties=["a", "b", "c", "d"], shard_on="a"),
    )
    assert chosen(a=1) == "t_b_short"
    assert chosen("b", a=1) == "t_b_short"


def test_fewer_properties_win_among_scatter_indexes(declare):
    declare(
        Index(table="t_a_long", properties=["a", "b"], shard_on="b"),
        Index(table="t_b_short", properties=["a"], shard_on="a"),
    )
    assert chosen(a__gte=1) == "t_b_short"


def test_equal_plans_go_to_the_name_that_sorts_first(declare):
    same = {"properties": ["a", "b"], "shard_on": "a"}
    declare(Index(table="t_b", **same), Index(table="t_c", **same), Index(table="t_a", **same))
    assert chosen(a=1, b__lt=3) == "t_a"
    assert chosen(a__in=[1], b=2) == "t_a"


def test_every_serving_index_has_the_same_equality_columns(declare):
    """Why the plan does not count equality columns: an index that leaves an equality
    property out of its prefix does not serve the query at all."""
    declare(
        Index(table="t_ab", properties=["a", "b"], shard_on="a"),
        Index(table="t_acb", properties=["a", "c", "b"], shard_on="a"),
        Index(table="t_ba", properties=["b", "a"], shard_on="a"),
    )
    assert chosen(a=1, b=2) == "t_ab"  # t_ba serves it too, with two equality columns
    assert chosen(a=1, b__gt=2) == "t_ab"  # t_ba cannot seek to a after a range on b
    with pytest.raises(NoIndexForQuery):
        chosen(c=1, b=2)  # t_acb: a is not conditioned, so c and b are no prefix


def test_order_on_an_equality_property(declare):
    declare(Index(table="t_abc", properties=["a", "b", "c"], shard_on="b"))
    assert chosen("a", a__in=[1, 2]) == "t_abc"
    assert chosen("b", a__in=[1, 2]) == "t_abc"
    with pytest.raises(NoIndexForQuery):  # c is neither the next property nor in the prefix
        chosen("c", a=1)
