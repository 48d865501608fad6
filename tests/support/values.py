"""A property of every supported type, equality that minds types (the codec's, the export's and
the admin's round trips), and hypothesis strategies for values: those the admin's JSON view
carries (``json_values``) and those an export line carries (``line_values``)."""

from __future__ import annotations

import datetime as dt
import math
import uuid

from hypothesis import strategies as st

EVERY_TYPE = {
    "str": "héllo wörld 🎉",
    "empty": "",
    "int": 42,
    "big": 2**63 - 1,
    "negative": -(2**63),
    "unsigned": 2**64 - 1,
    "float": 3.25,
    "inf": float("inf"),
    "true": True,
    "false": False,
    "none": None,
    "list": [1, "two", [3.0, None]],
    "dict": {"nested": {"deep": [b"\x00\xff"]}},
    "bytes": b"\x00\x01\xfe\xff",
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "utc": dt.datetime(2009, 2, 26, 12, 30, 46, 123456, tzinfo=dt.UTC),
    "offset": dt.datetime(2020, 1, 1, 8, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
}


def same(a, b) -> bool:
    """Equal, and of the same types all the way down (True is not 1, 1.0 is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dt.datetime):
        # Wall time and offset, not ==: PEP 495 makes a time in a repeated hour (a DST fold)
        # unequal to every datetime of another tzinfo, even at the same instant.
        return a.replace(tzinfo=None) == b.replace(tzinfo=None) and a.utcoffset() == b.utcoffset()
    return a == b


def deep_same(a, b) -> bool:
    """``same``, with NaN equal to NaN inside lists and dict values too."""
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, list):
        return (
            type(b) is list
            and len(a) == len(b)
            and all(deep_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(deep_same(a[k], b[k]) for k in a)
    return same(a, b)


# The admin's JSON view (tests/admin): no NaN, datetimes in UTC, dict keys are strings.
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(max_size=20),
    st.uuids(),
    st.datetimes(timezones=st.just(dt.UTC)),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)

# An export line (tests/backup): NaN and the infinities, any UTC offset, non-string dict keys.
offsets = st.integers(-14 * 3600, 14 * 3600).map(
    lambda seconds: dt.timezone(dt.timedelta(seconds=seconds))
)
line_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()  # NaN and the infinities included
    | st.text()
    | st.binary()
    | st.uuids()
    | st.datetimes(timezones=offsets)
)
line_keys = st.text() | st.integers(-(2**63), 2**63 - 1) | st.binary(max_size=4) | st.none()
line_values = st.recursive(
    line_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.dictionaries(line_keys, inner, max_size=3)
    ),
    max_leaves=12,
)
