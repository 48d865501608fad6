"""The feed's live index. The feed's other indexes are declared on its kinds
(:mod:`.models`, ``Meta.indexes``), each pinned to its kind.

One index is *live*: ``index_feed_link`` ("who else shared this link") is not declared until the
environment says so, to show how an index is added to a running store (docs/demo.md)::

    FEED_LIVE_INDEXES=link bash scripts/demo.sh     # declare it: migrateall creates its tables
    FEED_LIVE_INDEXES=link .venv/bin/python manage.py runcleaner --index=index_feed_link --once
"""

from __future__ import annotations

import os

from schemaless_store import Index

LINK_INDEX_NAME = "index_feed_link"


def make_link_index() -> Index:
    """The live index: entries by link, first sharer first ("who else shared this link")."""
    return Index(
        table=LINK_INDEX_NAME,
        properties=["link", "published"],
        shard_on="link",
        types={"published": "int"},
        kind="entry",
    )


def live_indexes_requested() -> set[str]:
    """Names listed in ``FEED_LIVE_INDEXES`` (comma-separated; only ``link`` exists)."""
    raw = os.environ.get("FEED_LIVE_INDEXES", "")
    return {name.strip().lower() for name in raw.split(",") if name.strip()}
