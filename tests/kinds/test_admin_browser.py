"""A kind's admin in a real browser (Playwright driving Debian's headless Chromium; issue 44,
item 4): filter from the sidebar, sort by a header, search, run "Delete selected" through its
confirmation page, choose a reference in the raw-id lookup popup, and see a value too long for
its index as the field's error. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import contextlib
import datetime as dt

import pytest

from tests.facesapp.models import Critique, Novel
from tests.support import STORE
from tests.support.browser import ARTIFACTS, admin_page, require_browser

pytestmark = [STORE, pytest.mark.browser]

LIST = "/admin/facesapp/novel/"


def novels() -> list[Novel]:
    specs = [("Dune", "sf"), ("Maigret", "crime"), ("Solaris", "sf"), ("Dust", "crime")]
    return [
        Novel.objects.create(
            title=title,
            genre=genre,
            isbn=str(n),
            published=dt.datetime(2020, 1, n + 1, tzinfo=dt.UTC),
        )
        for n, (title, genre) in enumerate(specs)
    ]


def shows(page, expected: list[str]) -> None:
    """The list shows these titles, in this order (waiting for the page to load)."""
    from playwright.sync_api import expect

    expect(page.locator("#result_list tbody th a")).to_have_text(expected)


def test_filter_sort_search_and_delete_selected(live_server, admin_user):
    require_browser()
    from playwright.sync_api import expect

    made = novels()
    ARTIFACTS.mkdir(exist_ok=True)
    with admin_page(live_server, 1280) as page:
        page.goto(f"{live_server.url}{LIST}")
        shows(page, ["Dust", "Solaris", "Maigret"])  # -published, 3 a page
        page.click("text=Next page")
        shows(page, ["Dune"])

        page.goto(f"{live_server.url}{LIST}")
        page.locator("#changelist-filter").get_by_role("link", name="Crime").click()
        shows(page, ["Dust", "Maigret"])
        page.screenshot(path=str(ARTIFACTS / "kind-admin-list-filtered.png"))
        expect(page.locator("#changelist-filter li.selected")).to_contain_text(["Crime", "All"])

        page.goto(f"{live_server.url}{LIST}")
        page.locator("#result_list thead").get_by_role("link", name="Title").click()
        shows(page, ["Dune", "Dust", "Maigret"])
        page.locator("#result_list thead").get_by_role("link", name="Title").click()
        shows(page, ["Solaris", "Maigret", "Dust"])

        page.fill("#searchbar", "So")
        page.press("#searchbar", "Enter")
        page.wait_for_load_state()
        shows(page, ["Solaris"])

        page.goto(f"{live_server.url}{LIST}?genre__exact=sf")
        for box in page.locator("input.action-select").all():
            box.check()
        expect(page.locator(".action-counter")).to_have_text("2 of 2 selected")
        page.select_option("select[name=action]", "delete_selected")
        page.click("button[name=index]")
        expect(page.locator("#content")).to_contain_text("Are you sure")
        page.screenshot(path=str(ARTIFACTS / "kind-admin-delete-selected.png"))
        page.click("input[type=submit]")
        expect(page.locator(".messagelist")).to_contain_text("Successfully deleted 2 novels.")
    assert sorted(n.title for n in Novel.objects.all()) == ["Dust", "Maigret"]
    assert not Novel.objects.filter(pk__in=[made[0].id, made[2].id]).exists()


def test_a_reference_is_chosen_in_the_lookup_popup(live_server, admin_user):
    require_browser()
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect

    dune, emma = (Novel.objects.create(title=t, isbn=t) for t in ("Dune", "Emma"))
    critique = Critique.objects.create(novel=dune, text="great")
    with admin_page(live_server, 1280) as page:
        page.goto(f"{live_server.url}/admin/facesapp/critique/{critique.id}/change/")
        expect(page.locator("#id_novel")).to_have_value(str(dune.id))
        with page.expect_popup() as opened:
            page.click("#lookup_id_novel")
        popup = opened.value
        popup.wait_for_load_state()
        # The popup closes itself as the click chooses: its effect, the id in the box, is
        # checked next.
        with contextlib.suppress(PlaywrightError):
            popup.get_by_role("link", name="Emma").click()
        expect(page.locator("#id_novel")).to_have_value(str(emma.id))
        page.click("input[name=_save]")
        expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert Critique.objects.get(pk=critique.id).novel == emma


def test_a_value_too_long_for_its_index_is_shown_on_its_field(live_server, admin_user):
    require_browser()
    from playwright.sync_api import expect

    with admin_page(live_server, 1280) as page:
        page.goto(f"{live_server.url}{LIST}add/")
        page.fill("#id_title", "x" * 60)
        page.fill("#id_isbn", "1")
        page.click("input[name=_save]")
        error = page.locator(".field-title .errorlist")
        expect(error).to_contain_text("too long for the index")
        page.screenshot(path=str(ARTIFACTS / "kind-admin-index-too-long.png"))
    assert Novel.objects.count() == 0
