"""The admin's JSON view of property bags, its search syntax, and index-key decoding (no DB)."""

from __future__ import annotations

import datetime as dt
import math
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemaless_store.admin.browse import Cursor
from schemaless_store.admin.entity_rows import decode_column
from schemaless_store.admin.search import SearchError, parse_search
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import IndexValueError
from schemaless_store.values import index_values, jsonview
from tests.support.values import EVERY_TYPE, json_scalars, json_values, same


def round_trip(props):
    return jsonview.loads(jsonview.dumps(props))


def test_every_supported_type_round_trips_exactly():
    assert same(round_trip(EVERY_TYPE), EVERY_TYPE)


def test_values_are_legible():
    text = jsonview.dumps(
        {
            "b": b"\x00\xff",
            "u": uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "t": dt.datetime(2009, 2, 26, 12, 30, tzinfo=dt.UTC),
            "title": "héllo",
        },
        indent=None,
    )
    assert text == (
        '{"b": {"$bytes": "00ff"}, "u": {"$uuid": "12345678-1234-5678-1234-567812345678"}, '
        '"t": {"$datetime": "2009-02-26T12:30:00+00:00"}, "title": "héllo"}'
    )


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("-inf"),
        -0.0,
        1.0,
        1,
        True,
        {1: "int key", b"k": "bytes key", None: 0},
        {"$bytes": "a dict that looks tagged"},
        {"$x": {"$y": [1]}},
        {},
        [],
        {"a": {"b": [{"$uuid": "not a uuid"}]}},
        dt.datetime(2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30, seconds=15))),
        2**64 - 1,
        -(2**63),
    ],
)
def test_awkward_values_round_trip(value):
    back = round_trip({"v": value})["v"]
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    else:
        assert same(back, value)
        if value == 0.0 and type(value) is float:
            assert math.copysign(1, back) == math.copysign(1, value)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_round_trip_property(props):
    assert same(round_trip(props), props)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "invalid JSON"),
        ("[1, 2]", "not a list"),
        ('"text"', "not a string"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ('{"x": NaN}', '"$float": "nan"'),
        ('{"x": {"$bytes": "zz"}}', "not hexadecimal"),
        ('{"x": {"$bytes": 12}}', "takes a string"),
        ('{"x": {"$uuid": "nope"}}', "not a UUID"),
        ('{"x": {"$datetime": "2020-01-01T00:00:00"}}', "needs a UTC offset"),
        ('{"x": {"$datetime": "yesterday"}}', "not an ISO 8601"),
        ('{"x": {"$float": "1.5"}}', "use a number"),
        ('{"x": {"$wat": 1}}', "unknown tag"),
        ('{"x": {"$dict": [[[1], 2]]}}', "not a scalar"),
        ('{"x": {"$dict": [[1, 2], [1, 3]]}}', "appears twice"),
        ('{"x": {"$dict": [1]}}', "not a [key, value] pair"),
        ('{"x": ' + "1" * 5000 + "}", "invalid JSON"),
        ("[" * 100_000, "invalid JSON"),
    ],
)
def test_bad_input_is_a_clear_error(text, message):
    with pytest.raises(jsonview.JSONViewError) as info:
        jsonview.loads(text)
    assert message in str(info.value)


def test_errors_name_the_place():
    with pytest.raises(jsonview.JSONViewError, match=r"tags\[1\]"):
        jsonview.loads('{"tags": ["ok", {"$uuid": "bad"}]}')


def test_top_level_keys_are_property_names_not_tags():
    assert jsonview.loads('{"$uuid": "x"}') == {"$uuid": "x"}


def test_values_without_a_json_form_are_refused():
    with pytest.raises(jsonview.JSONViewError):
        jsonview.dumps({"t": (1, 2)})
    with pytest.raises(jsonview.JSONViewError):
        jsonview.dumps({"t": dt.datetime(2020, 1, 1)})


# --- search syntax ------------------------------------------------------------------------------

ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


@pytest.mark.parametrize(
    "text",
    [ID.hex, str(ID), str(ID).upper(), f"  {ID}  ", f"{{{ID}}}", f"urn:uuid:{ID}"],
)
def test_search_by_any_id_form(text):
    assert parse_search(text).entity_id == ID.bytes


@pytest.mark.parametrize(
    ("text", "conditions"),
    [
        ("link=https://example.com/a?b=1&c=2", {"link": "https://example.com/a?b=1&c=2"}),
        ("link:https://example.com/a", {"link": "https://example.com/a"}),
        ("published__gte = 1700000000", {"published__gte": 1700000000}),
        ('title="123"', {"title": "123"}),
        ("title=hello world", {"title": "hello world"}),
        ('user_id={"$bytes": "00ff"}', {"user_id": b"\x00\xff"}),
        ('tags__in=["a", "b"]', {"tags__in": ["a", "b"]}),
        (
            '{"user_id": {"$bytes": "01"}, "published__lt": 5}',
            {"user_id": b"\x01", "published__lt": 5},
        ),
    ],
)
def test_search_by_index_conditions(text, conditions):
    search = parse_search(text)
    assert not search.by_id
    assert same(search.conditions, conditions)


@pytest.mark.parametrize("text", ["hello", "12 34", '{"a": {"$uuid": "x"}}', "{}", "{oops"])
def test_unclear_searches_are_errors(text):
    with pytest.raises(SearchError):
        parse_search(text)


def test_empty_search():
    search = parse_search("  ")
    assert not search.by_id and not search.conditions


def test_cursor_round_trips_and_rejects_junk(settings):
    cursor = Cursor(dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC), 1, 42)
    assert Cursor.decode(cursor.encode()) == cursor
    for junk in ["", "1_2", "a_b_c", "1_99_3", "1_2_3_4"]:
        with pytest.raises(ValueError):
            Cursor.decode(junk)


# --- index column values back to property values ------------------------------------------------


@given(json_scalars.filter(lambda v: not isinstance(v, float) or not v.is_integer()))
def test_decode_key_inverts_encode_key(value):
    try:
        encoded = index_values.encode_key(value)
    except IndexValueError:
        # The only value here an index refuses (so the admin never shows it): an int beyond
        # 64 bits. Anything else raising is a failure.
        assert type(value) is int and value > 2**63 - 1, value
        return
    assert same(index_values.decode_key(encoded), value)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_decode_key_of_ints(value):
    assert same(index_values.decode_key(index_values.encode_key(value)), value)


def test_decode_typed_columns():
    index = registry.get("index_user_published")
    assert decode_column(index, "published", 17) == 17
    user = b"\x01" * 16
    assert decode_column(index, "user_id", index_values.encode_key(user)) == user
    with pytest.raises(ValueError):
        index_values.decode_key(b"\x99junk")
