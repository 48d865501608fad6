"""A property of every supported type, and equality that minds types (the codec's, the
export's and the admin's round trips)."""

from __future__ import annotations

import datetime as dt
import math
import uuid

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
