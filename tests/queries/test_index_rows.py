"""``Index.implies`` (the query's re-check) answers exactly what ``rows_for`` implies."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schemaless_store.config.indexes import Index
from schemaless_store.exceptions import IndexValueError

INDEX = Index(
    table="index_a_b",
    properties=["a", "b"],
    shard_on="a",
    types={"b": "int"},
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(2**63, 2**64),  # too big for the int column
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.dictionaries(st.text(max_size=1), st.integers(), max_size=1),  # unsupported
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))
PROPERTIES = st.dictionaries(st.sampled_from(["a", "b", "c"]), VALUES, max_size=3)


def implied(properties: dict) -> set:
    try:
        return INDEX.rows_for(properties)
    except IndexValueError:
        return set()


def candidate_rows(properties: dict, other: dict) -> list:
    rows = list(implied(properties) | implied(other))
    return [(*row, b"e" * 16) for row in rows]


@given(PROPERTIES, PROPERTIES)
def test_implies_agrees_with_rows_for(properties, other):
    memo: dict = {}
    for row in candidate_rows(properties, other):
        expected = tuple(row[:-1]) in implied(properties)
        assert INDEX.implies(properties, row) is expected
        assert INDEX.implies(properties, row, memo) is expected  # the memo changes nothing
        assert INDEX.implies(properties, row, memo) is expected


def test_a_list_with_one_unfit_element_implies_nothing():
    fits = {"a": "x", "b": [1, 2]}
    row = (*next(iter(INDEX.rows_for(fits))), b"e" * 16)
    assert INDEX.implies(fits, row)
    assert not INDEX.implies({"a": "x", "b": [1, 2, 2**64]}, row)
    assert not INDEX.implies({"a": "x"}, row)
    assert not INDEX.implies({"a": "x", "b": []}, row)
