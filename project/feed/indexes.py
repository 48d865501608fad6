"""The feed's indexes.

Indexes are global: an index covers *every* entity that has all of its properties, whichever app
wrote it. So every feed entity carries a ``kind`` (``user``, ``entry``, ``like``, ``comment``),
every feed index starts with ``kind``, and every feed query pins it: a like never turns up on a
user's page because it happens to have a ``user_id``, and another app's entities (which have no
``kind``) never get rows here. Timestamps are ints (microseconds since the epoch) in ``int``
columns, so newest-first is exact.

One index is *live*: ``index_feed_link`` ("who else shared this link") is not declared until the
environment says so, to show how an index is added to a running store (docs/demo.md)::

    FEED_LIVE_INDEXES=link bash scripts/demo.sh     # declare it: migrateall creates its tables
    FEED_LIVE_INDEXES=link .venv/bin/python manage.py runcleaner --index=index_feed_link --once
"""

from __future__ import annotations

import os

from schemaless_store import Index

# A user's entries, newest first: all on the shard of the user's id, so one shard answers.
user_entries = Index(
    table="index_feed_user_published",
    properties=["kind", "user_id", "published"],
    shard_on="user_id",
    types={"published": "int"},
)

# The public feed: rows spread over the shards by time, read back by scatter-gather.
public_entries = Index(
    table="index_feed_published",
    properties=["kind", "published"],
    shard_on="published",
    types={"published": "int"},
)

# Sign-up: the store refuses a second user with the same username or email (UniqueViolation).
usernames = Index(
    table="index_feed_username", properties=["kind", "username"], shard_on="username", unique=True
)
emails = Index(
    table="index_feed_email", properties=["kind", "email"], shard_on="email", unique=True
)

# Likes and comments of an entry (kind "like" or "comment"), oldest first, on the entry's shard.
entry_activity = Index(
    table="index_feed_entry",
    properties=["kind", "entry_id", "created"],
    shard_on="entry_id",
    types={"created": "int"},
)

LINK_INDEX_NAME = "index_feed_link"


def make_link_index() -> Index:
    """The live index: entries by link, first sharer first ("who else shared this link")."""
    return Index(
        table=LINK_INDEX_NAME,
        properties=["kind", "link", "published"],
        shard_on="link",
        types={"published": "int"},
    )


def live_indexes_requested() -> set[str]:
    """Names listed in ``FEED_LIVE_INDEXES`` (comma-separated; only ``link`` exists)."""
    raw = os.environ.get("FEED_LIVE_INDEXES", "")
    return {name.strip().lower() for name in raw.split(",") if name.strip()}


# Only module-level Index objects are declarations: the live one exists here only when asked for.
if "link" in live_indexes_requested():
    shared_links = make_link_index()
