"""Which numbers in a body the admin may show as a date, beside the raw value (docs/admin.md).

The rule has two halves, and a value must meet both:

1. its property is **named like a time**: one of :data:`TIME_WORDS` (``published``, ``created``,
   ``joined``, ...), alone or with a suffix (``created_us``, ``joined_at``), or ending in
   ``_at``, ``_on``, ``_time``, ``_ts``, ``_date`` or ``_timestamp`` (or camelCase ``createdAt``,
   ``startTime``); and
2. it is **a plausible epoch time**: an int that, read as seconds, milliseconds, microseconds or
   nanoseconds since 1970-01-01 UTC, falls between 2000-01-01 and 2100-01-01 (the four ranges
   do not overlap, so the size of the number says the unit), or a float of seconds in that range.

A name alone is not enough (``published: 5`` is more likely a flag or a count than 1970), nor is
the size alone (a counter can reach 10**12). A ``{"$datetime": ...}`` value is a date already.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

TIME_WORDS = (
    "published",
    "created",
    "updated",
    "modified",
    "changed",
    "edited",
    "deleted",
    "joined",
    "started",
    "finished",
    "expires",
    "expired",
    "seen",
    "timestamp",
    "time",
    "date",
    "when",
)
_NAMED = re.compile(
    r"^(?:" + "|".join(TIME_WORDS) + r")(?:_\w+)?$|_(?:at|on|time|ts|date|timestamp)$",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"[a-z0-9](?:At|On|Time|Ts|Date|Timestamp)$")

EARLIEST = 946_684_800  # 2000-01-01 00:00:00 UTC, in seconds since the epoch
LATEST = 4_102_444_800  # 2100-01-01 00:00:00 UTC
UNITS = ((1, "seconds"), (10**3, "milliseconds"), (10**6, "microseconds"), (10**9, "nanoseconds"))
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def is_time_name(name: Any) -> bool:
    return isinstance(name, str) and bool(_NAMED.search(name) or _CAMEL.search(name))


def epoch_date(value: Any) -> tuple[str, str] | None:
    """``(date and time in UTC, unit)`` for a plausible epoch time (see the module), or None.
    Exact: an int's fraction of a second is shown to its unit's digits, never rounded."""
    if type(value) is int:
        for scale, unit in UNITS:
            if EARLIEST * scale <= value < LATEST * scale:
                seconds, fraction = divmod(value, scale)
                text = (EPOCH + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
                if scale > 1:
                    text += "." + str(fraction).zfill(len(str(scale)) - 1)
                return f"{text} UTC", unit
        return None
    if type(value) is float and math.isfinite(value) and EARLIEST <= value < LATEST:
        when = dt.datetime.fromtimestamp(value, dt.UTC)
        text = when.strftime("%Y-%m-%d %H:%M:%S")
        if when.microsecond:
            text += "." + f"{when.microsecond:06d}".rstrip("0")
        return f"{text} UTC", "seconds"
    return None


def time_note(name: Any, value: Any) -> tuple[str, str] | None:
    """The date a property's value stands for, if both halves of the rule hold, else None."""
    return epoch_date(value) if is_time_name(name) else None
