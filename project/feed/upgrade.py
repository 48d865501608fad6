"""The feed's data migration to real types (issue 44): entities stored before the kinds had
them, times as ints of microseconds since the epoch and an entry's author as ``user_id``,
brought to what the kinds declare now, an aware datetime and the ``user`` reference.

Run it once per kind with ``mapentities`` (docs/demo.md), after deploying the code that
declares the new fields; running it again changes nothing (a value already of the new type is
left as it is), and ``migrateall`` then ``runcleaner`` build the new index
``index_feed_entry_user`` for entries written before it::

    manage.py mapentities project.feed.upgrade.real_types --kind entry
    manage.py mapentities project.feed.upgrade.real_types --kind user
    manage.py mapentities project.feed.upgrade.real_types --kind like
    manage.py mapentities project.feed.upgrade.real_types --kind comment
"""

from __future__ import annotations

import datetime as dt
from typing import Any

# The properties that held times as ints of microseconds, by kind.
TIMES = {"user": "joined", "entry": "published", "like": "created", "comment": "created"}


def as_datetime(microseconds: int) -> dt.datetime:
    """Microseconds since the epoch as the aware datetime (UTC) they stand for, exactly."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=microseconds)


def real_types(entity: Any) -> None:
    """One entity of the feed's kinds, to the types its kind declares now (see the module
    docs); an entity already upgraded is left as it is."""
    time = TIMES.get(entity.get("kind"))
    value = entity.get(time) if time else None
    if isinstance(value, int) and not isinstance(value, bool):
        entity[time] = as_datetime(value)
    if entity.get("kind") == "entry" and "user_id" in entity:
        entity["user"] = entity.pop("user_id")
