"""The operators' admin, through Django's test client: the index health page (states, rows,
backfill, passes, estimates, a missing table, a shard down) and "check now"."""

from __future__ import annotations

import datetime as dt
import re

from django.contrib.admin.models import CHANGE, LogEntry
from django.db import connections

from schemaless_store.config.indexes import registry
from schemaless_store.models import CleanerCheckpoint, CleanerPass, Entity, IndexState
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import index_values
from tests.support import STORE
from tests.support.admin import (
    CHANGE_PERMS,
    CHECK,
    HEALTH,
    LIST,
    VIEW,
    change_url,
    client_for,
    link_rows,
    post_body,
    shown_ids,
)
from tests.support.factories import NumberedFactory, PostFactory
from tests.support.raw import index_rows, insert_index_row

pytestmark = STORE


# --- index health --------------------------------------------------------------------------------


def section(page: str, name: str) -> str:
    start = page.index(f'id="index-{name}"')
    end = page.find('<div class="module sls-section"', start + 1)
    return page[start : end if end > 0 else len(page)]


def test_health_page_shows_state_rows_backfill_and_passes():
    for _ in range(3):
        PostFactory.create()
    IndexState.objects.filter(name="index_tags").update(state="building")
    IndexState.objects.create(name="index_gone", state="retired", properties=["x"], shard_on="x")
    aliases = shards.shard_aliases()
    CleanerCheckpoint.objects.create(
        index_name="index_tags",
        shard=aliases[0],
        last_added_id=25,
        target_added_id=100,
        entities_done=25,
        entities_total=100,
    )
    CleanerCheckpoint.objects.create(
        index_name="index_tags",
        shard=aliases[1],
        last_added_id=75,
        target_added_id=100,
        entities_done=75,
        entities_total=100,
    )
    started = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    CleanerPass.objects.create(
        index_name="index_link",
        shard=aliases[0],
        kind="repair",
        status="done",
        finished=started + dt.timedelta(seconds=90),
        entities_scanned=1234,
        rows_inserted=7,
        stale_removed=3,
        orphans_removed=2,
    )
    CleanerPass.objects.filter(index_name="index_link").update(started=started)
    CleanerPass.objects.create(
        index_name="index_user_id",
        shard=aliases[1],
        kind="repair",
        status="failed",
        errors=4,
        message="lost connection",
    )
    page = client_for(*VIEW).get(HEALTH).content.decode()

    link = section(page, "index_link")
    assert "sls-badge sls-ready" in link
    counts = re.findall(r'<td rowspan="\d+" class="sls-num">([\d,]+)</td>', link)
    by_shard = [len(index_rows("index_link", a)) for a in aliases]
    assert [int(c) for c in counts] == by_shard and sum(by_shard) == 3
    assert "repair, done" in link and "1 min 30 s" in link
    assert ">1234<" in link and ">7<" in link and ">3<" in link and ">2<" in link
    assert "never" in link  # the other shard had no pass, and no check ran

    tags = section(page, "index_tags")
    assert "sls-badge sls-building" in tags and 'aria-valuenow="50"' in tags
    assert "25% · added_id 25 of 100" in tags and "75%" in tags

    failed = section(page, "index_user_id")
    assert "sls-problems" in failed and "last repair pass failed with 4 errors" in failed
    assert "lost connection" in failed

    gone = section(page, "index_gone")
    assert "sls-badge sls-retired" in gone and "no longer declared" in gone
    assert 'value="Check now"' not in gone


def test_health_page_reads_estimates_for_big_tables(monkeypatch):
    from schemaless_store.tables import counts

    PostFactory.create()
    monkeypatch.setattr(counts, "EXACT_COUNT_BELOW", 0)
    page = client_for(*VIEW).get(HEALTH).content.decode()
    if connections[shards.shard_aliases()[0]].vendor == "mysql":
        assert "≈" in section(page, "index_link")
    else:
        assert "≈" not in section(page, "index_link")  # SQLite has no estimate: it counts


def test_health_page_names_a_missing_table():
    alias = shards.shard_aliases()[1]
    with connections[alias].cursor() as cursor:
        cursor.execute("DROP TABLE index_tags")
    try:
        page = client_for(*VIEW).get(HEALTH).content.decode()
        assert f"{alias}: table missing" in section(page, "index_tags")
    finally:
        from schemaless_store.tables.ddl import create_tables

        create_tables(alias, [registry.get("index_tags")])


