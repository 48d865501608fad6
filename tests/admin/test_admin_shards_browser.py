"""The "Shards and buckets" page in a real browser (Playwright, Debian's headless Chromium):
it leaves Django's own chrome as every other admin page has it, and shows a move the way an
operator asks about it. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from schemaless_store.topology import shards
from tests.support import STORE, buckets
from tests.support.browser import ARTIFACTS, admin_page, require_browser
from tests.support.factories import PostFactory

pytestmark = [STORE, pytest.mark.browser]

SHARDS_PAGE = "/admin/schemaless_store/bucketmove/"
ENTITY_LIST = "/admin/schemaless_store/entity/"

# Django's chrome: the page's box, the header and its links, the breadcrumbs, the sidebar and
# one of its links that is the current page on neither page (auth's users), the footer.
CHROME = [
    "body",
    "#container",
    "#header",
    "#site-name a",
    "#user-tools",
    "#user-tools a",
    ".breadcrumbs",  # a nav or div (Django 5.2), an ol inside a nav (6.x)
    ".breadcrumbs a",
    "#nav-sidebar",
    "#nav-sidebar a[href$='/auth/user/']",
    "#nav-sidebar caption a",
    "#toggle-nav-sidebar",
    "#nav-filter",
]
# Boxes as tall as the page's content, which differs.
FOLLOW_THE_CONTENT = {"body", "#container", "#nav-sidebar", "#toggle-nav-sidebar"}
PROPERTIES = [
    "display",
    "flex-direction",
    "flex-wrap",
    "gap",
    "position",
    "margin",
    "padding",
    "border",
    "border-radius",
    "background-color",
    "color",
    "font-family",
    "font-size",
    "font-weight",
    "line-height",
    "text-decoration-line",
    "width",
    "height",
]
COMPUTED = """
([selectors, properties]) => Object.fromEntries(selectors.map(selector => {
  const element = document.querySelector(selector);
  if (!element) return [selector, null];
  const style = getComputedStyle(element);
  return [selector, Object.fromEntries(properties.map(p => [p, style.getPropertyValue(p)]))];
}))
"""


def test_the_shards_page_leaves_djangos_chrome_as_the_entity_list_has_it(live_server, admin_user):
    require_browser()
    with buckets.restored_afterwards():
        PostFactory.create_batch(40)
        target = shards.shard_aliases()[1]
        call_command("movebuckets", "--to", target, "--buckets", "0-99", stdout=io.StringIO())
        ARTIFACTS.mkdir(exist_ok=True)
        with admin_page(live_server, 1280) as page:
            page.goto(f"{live_server.url}{ENTITY_LIST}")
            entity_list = page.evaluate(COMPUTED, [CHROME, PROPERTIES])
            page.goto(f"{live_server.url}{SHARDS_PAGE}")
            page.screenshot(path=str(ARTIFACTS / "admin-shards-1280.png"), full_page=True)
            shards_page = page.evaluate(COMPUTED, [CHROME, PROPERTIES])
            text = page.inner_text("body")

            past = page.locator("#past-moves tbody tr").first
            cells = past.locator(":scope > td").all_inner_texts()
            toggle = past.locator("details.sls-rows")
            summary = toggle.locator("summary").inner_text()
            toggle.locator("summary").click()
            per_table = toggle.locator("tr").all_inner_texts()

    assert "{#" not in text and "{%" not in text  # no template comment shown as text
    missing = [s for s in CHROME if entity_list[s] is None or shards_page[s] is None]
    assert missing == [], missing
    differences = {
        (selector, name): (entity_list[selector][name], shards_page[selector][name])
        for selector in CHROME
        for name in PROPERTIES
        if entity_list[selector][name] != shards_page[selector][name]
        and not (selector in FOLLOW_THE_CONTENT and name == "height")
    }
    assert differences == {}, differences

    # The move as an operator reads it: buckets as a range, a date, a duration to the
    # second, the writes' pause, verified yes/no, rows per table behind a toggle.
    _number, moved, to, source, result, ran, took, paused, verified, _rows = cells
    assert (moved, to, result, verified) == ("0-99", target, "done", "yes")
    assert source.endswith("(0-99)")
    assert len(ran) == 19 and ran[4] == "-" and ran[13] == ":", ran
    assert took.endswith(" s") and "minute" not in took, took
    assert paused.endswith(" ms") or paused.endswith(" s"), paused
    assert summary.endswith(" rows") or summary.endswith(" row"), summary
    assert per_table[0].split("\t")[0] == "entities", per_table
    assert sum(int(row.split("\t")[1]) for row in per_table) == int(summary.split()[0])
