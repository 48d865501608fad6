"""The health page's cache panel (docs/cache.md#the-counters): the entity cache's and the near
cache's counters of the process that serves the page, and that they move with its reads."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from schemaless_store.cache import entity_cache
from schemaless_store.models import Entity
from tests.cache.test_near_cache import held, near_on
from tests.support import STORE, buckets
from tests.support.admin import HEALTH, VIEW, client_for

pytestmark = STORE


def panel(client) -> str:
    page = client.get(HEALTH).content.decode()
    return page[page.index('id="entity-cache"') :]  # the page's last section


def count(panel_html: str, row: str) -> int:
    found = re.search(rf'<tr id="{row}">.*?<td class="sls-num">([\d,]+)</td>', panel_html, re.S)
    assert found, f"no {row} row in the cache panel"
    return int(found.group(1).replace(",", ""))


def test_the_panel_says_the_cache_is_off_without_one():
    with override_settings(SCHEMALESS={**settings.SCHEMALESS, "CACHE": None}):
        shown = panel(client_for(*VIEW))
    assert 'Off: <code>SCHEMALESS["CACHE"]</code> is not set' in shown
    assert "cache-hits" not in shown


def test_the_entity_caches_counters_appear_and_count_a_hit():
    locmem = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "panel"}
    with (
        override_settings(
            CACHES={**settings.CACHES, "entities": locmem},
            SCHEMALESS={**settings.SCHEMALESS, "CACHE": "entities"},
        ),
        buckets.restored_afterwards(),
    ):
        caches["entities"].clear()
        entity_cache.reset_stats()
        client = client_for(*VIEW)
        made = Entity.objects.create(n=1)
        Entity.objects.get(id=made.id)  # a miss, filled
        before = panel(client)
        assert count(before, "cache-misses") == 1 and count(before, "cache-hits") == 0
        assert "Near cache:</strong>" in before and ">off<" in before
        assert "near-refused" not in before  # no near cache, no row of its counters
        Entity.objects.get(id=made.id)
        after = panel(client)
        assert count(after, "cache-hits") == 1 and count(after, "cache-misses") == 1


def test_the_near_caches_counters_appear_and_count_a_hit():
    with near_on(DROP_TIMEOUT=2.0) as near:
        client = client_for(*VIEW)
        made = Entity.objects.create(n=1)
        held(made.id)  # read until this process's near cache holds a copy
        before = panel(client)
        assert count(before, "near-connections") >= 1 and count(before, "near-entries") >= 1
        for row in ("near-pushed", "near-refused", "near-flushes"):
            assert count(before, row) == getattr(near.stats, row.removeprefix("near-"))
        assert "live" in before
        Entity.objects.get(id=made.id)  # from memory
        after = panel(client)
        assert count(after, "cache-near_hits") == count(before, "cache-near_hits") + 1
        assert count(after, "cache-hits") == count(before, "cache-hits") + 1
