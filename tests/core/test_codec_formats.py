"""Both body formats hold the same values: every supported value reads back equal and of the
same type, every unsupported one is refused, in MessagePack and in JSON (issue 45, item 1).
The JSON body's own shape: JSON-native values stored as themselves, the others tagged."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
import zoneinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemaless_store.exceptions import CorruptBody, UnsupportedValue
from schemaless_store.values.codec import (
    FORMAT_JSON,
    FORMAT_MSGPACK,
    MAX_NESTING,
    JsonCodec,
    MsgpackCodec,
    body_format,
    decode_body,
)
from schemaless_store.values.jsonbody import SAFE_INT
from tests.support.values import EVERY_TYPE, deep_same, line_keys, line_values, same

CODECS = {"msgpack": MsgpackCodec(), "json": JsonCodec()}
both = pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))

# Every supported value, wherever it sits: NaN and infinities, any UTC offset in whole seconds
# (zoneinfo's too), ints at both ends and around JSON's safe range, non-string dict keys.
zones = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"])
edge_ints = st.sampled_from(
    [SAFE_INT, SAFE_INT + 1, -SAFE_INT, -SAFE_INT - 1, 2**63 - 1, -(2**63), 2**64 - 1, 0]
)
extra = (
    edge_ints
    | st.datetimes(timezones=zones.map(zoneinfo.ZoneInfo))
    | st.dictionaries(st.sampled_from(["$uuid", "$x", "$dict", "$"]), line_values, max_size=1)
    | st.dictionaries(line_keys, line_values, min_size=1, max_size=2)
)
supported = line_values | extra | st.lists(extra, max_size=3)
bags = st.dictionaries(st.text(), supported, max_size=6)


@both
@given(bag=bags)
def test_every_supported_value_round_trips_equal_and_of_the_same_type(codec, bag):
    body = codec.encode(bag)
    assert deep_same(decode_body(body), bag)
    assert deep_same(codec.decode(body), bag)


def micro_offset(micros: int) -> dt.timezone:
    """A UTC offset with a fraction of a second, which no format stores."""
    return dt.timezone(dt.timedelta(microseconds=micros))


def _wrap(value, where):
    if where == "as-key":
        return {"x": {value: 1}}
    return {"top": {"x": value}, "in-list": {"x": [1, value]}, "in-dict": {"x": {"k": value}}}[
        where
    ]


unsupported = st.one_of(
    st.sampled_from([object(), 1 + 2j, type, dt.UTC, Ellipsis]),
    st.tuples(st.integers()),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=3), max_size=3),
    st.dates(),
    st.times(),
    st.datetimes(),  # naive
    st.datetimes(timezones=st.integers(1, 999_999).map(micro_offset)),
    st.decimals(allow_nan=False),
    st.fractions(),
    st.complex_numbers(),
    st.binary(max_size=4).map(bytearray),
    st.binary(max_size=4).map(memoryview),
    st.integers(min_value=2**64),
    st.integers(max_value=-(2**63) - 1),
    st.characters(categories=["Cs"]).map(lambda c: f"lone {c} surrogate"),
)


@both
@given(value=unsupported, where=st.sampled_from(["top", "in-list", "in-dict"]))
def test_every_unsupported_value_is_refused(codec, value, where):
    with pytest.raises(UnsupportedValue):
        codec.encode(_wrap(value, where))


@both
@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, (1,), {1}, object()])
def test_the_refusal_says_cannot_store(codec, value):
    with pytest.raises(UnsupportedValue, match="cannot store"):
        codec.encode({"x": value})


@both
@pytest.mark.parametrize("key", [(1, 2), frozenset({1})], ids=repr)
def test_an_unsupported_dict_key_is_refused(codec, key):
    with pytest.raises(UnsupportedValue):
        codec.encode(_wrap(key, "as-key"))


@both
def test_subclasses_of_supported_types_are_refused_not_read_back_as_another_type(codec):
    import enum

    class Colour(enum.IntEnum):
        RED = 1

    class Name(str):
        pass

    for value in (Colour.RED, Name("x")):
        with pytest.raises(UnsupportedValue):
            codec.encode({"x": value})


@both
def test_nesting_beyond_max_nesting_is_refused_and_up_to_it_kept(codec):
    deep = 1
    for level in range(MAX_NESTING):
        deep = [deep] if level % 2 else {"k": deep}
    assert same(codec.decode(codec.encode({"d": deep})), {"d": deep})
    with pytest.raises(UnsupportedValue, match=f"more than {MAX_NESTING} levels"):
        codec.encode({"d": [deep]})


def test_json_native_values_are_stored_as_themselves():
    bag = {
        "user_id": 7,
        "title": "héllo",
        "score": 2.5,
        "whole": 3.0,
        "ok": True,
        "none": None,
        "tags": ["a", 1],
        "meta": {"k": {"n": -SAFE_INT}},
    }
    body = JsonCodec().encode(bag)
    assert body[0] == FORMAT_JSON and body_format(body) == "json"
    text = body[1:].decode("utf-8")
    assert json.loads(text) == bag
    assert '"whole":3.0' in text  # a float keeps its ".0": it reads back a float
    assert "héllo" in text  # UTF-8, not \\u escapes


def test_types_json_lacks_are_tagged():
    when = dt.datetime(2009, 2, 26, 1, 2, 3, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    bag = {
        "b": b"\x00\xff",
        "u": uuid.UUID(int=1),
        "t": when,
        "nan": math.nan,
        "big": 2**53,
        "keys": {1: "a"},
        "dollar": {"$uuid": "not a uuid"},
    }
    stored = json.loads(JsonCodec().encode(bag)[1:])
    assert stored == {
        "b": {"$base64": "AP8="},
        "u": {"$uuid": "00000000-0000-0000-0000-000000000001"},
        "t": {"$datetime": "2009-02-26T01:02:03.000000+01:00"},
        "nan": {"$float": "nan"},
        "big": {"$int": "9007199254740992"},
        "keys": {"$dict": [[1, "a"]]},
        "dollar": {"$dict": [["$uuid", "not a uuid"]]},
    }
    assert deep_same(decode_body(JsonCodec().encode(bag)), bag)


def test_a_top_level_property_may_look_like_a_tag():
    bag = {"$uuid": "just a string"}
    assert same(decode_body(JsonCodec().encode(bag)), bag)


def test_old_formats_stay_readable_under_the_json_codec():
    old = MsgpackCodec()
    small, large = old.encode(EVERY_TYPE), old.encode({**EVERY_TYPE, "text": "spam " * 500})
    assert body_format(small) == "msgpack" and body_format(large) == "msgpack+zlib"
    assert same(JsonCodec().decode(small), EVERY_TYPE)
    assert JsonCodec().decode(large)["text"] == "spam " * 500


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"{",
        b"[1, 2]",
        b"\xff\xfe",
        b'{"x": NaN}',
        b'{"x": {"$nope": "1"}}',
        b'{"x": {"$uuid": "zz"}}',
        b'{"x": {"$uuid": 1}}',
        b'{"x": {"$base64": "***"}}',
        b'{"x": {"$int": "1.5"}}',
        b'{"x": {"$float": "1"}}',
        b'{"x": {"$datetime": "2020-01-01T00:00:00"}}',
        b'{"x": {"$dict": [[1]]}}',
        b'{"x": {"$dict": [[[1], 2]]}}',
        b'{"x": {"$dict": {"a": 1}}}',
        b"[" * 100_000,
    ],
    ids=lambda p: p[:30].decode("latin-1"),
)
def test_corrupt_json_bodies_raise_corrupt_body(payload):
    with pytest.raises(CorruptBody):
        decode_body(bytes([FORMAT_JSON]) + payload)


def test_an_unknown_format_byte_is_named():
    with pytest.raises(CorruptBody, match="0x07"):
        decode_body(b"\x07{}")
    with pytest.raises(CorruptBody):
        body_format(b"\x07{}")
    assert body_format(bytes([FORMAT_MSGPACK]) + b"\x80") == "msgpack"
