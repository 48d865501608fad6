"""The admin in a real browser: Playwright driving Debian's headless Chromium against the live
server. Screenshots are kept in ``test-artifacts/`` for a person to look at.

Chromium comes from Debian (``scripts/browser-deps.sh``), never from ``playwright install``: the
machines cannot download browser builds. Off CI, a machine without it skips this test; in CI it
fails, so the browser test cannot silently stop running.
"""

from __future__ import annotations

import pytest

from schemaless_store.config.indexes import registry
from schemaless_store.models import CleanerCheckpoint, CleanerPass, Entity, IndexState
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser
from tests.support.factories import PostFactory

pytestmark = [STORE, pytest.mark.browser]


def test_operator_logs_in_reads_health_and_edits_an_entity(live_server, admin_user):
    require_browser()
    from playwright.sync_api import expect, sync_playwright

    # All database set-up happens before Playwright starts: its sync API runs an event loop in
    # this thread, and Django refuses ORM calls from a thread with a running loop.
    posts = [PostFactory.create() for _ in range(12)]
    entity = Entity.objects.create(
        **PostFactory(title="<script>alert('x')</script> & friends", tags=["a", "b"])
    )
    IndexState.objects.filter(name="index_tags").update(state="building")
    for n, shard in enumerate(shards.shard_aliases()[:2]):
        CleanerCheckpoint.objects.create(
            index_name="index_tags",
            shard=shard,
            last_added_id=40 + 30 * n,
            target_added_id=100,
            entities_done=40 + 30 * n,
            entities_total=100,
        )
    CleanerPass.objects.create(
        index_name="index_link",
        shard=shards.shard_aliases()[0],
        kind="repair",
        status="failed",
        entities_scanned=5000,
        rows_inserted=3,
        stale_removed=1,
        errors=2,
        message="lost connection to shard_1 during batch 7",
    )
    implied_rows = sum(len(i.rows_for(entity.body_properties())) for i in registry.valid())
    ARTIFACTS.mkdir(exist_ok=True)
    dialogs: list[str] = []

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 900})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "secret-pw")
            page.click("input[type=submit]")
            expect(page.locator("#site-name")).to_be_visible()
            page.click("text=Index states")  # the health page, linked from the admin index

            expect(page.locator("h1")).to_have_text("Index health")
            tags = page.locator("#index-index_tags")
            expect(tags.locator(".sls-badge").first).to_have_text("building")
            expect(tags.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "55")
            link = page.locator("#index-index_link")
            expect(link.locator(".sls-problems")).to_contain_text("failed with 2 errors")
            red = link.locator(".sls-problems li").first.evaluate("e => getComputedStyle(e).color")
            assert red == "rgb(198, 40, 40)"
            page.screenshot(path=str(ARTIFACTS / "admin-index-health.png"), full_page=True)
            # ... and what a laptop screen shows first.
            page.screenshot(path=str(ARTIFACTS / "admin-index-health-top.png"))

            link.locator("input[value='Check now']").click()
            expect(page.locator(".messagelist")).to_contain_text("index_link: sampled 13 entities")
            expect(page.locator("#index-index_link")).to_contain_text("no problems.")

            page.click("text=Browse entities")
            expect(page.locator("#result_list tbody tr")).to_have_count(13)
            page.screenshot(path=str(ARTIFACTS / "admin-entities.png"), full_page=True)
            page.fill("#searchbar", entity.id.hex)
            page.press("#searchbar", "Enter")
            expect(page.locator("#result_list tbody tr")).to_have_count(1)
            page.click(f"text={entity.id}")

            expect(page.locator("h1")).to_have_text(f"Entity {entity.id}")
            expect(page.locator("#body-json")).to_contain_text("<script>alert('x')</script>")
            page.click("text=Edit the body as JSON")
            body = page.locator("textarea")
            expect(body).to_contain_text("<script>alert('x')</script> & friends")
            expect(page.locator("#index-rows .sls-badge.sls-ok")).to_have_count(implied_rows)
            page.screenshot(path=str(ARTIFACTS / "admin-entity.png"), full_page=True)

            text = body.input_value().replace("& friends", "and co")
            body.fill(text.replace('"a",', '"c",'))
            page.click("input[name=_continue]")
            expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
            expect(page.locator("#index-rows")).to_contain_text('tags = "c"')
            page.screenshot(path=str(ARTIFACTS / "admin-entity-saved.png"), full_page=True)

            body = page.locator("textarea")
            body.fill('{"title": {"$uuid": "nope"}}')
            page.click("input[name=_continue]")
            expect(page.locator(".errorlist")).to_contain_text("is not a UUID")
            page.screenshot(path=str(ARTIFACTS / "admin-entity-error.png"), full_page=True)
        finally:
            browser.close()

    assert dialogs == [], "a property value ran as script"
    stored = Entity.objects.get(id=entity.id)
    assert stored["title"] == "<script>alert('x')</script> and co"
    assert stored["tags"] == ["c", "b"]
    assert [e.id for e in Entity.objects.filter_index(tags="c").allow_building()] == [entity.id]
    # The edit changed that one entity only: the twelve others are stored as they were.
    others = Entity.objects.get_many([p.id for p in posts])
    assert {i: e.body_properties() for i, e in others.items()} == {
        p.id: p.body_properties() for p in posts
    }
