"""The admin's lists at the widths people use (1280 and 1920 px), in a real browser: Playwright
driving Debian's headless Chromium against the live server, on the demo's seeded data.

The entity list's properties preview must be readable (wide enough to show several properties
whole, wrapping rather than cut sideways), no column header may overflow its cell, and the
cleaner passes list must fit: neither the page nor the table's own box scrolls sideways, no cell
is clipped, the filters sit beside or above the list. Screenshots go to ``test-artifacts/`` for
a person to look at.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from schemaless_store.models import CleanerPass
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.browser import ARTIFACTS, admin_page, require_browser, seed_demo

pytestmark = [STORE, pytest.mark.browser]

WIDTHS = [1280, 1920]

# Each header's label must fit its cell: the label's own box is no wider than the cell's
# content box (a label that does not fit spills out or is cut).
HEADER_OVERFLOWS = """
table => Array.from(table.querySelectorAll('thead th')).flatMap(th => {
  const label = th.querySelector('.text') || th;
  const cell = th.getBoundingClientRect();
  const spill = Math.max(label.scrollWidth - label.clientWidth, 0);
  const right = label.getBoundingClientRect().left + label.scrollWidth;
  return (spill > 1 || right > cell.right + 1)
    ? [th.textContent.trim() + ' needs ' + label.scrollWidth + 'px in ' + Math.round(cell.width)]
    : [];
})
"""

# Every cell whose content is wider than the cell (cut off, or spilling into the next column).
CLIPPED_CELLS = """
table => Array.from(table.querySelectorAll('tbody td, tbody th'))
  .filter(c => c.scrollWidth > c.clientWidth + 1)
  .map(c => c.className + ': ' + c.textContent.trim())
"""

# What a reader sees of each preview: how many properties are shown whole (not cut by its
# three lines), and whether anything spills sideways.
VISIBLE_PROPERTIES = """
cells => cells.map(c => {
  const box = c.querySelector('.sls-preview');
  const bottom = box.getBoundingClientRect().bottom + 1;
  const props = Array.from(box.querySelectorAll('.sls-prop'));
  const rects = props.map(p => Array.from(p.getClientRects()));
  const lineHeight = parseFloat(getComputedStyle(box).lineHeight);
  return {
    text: box.innerText,
    cut: c.scrollWidth > c.clientWidth + 1 || box.scrollWidth > box.clientWidth + 1,
    whole: rects.filter(r => r.length && r[r.length - 1].bottom <= bottom).length,
    lines: box.getBoundingClientRect().height / lineHeight,
  };
})
"""
# The preview column's least width, and how many properties every row shows whole, by window.
PREVIEW_WIDTH = {1280: 350, 1920: 900}
WHOLE_PROPERTIES = {1280: 3, 1920: 4}


@pytest.mark.parametrize("width", WIDTHS)
def test_entity_list_shows_several_properties_and_no_header_overflows(
    live_server, admin_user, width
):
    require_browser()
    from playwright.sync_api import expect

    seed_demo()
    ARTIFACTS.mkdir(exist_ok=True)
    with admin_page(live_server, width) as page:
        page.goto(f"{live_server.url}/admin/schemaless_store/entity/")
        table = page.locator("#result_list")
        expect(table.locator("tbody tr").first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / f"admin-entities-{width}.png"))
        page.screenshot(path=str(ARTIFACTS / f"admin-entities-{width}-full.png"), full_page=True)

        assert table.evaluate(HEADER_OVERFLOWS) == []
        previews = table.locator("td.field-preview")
        assert previews.count() >= 20
        widths = previews.evaluate_all("cells => cells.map(c => c.getBoundingClientRect().width)")
        assert min(widths) >= PREVIEW_WIDTH[width], widths
        for cell in previews.evaluate_all(VISIBLE_PROPERTIES):
            assert not cell["cut"], cell  # nothing spills sideways: long values wrap
            assert cell["whole"] >= WHOLE_PROPERTIES[width], cell  # several properties, whole
            assert cell["text"].startswith("kind: "), cell
            assert cell["lines"] <= 3.2, cell  # and a row stays at most three lines high
        # The page itself never scrolls sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_cleaner_passes_list_fits_the_window(live_server, admin_user, width):
    require_browser()
    from playwright.sync_api import expect

    aliases = shards.shard_aliases()
    now = timezone.now()
    for n, (index, kind, status) in enumerate(
        [
            ("index_feed_user_published", "backfill", "done"),
            ("index_feed_published", "repair", "failed"),
            ("index_feed_username", "sweep", "done"),
            ("index_feed_entry", "repair", "interrupted"),
            ("index_user_published", "backfill", "running"),
        ]
    ):
        record = CleanerPass.objects.create(
            index_name=index,
            shard=aliases[n % len(aliases)],
            kind=kind,
            status=status,
            finished=None if status == "running" else now + dt.timedelta(seconds=3 + 97 * n),
            entities_scanned=1_234_567 * (n + 1),
            rows_inserted=98_765 * n,
            stale_removed=4_321 * n,
            orphans_removed=12 * n,
            errors=n if status == "failed" else 0,
            message="lost connection to the shard during batch 7" if status == "failed" else "",
        )
        CleanerPass.objects.filter(pk=record.pk).update(started=now)
    ARTIFACTS.mkdir(exist_ok=True)
    with admin_page(live_server, width) as page:
        page.goto(f"{live_server.url}/admin/schemaless_store/cleanerpass/")
        table = page.locator("#result_list")
        expect(table.locator("tbody tr")).to_have_count(5)
        page.screenshot(path=str(ARTIFACTS / f"admin-cleaner-passes-{width}.png"), full_page=True)

        assert table.evaluate(HEADER_OVERFLOWS) == []
        assert table.evaluate(CLIPPED_CELLS) == []
        # Every column fits: neither the page nor the table's own box scrolls sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        box = table.evaluate(
            "t => ({right: t.getBoundingClientRect().right,"
            " container: t.parentElement.getBoundingClientRect().right,"
            " scroll: t.parentElement.scrollWidth, client: t.parentElement.clientWidth})"
        )
        assert box["scroll"] <= box["client"] and box["right"] <= box["container"] + 1, box
        assert box["container"] <= width, box
        # The filters are beside the list (wide windows) or above it, never over it.
        filters = page.locator("#changelist-filter").bounding_box()
        results = table.bounding_box()
        assert filters is not None and results is not None
        beside = filters["x"] >= results["x"] + results["width"] - 1
        above = filters["y"] + filters["height"] <= results["y"] + 1
        assert beside or above, (filters, results)
        spills = page.locator("#changelist-filter").evaluate(
            "f => Array.from(f.children).filter(c => c.getBoundingClientRect().right >"
            " f.getBoundingClientRect().right + 1).map(c => c.tagName + ' ' + c.textContent.trim())"
        )
        assert spills == []
        expect(table).to_contain_text("index_feed_user_published")
