"""Ids of other entities link to their admin pages, and time-like numbers show their date, on an
entity's page and in the list's preview; the edit box's JSON stays exactly the JSON view. Through
Django's test client, and in a real browser (Playwright + Debian's Chromium, screenshots in
``test-artifacts/``)."""

from __future__ import annotations

import html
import re
import uuid

import pytest

from schemaless_store.models import Entity
from schemaless_store.values import jsonview
from tests.support import STORE
from tests.support.admin import CHANGE_PERMS, LIST, VIEW, change_url, client_for, textarea
from tests.support.browser import ARTIFACTS, admin_page, require_browser

pytestmark = STORE

PUBLISHED = 1_700_000_000_123_456  # microseconds: 2023-11-14 22:13:20.123456 UTC


def make_pair():
    author = Entity.objects.create(kind="user", username="ada", joined=1_600_000_000)
    missing = uuid.uuid4()
    entry = Entity.objects.create(
        kind="entry",
        user_id=author.id,
        title="Hello",
        created=PUBLISHED,  # not "published": the demo indexes that one as a datetime
        mentions=[missing, author.id],
        count=1_700_000_000,  # the size of a time, not named like one: no date
    )
    return author, entry, missing


def body_block(page: str) -> str:
    match = re.search(r'<pre class="sls-json" id="body-json">(.*?)</pre>', page, re.DOTALL)
    assert match, "no body view on the page"
    return match.group(1)


def test_the_entity_page_links_ids_and_dates_times():
    author, entry, missing = make_pair()
    client = client_for(*CHANGE_PERMS)
    response = client.get(change_url(entry))
    page = response.content.decode()
    block = body_block(page)
    href = f'href="{change_url(author)}"'
    assert block.count(f'<a class="sls-ref" {href}') == 2  # user_id, and in mentions
    assert str(missing) in block and f"{LIST}{missing}/" not in block  # no such entity: text
    assert 'data-when="2023-11-14 22:13:20.123456 UTC"' in block
    assert block.count("sls-when") == 1  # count is not named like a time
    # The view reads as the JSON view, and the edit box holds exactly that JSON.
    plain = html.unescape(re.sub(r"<[^>]+>", "", block))
    assert plain == jsonview.dumps(entry.body_properties()) == textarea(response)
    # The link leads to the author's page, whose own time shows its date too.
    author_page = client.get(change_url(author)).content.decode()
    assert 'data-when="2020-09-13 12:26:40 UTC"' in body_block(author_page)


def test_a_view_only_user_sees_the_same_links():
    author, entry, _missing = make_pair()
    page = client_for(*VIEW).get(change_url(entry)).content.decode()
    assert "<textarea" not in page
    assert f'<a class="sls-ref" href="{change_url(author)}"' in body_block(page)


def test_the_list_preview_links_ids_and_titles_times():
    author, entry, missing = make_pair()
    page = client_for(*VIEW).get(LIST).content.decode()
    row = re.search(
        rf'<tr>\s*<th class="field-id[^>]*><a href="{change_url(entry)}">.*?</tr>', page, re.DOTALL
    )
    assert row, "the entry is not listed"
    preview = row.group(0)
    assert f'<a class="sls-ref" href="{change_url(author)}"' in preview
    # The list does not look ids up: an unknown one links too (its page says there is none).
    assert f'href="{LIST}{missing}/change/"' in preview
    assert 'title="2023-11-14 22:13:20.123456 UTC (microseconds)"' in preview


@pytest.mark.browser
def test_in_a_browser_the_id_is_followed_and_the_date_is_not_copied(live_server, admin_user):
    require_browser()
    from playwright.sync_api import expect

    author, entry, _missing = make_pair()
    ARTIFACTS.mkdir(exist_ok=True)
    with admin_page(live_server, 1280) as page:
        page.goto(f"{live_server.url}{change_url(entry)}")
        view = page.locator("#body-json")
        note = view.locator(".sls-when").evaluate("e => getComputedStyle(e, '::after').content")
        assert "2023-11-14 22:13:20.123456 UTC" in note
        # What a reader copies is the JSON: the date is drawn, not part of the text.
        copied = view.evaluate("e => e.innerText")
        assert copied.strip() == jsonview.dumps(entry.body_properties())
        page.screenshot(path=str(ARTIFACTS / "admin-entity-links.png"), full_page=True)
        view.locator("a.sls-ref").first.click()
        expect(page.locator("h1")).to_have_text(f"Entity {author.id}")
        expect(page.locator("#body-json")).to_contain_text('"username": "ada"')
