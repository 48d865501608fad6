"""The admin's search and its explanation in a real browser at 1280 px (Playwright driving
Debian's headless Chromium), on the demo's seeded data: a search that no index serves is refused
with the explanation opened beside it (which indexes were close, why each was rejected, and what
would serve it); a search that an index answers shows its results and, under "How this search
runs", the index, the shards and the order. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import pytest

from schemaless_store.models import Entity
from tests.support import STORE
from tests.support.browser import ARTIFACTS, admin_page, require_browser, seed_demo

pytestmark = [STORE, pytest.mark.browser]

LIST = "/admin/schemaless_store/entity/"

# The explanation is inside the page: neither the page nor its box scrolls sideways.
FITS = """
box => ({page: document.documentElement.scrollWidth,
         right: box.getBoundingClientRect().right,
         scroll: box.scrollWidth, client: box.clientWidth})
"""


def search(page, text: str) -> None:
    """Type a search into the box and press Enter, as a person does."""
    page.fill("#searchbar", text)
    page.press("#searchbar", "Enter")
    page.wait_for_load_state()


def test_a_search_no_index_serves_is_refused_and_explained(live_server, admin_user):
    require_browser()
    from playwright.sync_api import expect

    seed_demo()
    ARTIFACTS.mkdir(exist_ok=True)
    with admin_page(live_server, 1280) as page:
        page.goto(f"{live_server.url}{LIST}")
        search(page, "published__gte=0")

        refusal = page.locator("#content-main .errornote")
        expect(refusal).to_have_count(1)
        expect(refusal).to_contain_text(
            "Search refused: no index serves filter_index(published__gte=0)"
        )
        # Nothing listed, and not as if the search had run and found nothing.
        results = page.locator("#result_list tbody")
        expect(results).to_have_text(
            "Nothing to list: the search did not run (the message above says why)."
        )
        expect(results).not_to_contain_text("No entities match")
        explain = page.locator("details.sls-explain")
        expect(explain).to_have_attribute("open", "")  # opened by itself beside the refusal
        expect(explain.locator("summary")).to_have_text("How this search runs (explain)")
        text = explain.locator("pre")
        expect(text).to_be_visible()
        # Each close index and why it was rejected...
        expect(text).to_contain_text(
            "index_user_published (user_id, published; shard_on user_id) [ready]: also requires"
        )
        expect(text).to_contain_text("`user_id`")
        expect(text).to_contain_text(
            "index_feed_published (published; shard_on published; kind entry)"
        )
        # ... and a declaration that would serve the search.
        expect(text).to_contain_text("properties=['published'], shard_on='published'")
        box = text.evaluate(FITS)
        assert box["page"] <= 1280 and box["right"] <= 1280, box
        assert box["scroll"] <= box["client"] + 1, box  # long lines wrap, none is cut
        text.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "admin-search-refused.png"), full_page=True)


def test_a_search_an_index_answers_shows_how_it_runs(live_server, admin_user):
    require_browser()
    from playwright.sync_api import expect

    seed_demo()
    entries = sorted(
        (e for e in Entity.objects.all() if e.get("kind") == "entry"),
        key=lambda e: e["published"],
        reverse=True,
    )
    newest = [str(e.id) for e in entries[:100]]
    ARTIFACTS.mkdir(exist_ok=True)
    with admin_page(live_server, 1280) as page:
        page.goto(f"{live_server.url}{LIST}")
        search(page, 'kind="entry" & order_by=-published')

        expect(page.locator("#content-main .errornote")).to_have_count(0)
        expect(page.locator(".sls-meta")).to_contain_text(
            "Found through index index_feed_published, in its order."
        )
        ids = page.locator("#result_list tbody th.field-id a").all_inner_texts()
        assert ids == newest  # every entry, newest first, from the index
        explain = page.locator("details.sls-explain")
        expect(explain).not_to_have_attribute("open", "")  # closed: the answer comes first
        explain.locator("summary", has_text="How this search runs").click()
        text = explain.locator("pre")
        expect(text).to_be_visible()
        expect(text).to_contain_text("Index: index_feed_published (published; shard_on published;")
        expect(text).to_contain_text("published")
        box = text.evaluate(FITS)
        assert box["page"] <= 1280 and box["right"] <= 1280, box
        assert box["scroll"] <= box["client"] + 1, box
        page.screenshot(path=str(ARTIFACTS / "admin-search-explained.png"), full_page=True)
        page.screenshot(path=str(ARTIFACTS / "admin-search-explained-top.png"))
