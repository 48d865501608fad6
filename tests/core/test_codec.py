from __future__ import annotations

import datetime as dt
import math
import zoneinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemaless_store.exceptions import CorruptBody, SchemalessError, UnsupportedValue
from schemaless_store.values.codec import (
    FORMAT_MSGPACK,
    FORMAT_MSGPACK_ZLIB,
    MAX_NESTING,
    MsgpackCodec,
    decode_body,
)
from tests.support.values import EVERY_TYPE, same

codec = MsgpackCodec()


def test_every_supported_type_round_trips_exactly():
    assert same(codec.decode(codec.encode(EVERY_TYPE)), EVERY_TYPE)


def test_zoneinfo_datetime_comes_back_with_the_same_offset():
    value = dt.datetime(2021, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    back = codec.decode(codec.encode({"t": value}))["t"]
    assert back == value and back.utcoffset() == value.utcoffset()


@pytest.mark.parametrize("fold", [0, 1])
def test_a_time_in_a_repeated_hour_keeps_its_instant_and_offset(fold):
    # 01:30 happened twice in New York on 2017-11-05: at -04:00 (fold 0), then at -05:00.
    value = dt.datetime(2017, 11, 5, 1, 30, tzinfo=zoneinfo.ZoneInfo("America/New_York"), fold=fold)
    back = codec.decode(codec.encode({"t": value}))["t"]
    assert back.utcoffset() == value.utcoffset() == dt.timedelta(hours=-4 - fold)
    assert back.timestamp() == value.timestamp()
    assert same(back, value)
    assert back != value  # Python's own ==, across tzinfos, in a fold (PEP 495)


def test_nan_round_trips():
    assert math.isnan(codec.decode(codec.encode({"x": float("nan")}))["x"])


def test_large_bodies_are_compressed_small_ones_are_not():
    small = codec.encode({"a": 1})
    large = codec.encode({"text": "spam " * 1000})
    assert small[0] == FORMAT_MSGPACK
    assert large[0] == FORMAT_MSGPACK_ZLIB
    assert len(large) < 500


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        (1, 2),
        frozenset(),
        object(),
        dt.datetime(2020, 1, 1),  # naive
        dt.date(2020, 1, 1),
        bytearray(b"x"),
        memoryview(b"x"),
        [[bytearray()]],
        2**64,
        -(2**63) - 1,
        1 + 2j,
    ],
    ids=repr,
)
def test_unsupported_values_raise_the_documented_error(value):
    with pytest.raises(UnsupportedValue) as info:
        codec.encode({"x": value})
    assert isinstance(info.value, SchemalessError)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x07abc",
        bytes([FORMAT_MSGPACK]) + b"\xc1",
        bytes([FORMAT_MSGPACK_ZLIB]) + b"nope",
        bytes([FORMAT_MSGPACK]) + b"\x93\x01\x02\x03",
    ],
    ids=["empty", "unknown-format", "bad-msgpack", "bad-zlib", "not-a-dict"],
)
def test_corrupt_bodies_raise_corrupt_body(body):
    with pytest.raises(CorruptBody):
        decode_body(body)


def test_truncated_body_raises_corrupt_body():
    body = codec.encode(EVERY_TYPE)
    with pytest.raises(CorruptBody):
        decode_body(body[: len(body) // 2])


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.uuids()
    | st.datetimes(timezones=st.just(dt.UTC))
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
)


@given(st.dictionaries(st.text(), values, max_size=6))
def test_any_supported_bag_round_trips(bag):
    assert same(codec.decode(codec.encode(bag)), bag)


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))),  # UTC: year 0
        dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(dt.timedelta(hours=-2))),  # UTC: 10000
        dt.datetime(2020, 5, 1, 3, 4, 5, 6, tzinfo=dt.timezone(-dt.timedelta(hours=3, seconds=7))),
    ],
    ids=["min-east", "max-west", "offset-with-seconds"],
)
def test_datetimes_whose_utc_instant_is_out_of_range_still_round_trip(value):
    back = codec.decode(codec.encode({"t": value}))["t"]
    assert same(back, value)


def test_an_offset_with_microseconds_is_refused_rather_than_rounded():
    value = dt.datetime(2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(microseconds=5)))
    with pytest.raises(UnsupportedValue, match="whole number of seconds"):
        codec.encode({"t": value})


def nested(depth: int, leaf=1):
    """``depth`` levels of alternating lists and dicts around ``leaf``."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_nesting_up_to_max_nesting_round_trips_one_more_level_is_refused():
    bag = {"deep": nested(MAX_NESTING), "flat": 1}
    assert same(codec.decode(codec.encode(bag)), bag)
    with pytest.raises(UnsupportedValue, match=f"more than {MAX_NESTING} levels"):
        codec.encode({"deep": nested(MAX_NESTING + 1), "flat": 1})


def test_a_list_that_contains_itself_is_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(UnsupportedValue):
        codec.encode({"loop": loop})
