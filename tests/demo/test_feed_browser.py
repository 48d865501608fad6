"""The demo feed in a real browser: Playwright driving Debian's headless Chromium against the live
server. A visitor signs up, posts an entry, sees it on their page and on the public feed, likes
and comments on it (each confirmed by a message), finds the live-index message, and pages to the
older entries and back with "Newer". Screenshots go to ``test-artifacts/``.

Chromium comes from Debian (``scripts/browser-deps.sh``), never from ``playwright install``.
Off CI a machine without it skips this test; in CI it fails.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command

from project.feed.models import LINK_INDEX_NAME, Entry, Like, User
from schemaless_store.config.indexes import registry
from tests.support import STORE
from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser

pytestmark = [STORE, pytest.mark.browser]

# How many lines each element's text takes.
LINES_OF_TEXT = """
elements => elements.map(e => {
  const range = document.createRange();
  range.selectNodeContents(e);
  return new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top))).size;
})
"""
TITLE = "Sharding MySQL the FriendFeed way <3"
LINK = "https://backchannel.org/blog/friendfeed-schemaless-mysql"


def test_a_visitor_signs_up_posts_and_sees_the_entry_on_their_page(live_server, feed_site):
    require_browser()
    from playwright.sync_api import expect, sync_playwright

    # Everything that touches the database happens outside Playwright's block: its sync API runs
    # an event loop in this thread, and Django refuses ORM calls from such a thread.
    call_command("seed", "--users", "6", "--entries", "30", "--seed", "7", verbosity=0)
    live_index_declared = LINK_INDEX_NAME in registry
    ARTIFACTS.mkdir(exist_ok=True)
    dialogs: list[str] = []

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

            page.goto(f"{live_server.url}/")
            expect(page.locator("h1")).to_have_text("Everyone's entries")
            expect(page.locator("article.entry")).to_have_count(20)
            page.click("header >> text=Sign up")

            page.fill("#id_username", "ada")
            page.fill("#id_email", "ada@example.com")
            page.fill("#id_name", "Ada Lovelace")
            page.click("button:has-text('Sign up')")
            expect(page.locator(".messages")).to_contain_text("Welcome, ada!")
            expect(page.locator("#viewer")).to_have_text("@ada")

            page.fill("#id_title", TITLE)
            page.fill("#id_link", LINK)
            page.click("#post-form button")
            expect(page.locator(".messages")).to_contain_text("Posted.")
            expect(page.locator("h1")).to_contain_text("Ada Lovelace")
            mine = page.locator("article.entry")
            expect(mine).to_have_count(1)
            expect(mine.locator(".title a")).to_have_text(TITLE)
            expect(mine.locator(".title a")).to_have_attribute("href", LINK)
            page.screenshot(path=str(ARTIFACTS / "feed-user-page.png"), full_page=True)

            mine.locator("button:has-text('Like')").click()
            expect(page.locator(".messages")).to_contain_text(f"You like “{TITLE}”.")
            expect(page.locator("article.entry button:has-text('Unlike')")).to_have_count(1)
            expect(page.locator("article.entry")).to_contain_text("1 like")

            page.click("header >> text=Everyone")
            first = page.locator("article.entry").first
            expect(first.locator(".title")).to_have_text(TITLE)  # newest first
            page.screenshot(path=str(ARTIFACTS / "feed-home.png"))

            first.locator("text=0 comments").click()
            page.fill("#id_body", "Indexes as tables of their own: still a good idea.")
            page.click("#comment-form button")
            expect(page.locator(".messages")).to_contain_text("Comment added.")
            expect(page.locator("h2:has-text('Comments') + .card")).to_contain_text(
                "still a good idea"
            )
            page.screenshot(path=str(ARTIFACTS / "feed-entry.png"), full_page=True)

            # A GET of the like URL (a link, a reload): the entry, nothing liked.
            entry_url = page.url
            page.goto(f"{entry_url}like/")
            assert page.url == entry_url
            expect(page.locator("article.entry")).to_contain_text("1 like")

            if live_index_declared:
                page.click("text=who else shared this?")
            else:
                # Not offered while the index cannot answer; opened directly, the page says
                # what to run.
                expect(page.locator("text=who else shared this?")).to_have_count(0)
                page.goto(f"{live_server.url}/shared/?link={LINK}")
                expect(page.locator("#index-missing")).to_contain_text(LINK_INDEX_NAME)
                page.screenshot(path=str(ARTIFACTS / "feed-live-index-missing.png"))

            page.click("header >> text=Everyone")
            # Wait for the list itself: read at once, the texts may come from the page the
            # click is leaving (the index-missing page has no entries).
            expect(page.locator("article.entry")).to_have_count(20)
            first_page = page.locator("article.entry .title").all_inner_texts()
            page.click("#older")
            expect(page.locator("article.entry")).to_have_count(11)  # 31 entries, 20 a page
            expect(page.locator("#older")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "feed-second-page.png"), full_page=True)
            page.click("#newer")  # back one page: the first
            expect(page.locator("article.entry")).to_have_count(20)
            assert page.locator("article.entry .title").all_inner_texts() == first_page
            expect(page.locator("#newer")).to_have_count(0)
        finally:
            browser.close()

    assert dialogs == [], "a property value ran as script"
    ada = User.named("ada")
    (entry,) = Entry.objects.filter(user=ada).order_by("published")
    assert entry["title"] == TITLE
    assert Like.objects.filter_index(entry_id=entry.id).order_by("created").count() == 1


def test_error_pages_look_like_the_site_and_the_admin(live_server, feed_site, admin_user):
    require_browser()
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            response = page.goto(f"{live_server.url}/no/such/page/")
            assert response.status == 404
            expect(page.locator("h1")).to_have_text("Page not found")
            expect(page.locator("header.site .brand")).to_have_text("Feed")
            page.screenshot(path=str(ARTIFACTS / "demo-404.png"))

            page.goto(f"{live_server.url}/admin/login/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "secret-pw")
            page.click("input[type=submit]")
            expect(page.locator("#site-name")).to_be_visible()
            response = page.goto(f"{live_server.url}/admin/schemaless_store/entity/add/")
            assert response.status == 403
            expect(page.locator("#content-main h2")).to_have_text("Forbidden")
            # The admin's stylesheet is applied: its header has the admin's colours.
            background = page.locator("#header").evaluate(
                "element => getComputedStyle(element).backgroundColor"
            )
            assert background not in ("rgba(0, 0, 0, 0)", "transparent")
            page.screenshot(path=str(ARTIFACTS / "admin-403.png"))
        finally:
            browser.close()


def test_the_users_list_and_the_post_form_at_390_px(live_server, feed_site):
    """A phone's width: each "Act as" button on one line; the post form's fields labelled,
    the required ones marked, and the server's messages under the field they name."""
    require_browser()
    from playwright.sync_api import expect, sync_playwright

    call_command("seed", "--users", "8", "--entries", "4", "--seed", "3", verbosity=0)
    # A long display name: it wraps, the button beside it does not.
    User.objects.create(
        username="longname", email="long@example.com", name="Maximiliana Wolfeschlegelsteinhausen"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 390, "height": 844})
            page.goto(f"{live_server.url}/users/")
            buttons = page.locator("table.users button:has-text('Act as')")
            expect(buttons).to_have_count(9)
            lines = buttons.evaluate_all(LINES_OF_TEXT)
            assert lines == [1] * 9, lines
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            page.screenshot(path=str(ARTIFACTS / "feed-users-390.png"), full_page=True)

            buttons.first.click()
            page.goto(f"{live_server.url}/")
            form = page.locator("#post-form")
            expect(form.locator("label[for=id_title]")).to_have_text("Title *")
            expect(form.locator("label[for=id_link]")).to_have_text("Link *")
            expect(form.locator(".required")).to_have_count(3)  # two marks and the legend
            # The server's check, as a browser without constraint validation posts it.
            form.evaluate("f => { f.noValidate = true; }")
            form.locator("button").click()
            form = page.locator("#post-form")
            title_error = form.locator("label[for=id_title] + .errorlist")
            link_error = form.locator("label[for=id_link] + .errorlist")
            expect(title_error).to_have_text("Give the entry a title.")
            expect(link_error).to_have_text("Give the link the entry shares.")
            page.screenshot(path=str(ARTIFACTS / "feed-post-errors-390.png"), full_page=True)
        finally:
            browser.close()