def test_check_now_reports_logs_and_shows_problems():
    entities = [PostFactory.create() for _ in range(6)]
    client = client_for(*CHANGE_PERMS, enforce_csrf=True)
    health_page = client.get(HEALTH)
    token = health_page.cookies["csrftoken"].value
    assert client.get(CHECK).status_code == 405

    response = client.post(CHECK, {"sample": "10", "csrfmiddlewaretoken": token}, follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "index_link: sampled 6 entities (up to 10 per shard): 0 missing and 0 stale" in text
    logs = LogEntry.objects.filter(object_id="index_link")
    assert logs.count() == 1 and logs.get().action_flag == CHANGE
    assert LogEntry.objects.count() == len(registry.valid())

    # Break the index: one row gone, one row that no entity implies.
    victim, link_index = entities[0], registry.get("index_link")
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM index_link WHERE entity_id = %s", [victim.id.bytes])
    stale = index_values.encode_key("https://nobody")  # its column value; routed as the store does
    home = bucket_map.alias_for(link_index.routing_key(stale))
    insert_index_row("index_link", home, (stale, entities[1].id.bytes))
    response = client.post(
        CHECK,
        {"sample": "10", "index": "index_link", "csrfmiddlewaretoken": token},
        follow=True,
    )
    text = response.content.decode()
    assert "1 missing and 1 stale index rows" in text and "PROBLEMS" in text
    assert LogEntry.objects.filter(object_id="index_link").count() == 2
    assert LogEntry.objects.count() == len(registry.valid()) + 1  # only index_link was checked
    link = section(text, "index_link")
    assert "the last check found problems" in link and "sls-bad" in link


def test_check_now_samples_at_most_n_per_shard():
    from schemaless_store.admin import sample_check

    NumberedFactory.create_batch(30, tags=["t"])
    results = sample_check.check(["index_tags"], per_shard=4)
    assert len(results) == 1 and results[0].sampled == 4 * len(shards.shard_aliases())
    assert results[0].ok


def test_index_state_change_page_is_its_health_section():
    client = client_for(*VIEW)
    response = client.get(f"{HEALTH}index_link/change/")
    assert response.status_code == 302 and response["Location"] == f"{HEALTH}#index-index_link"


def test_cleaner_passes_list_is_read_only():
    CleanerPass.objects.create(index_name="index_link", shard="shard_0", kind="repair")
    client = client_for("view_cleanerpass")
    response = client.get("/admin/schemaless_store/cleanerpass/")
    assert response.status_code == 200 and "index_link" in response.content.decode()
    assert client.get("/admin/schemaless_store/cleanerpass/add/").status_code == 403


def test_write_path_errors_are_form_errors():
    Entity.objects.create(username="taken")
    other = Entity.objects.create(username="free")
    client = client_for(*CHANGE_PERMS)
    response = post_body(client, other, '{"username": "taken"}')
    assert response.status_code == 200
    assert "errornote" in response.content.decode()
    assert Entity.objects.get(id=other.id)["username"] == "free"
    assert not LogEntry.objects.exists()


def test_history_page_links_back_to_the_entity():
    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS)
    post_body(client, entity, '{"title": "b"}')
    page = client.get(f"{LIST}{entity.id.hex}/history/", follow=True)
    assert page.redirect_chain == [(f"{LIST}{entity.id}/history/", 302)]
    content = page.content.decode()
    assert f'href="{change_url(entity)}"' in content and "Changed title." in content


def test_a_shard_that_is_down_is_named_and_the_rest_still_shows():
    from tests.support.buckets import id_on
    from tests.support.outage import shard_down

    up, down = shards.shard_aliases()[:2]
    healthy = Entity.objects.create(id=id_on(up), title="still here")
    Entity.objects.create(id=id_on(down), title="unreachable")
    client = client_for(*CHANGE_PERMS)
    with shard_down(down):
        listing = client.get(LIST)
        assert listing.status_code == 200
        assert shown_ids(listing) == [str(healthy.id)]
        assert f"Shard unavailable: {down}" in listing.content.decode()
        health_page = client.get(HEALTH).content.decode()
        assert f"{down}: " in section(health_page, "index_link")
        page = client.get(change_url(healthy))
        assert page.status_code == 200 and "still here" in page.content.decode()


def test_health_page_shows_the_real_cleaners_passes():
    from schemaless_store.cleaner import Cleaner

    entities = [PostFactory.create() for _ in range(4)]
    stale = index_values.encode_key("https://nobody")
    insert_index_row("index_link", bucket_map.alias_for(stale), (stale, entities[0].id.bytes))
    Cleaner(indexes=["index_link"], once=True).run()
    assert len(link_rows()) == 4
    link = section(client_for(*VIEW).get(HEALTH).content.decode(), "index_link")
    kinds = re.findall(r'<td class="sls-pass">(\w+), (\w+),', link)
    assert kinds == [("repair", "done"), ("sweep", "done")] * len(shards.shard_aliases())
    removed = re.findall(r'<td class="sls-pass">\w+, done.*?</tr>', link, re.DOTALL)
    assert any('<td class="sls-num">1</td>' in row for row in removed)  # the stale row went
    assert "sls-problems" not in link
