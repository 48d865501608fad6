"""Fixtures of the demo feed's tests: its pages five entries long, and its live index
(``index_feed_link``) undeclared as shipped or declared and building."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from project.feed.models import LINK_INDEX_NAME, Entry, User, make_link_index
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.tables import lifecycle
from schemaless_store.tables.ddl import create_tables, drop_table
from schemaless_store.topology import shards
from tests.support.feed import SHARED


@pytest.fixture
def feed_pages(feed_site: None, settings: Any) -> None:
    """The demo site (``feed_site``), five entries a page."""
    settings.FEED_PAGE_SIZE = 5


@pytest.fixture
def undeclared() -> Iterator[None]:
    """index_feed_link as shipped: not declared."""
    if LINK_INDEX_NAME in registry:
        pytest.skip(
            "FEED_LIVE_INDEXES declares index_feed_link here; these tests need it undeclared"
        )
    yield
    lifecycle.forget_states()


@pytest.fixture
def sharers() -> list[Entity]:
    people = [
        User.objects.create(username=f"sharer{n}", email=f"s{n}@example.com") for n in range(3)
    ]
    posted = [
        Entry.objects.create(user=p, title=f"Look {n}", link=SHARED) for n, p in enumerate(people)
    ]
    Entry.objects.create(user=people[0], title="Something else", link="https://example.com/other")
    return posted


@pytest.fixture
def declared_live(undeclared) -> Iterator[None]:
    """``FEED_LIVE_INDEXES=link`` and ``migrateall`` on a store that has entries: the index is
    declared, its tables exist, and it is building."""
    index = make_link_index()
    registry.register(index, module="project.feed.models")
    try:
        for alias in shards.shard_aliases():
            create_tables(alias, [index])
        lifecycle.sync_states()
        yield
    finally:
        registry.unregister(LINK_INDEX_NAME)
        for alias in shards.shard_aliases():
            drop_table(alias, LINK_INDEX_NAME)
        lifecycle.sync_states()  # retired: gone from the registry
        lifecycle.forget_states()
