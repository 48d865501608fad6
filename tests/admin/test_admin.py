"""The operators' admin, through Django's test client: permissions, browsing and search across
shards, editing and deleting through the write path, escaping, index health and "check now"."""

from __future__ import annotations

import datetime as dt
import html
import re
import uuid

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from schemaless_store.admin.entity_admin import EntityAdmin
from schemaless_store.config.indexes import registry
from schemaless_store.models import CleanerCheckpoint, CleanerPass, Entity, IndexState
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import bucket_hash, index_values, jsonview
from tests.support import STORE
from tests.support.admin import (
    CHANGE_PERMS,
    CHECK,
    HEALTH,
    LIST,
    VIEW,
    change_url,
    client_for,
    textarea,
)
from tests.support.factories import NumberedFactory, PostFactory
from tests.support.raw import index_rows, insert_index_row
from tests.support.values import EVERY_TYPE, same

pytestmark = STORE

LINK = registry.get("index_link")


def link_rows() -> set[tuple]:
    return {(value, entity_id) for value, entity_id, _alias in index_rows("index_link")}


def loaded_marker(response) -> str:
    match = re.search(r'name="loaded" value="([^"]*)"', response.content.decode())
    assert match
    return match.group(1)


def post_body(client: Client, entity, body: str, response=None, **extra):
    response = response or client.get(change_url(entity))
    data = {"body": body, "loaded": loaded_marker(response), "_continue": "1", **extra}
    return client.post(change_url(entity), data)


# --- permissions -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [LIST, HEALTH, "/admin/schemaless_store/cleanerpass/"])
def test_anonymous_and_non_staff_are_sent_to_login(url):
    assert Client().get(url).status_code == 302
    client = client_for(*CHANGE_PERMS, staff=False)
    response = client.get(url)
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_staff_without_permissions_sees_nothing():
    entity = PostFactory.create()
    client = client_for()
    for url in (LIST, change_url(entity), HEALTH, f"{LIST}{entity.id}/delete/"):
        assert client.get(url).status_code == 403, url
    assert client.post(CHECK, {"sample": "5"}).status_code == 403
    index = client.get("/admin/").content.decode()
    assert LIST not in index and HEALTH not in index


def test_view_only_staff_can_look_but_not_touch():
    entity = PostFactory.create(title="keep")
    client = client_for(*VIEW)
    index = client.get("/admin/").content.decode()
    assert LIST in index and HEALTH in index
    assert client.get(LIST).status_code == 200
    page = client.get(change_url(entity))
    assert page.status_code == 200
    assert "<textarea" not in page.content.decode()
    assert "&quot;keep&quot;" in page.content.decode()  # the body, read-only
    response = client.post(change_url(entity), {"body": '{"title": "changed"}'})
    assert response.status_code == 403
    assert Entity.objects.get(id=entity.id)["title"] == "keep"
    assert client.get(f"{LIST}{entity.id}/delete/").status_code == 403
    assert client.post(f"{LIST}{entity.id}/delete/").status_code == 403
    assert Entity.objects.get(id=entity.id)
    health = client.get(HEALTH)
    assert health.status_code == 200
    assert 'value="Check now"' not in health.content.decode()
    assert 'id="check-all"' not in health.content.decode()
    assert client.post(CHECK, {"sample": "5"}).status_code == 403
    assert not LogEntry.objects.exists()


def test_change_permission_edits_but_delete_needs_its_own():
    entity = PostFactory.create()
    client = client_for("view_entity", "change_entity")
    page = client.get(change_url(entity))
    assert "<textarea" in page.content.decode() and "deletelink" not in page.content.decode()
    assert client.post(f"{LIST}{entity.id}/delete/").status_code == 403
    assert Entity.objects.get(id=entity.id)


def test_adding_through_the_admin_is_not_offered():
    client = client_for(*CHANGE_PERMS, "add_entity")
    assert client.get(f"{LIST}add/").status_code == 403


# --- browsing and search -----------------------------------------------------------------------


def shown_ids(response) -> list[str]:
    pattern = r'<th class="field-id[^"]*"[^>]*><a href="[^"]+">([0-9a-f-]{36})</a>'
    return re.findall(pattern, response.content.decode())


def test_list_merges_shards_newest_first_and_pages_without_counting(monkeypatch):
    monkeypatch.setattr(EntityAdmin, "list_per_page", 3)
    # Ids drawn so both shards hold some of the eight, whatever uuid4 gives.
    aliases = shards.shard_aliases()
    ids: list[uuid.UUID] = []
    while len(ids) < 8:
        candidate = uuid.uuid4()
        if bucket_map.alias_for(candidate.bytes) == aliases[len(ids) % len(aliases)]:
            ids.append(candidate)
    created = [Entity.objects.create(id=entity_id, n=n) for n, entity_id in enumerate(ids)]
    assert {e.shard for e in created} == set(aliases)
    newest_first = [str(e.id) for e in sorted(created, key=lambda e: e.row_updated, reverse=True)]
    client = client_for(*VIEW)
    seen, url, pages = [], LIST, []
    captures = [CaptureQueriesContext(connections[a]) for a in shards.shard_aliases()]
    for capture in captures:
        capture.__enter__()
    try:
        while url:
            response = client.get(url if url.startswith("/") else LIST + url)
            pages.append(response)
            seen += shown_ids(response)
            match = re.search(r'<a href="([^"]+)" class="sls-next">', response.content.decode())
            url = html.unescape(match.group(1)) if match else ""
    finally:
        for capture in captures:
            capture.__exit__(None, None, None)
    assert seen == newest_first
    assert len(pages) == 3
    sql = " ".join(q["sql"] for c in captures for q in c.captured_queries).upper()
    assert "COUNT(" not in sql and "OFFSET" not in sql
    # ... and back: "Previous" from the last page shows the page before it.
    match = re.search(r'<a href="([^"]+)" class="sls-prev">', pages[-1].content.decode())
    back = client.get(LIST + html.unescape(match.group(1)))
    assert shown_ids(back) == newest_first[3:6]


def test_shard_filter():
    created = NumberedFactory.create_batch(6)
    client = client_for(*VIEW)
    for alias in shards.shard_aliases():
        ids = shown_ids(client.get(LIST, {"shard": alias}))
        assert sorted(ids) == sorted(str(e.id) for e in created if e.shard == alias)
    response = client.get(LIST, {"shard": "nowhere"})
    assert len(shown_ids(response)) == 6
    assert "There is no shard" in response.content.decode()


def test_search_by_every_id_form():
    entity = PostFactory.create()
    PostFactory.create()
    client = client_for(*VIEW)
    for form in (entity.id.hex, str(entity.id), str(entity.id).upper(), f"urn:uuid:{entity.id}"):
        assert shown_ids(client.get(LIST, {"q": form})) == [str(entity.id)], form
    missing = client.get(LIST, {"q": uuid.uuid4().hex})
    assert shown_ids(missing) == [] and "No entity has this id" in missing.content.decode()


def test_change_page_accepts_every_id_form_and_redirects_to_one_url():
    entity = PostFactory.create()
    client = client_for(*VIEW)
    response = client.get(f"{LIST}{entity.id.hex}/change/")
    assert response.status_code == 302 and response["Location"] == change_url(entity)
    assert client.get(f"{LIST}{uuid.uuid4()}/change/").status_code == 302  # "does not exist"
    assert client.get(f"{LIST}not-an-id/change/").status_code == 302


def test_search_by_indexed_property():
    user = uuid.uuid4().bytes
    a = PostFactory.create(user_id=user, link="https://x.test/a?b=1&c=2")
    b = PostFactory.create(user_id=user, published=5, tags=["red", "blue"])
    PostFactory.create(published=7)
    client = client_for(*VIEW)

    def ids(q):
        return sorted(shown_ids(client.get(LIST, {"q": q})))

    assert ids("link=https://x.test/a?b=1&c=2") == [str(a.id)]
    assert ids("link:https://x.test/a?b=1&c=2") == [str(a.id)]
    assert ids(f'user_id={{"$bytes": "{user.hex()}"}}') == sorted([str(a.id), str(b.id)])
    assert ids(f'{{"user_id": {{"$bytes": "{user.hex()}"}}, "published__lte": 5}}') == [str(b.id)]
    assert ids("tags=blue") == [str(b.id)]


def test_search_errors_are_messages_not_500s():
    client = client_for(*VIEW)
    for q, message in [
        ("title=nothing indexes this", "Search refused: no index serves"),
        ("order_by=-published", "order_by needs at least one condition"),
        ("tags=x & tags=y", "tags is given twice"),
        ("just words", "neither an entity id"),
        ('link={"$uuid": "bad"}', "not a UUID"),
    ]:
        response = client.get(LIST, {"q": q})
        assert response.status_code == 200
        assert message in html.unescape(response.content.decode()), q


def test_search_explains_how_it_runs_and_why_it_refuses():
    """Several conditions joined by " & ", an ordering, and the query's explain() shown with
    the answer or the refusal."""
    user = uuid.uuid4().bytes
    old = PostFactory.create(user_id=user, published=5)
    new = PostFactory.create(user_id=user, published=9)
    PostFactory.create(published=7)
    client = client_for(*VIEW)
    user_json = f'{{"$bytes": "{user.hex()}"}}'
    response = client.get(LIST, {"q": f"user_id={user_json} & order_by=-published"})
    page = html.unescape(response.content.decode())
    assert shown_ids(response) == [str(new.id), str(old.id)]
    assert "Found through index index_user_published" in page
    assert "Index: index_user_published (user_id, published; shard_on user_id)" in page
    assert "(pinned by user_id)" in page
    response = client.get(LIST, {"q": f"user_id={user_json} & published__lte=5"})
    assert shown_ids(response) == [str(old.id)]
    # A search that names a prefix of an index only: refused, with the reasons and a remedy.
    response = client.get(LIST, {"q": "published__gte=0"})
    page = html.unescape(response.content.decode())
    assert response.status_code == 200 and shown_ids(response) == []
    assert "Search refused: no index serves filter_index(published__gte=0)" in page
    assert "No entities match this search" not in page  # it did not run
    assert "the search did not run" in page
    assert "index_user_published (user_id, published; shard_on user_id) [ready]: also " in page
    assert "requires `user_id`" in page
    assert "properties=['published'], shard_on='published'" in page
    # A search that runs and finds nothing says so.
    response = client.get(LIST, {"q": f'user_id={{"$bytes": "{uuid.uuid4().hex}"}}'})
    page = html.unescape(response.content.decode())
    assert shown_ids(response) == [] and "No entities match this search." in page
    assert "did not run" not in page


def test_search_help_gives_examples_that_work():
    """The examples under the search box come from the ready indexes' own rows: each one,
    searched, finds entities."""
    user = uuid.uuid4().bytes
    PostFactory.create(user_id=user, published=5, tags=["red"])
    client = client_for(*VIEW)
    page = client.get(LIST).content.decode()
    examples = [
        html.unescape(e) for e in re.findall(r'class="sls-mono sls-example"[^>]*>([^<]+)<', page)
    ]
    assert any(e.startswith("tags=") for e in examples), examples
    assert any(e.startswith("user_id=") and "order_by=-published" in e for e in examples)
    for example in examples:
        assert shown_ids(client.get(LIST, {"q": example})), example


def test_index_search_pages_without_counting(monkeypatch):
    monkeypatch.setattr(EntityAdmin, "list_per_page", 2)
    created = {str(e.id) for e in NumberedFactory.create_batch(5, tags=["x"])}
    client = client_for(*VIEW)
    seen, page = [], 1
    while True:
        response = client.get(LIST, {"q": "tags=x", "p": page})
        seen += shown_ids(response)
        if 'class="sls-next"' not in response.content.decode():
            break
        page += 1
    assert page == 3 and sorted(seen) == sorted(created)
    for alias in shards.shard_aliases():
        on_shard = shown_ids(client.get(LIST, {"q": "tags=x", "shard": alias}))
        on_shard += shown_ids(client.get(LIST, {"q": "tags=x", "shard": alias, "p": 2}))
        on_shard += shown_ids(client.get(LIST, {"q": "tags=x", "shard": alias, "p": 3}))
        assert sorted(on_shard) == sorted(
            i for i in created if bucket_map.alias_for(uuid.UUID(i).bytes) == alias
        )


# --- the detail page, escaping -------------------------------------------------------------------


def test_detail_shows_the_entity_legibly_and_escaped():
    user = b"\x00\xab" * 8
    entity = Entity.objects.create(
        title="<script>alert(1)</script>",
        user_id=user,
        ref=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        link="https://example.com/<b>",
    )
    client = client_for(*VIEW)
    page = client.get(change_url(entity)).content.decode()
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert f"&quot;$bytes&quot;: &quot;{user.hex()}&quot;" in page
    assert "&quot;$uuid&quot;: &quot;12345678-1234-5678-1234-567812345678&quot;" in page
    assert entity.shard in page and str(bucket_hash.bucket_of(entity.id.bytes, 4096)) in page
    assert "https://example.com/&lt;b&gt;" in page  # the index row, decoded and escaped
    listing = client.get(LIST).content.decode()
    assert "<script>alert(1)" not in listing and "&lt;script&gt;" in listing


def test_detail_marks_missing_and_stale_index_rows():
    entity = PostFactory.create(link="https://current")
    client = client_for(*VIEW)
    page = client.get(change_url(entity)).content.decode()
    assert "sls-badge sls-missing" not in page and "sls-badge sls-stale" not in page
    implied = sum(len(i.rows_for(entity.body_properties())) for i in registry.valid())
    assert implied >= 3 and page.count("sls-badge sls-ok") == implied
    alias = bucket_map.alias_for(LINK.routing_key(index_values.encode_key("https://current")))
    with connections[alias].cursor() as cursor:
        cursor.execute("DELETE FROM index_link")
    stale = index_values.encode_key("https://old")
    insert_index_row(
        "index_link", bucket_map.alias_for(index_values.encode_key(stale)), (stale, entity.id.bytes)
    )
    page = client.get(change_url(entity)).content.decode()
    assert "sls-badge sls-missing" in page and "sls-badge sls-stale" in page
    assert "&quot;https://old&quot;" in page and "2 problems" in page


def test_undecodable_body_is_shown_not_a_500():
    entity = Entity.objects.create(title="x")
    with connections[entity.shard].cursor() as cursor:
        cursor.execute(
            "UPDATE entities SET body = %s WHERE id = %s", [b"\x7fjunk", entity.id.bytes]
        )
    client = client_for(*CHANGE_PERMS)
    assert client.get(LIST).status_code == 200
    page = client.get(change_url(entity))
    assert page.status_code == 200 and "format byte 0x7f" in page.content.decode()


# --- editing ---------------------------------------------------------------------------------


def test_valid_edit_is_saved_through_the_write_path_and_logged():
    entity = PostFactory.create(link="https://old")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    props = jsonview.loads(textarea(page))
    props["link"] = "https://new"
    props["extra"] = {"$bytes": "not a tag at the top"}
    del props["title"]
    response = post_body(client, entity, jsonview.dumps(props), page)
    assert response.status_code == 302 and response["Location"] == change_url(entity) + "?edit=1"
    stored = Entity.objects.get(id=entity.id)
    assert stored["link"] == "https://new" and "title" not in stored
    assert link_rows() == {(index_values.encode_key("https://new"), entity.id.bytes)}
    assert [e.id for e in Entity.objects.filter_index(link="https://new")] == [entity.id]
    log = LogEntry.objects.get()
    assert log.action_flag == CHANGE and log.object_id == str(entity.id)
    assert log.get_admin_url() == change_url(entity)
    assert "extra" in log.get_change_message() and "link" in log.get_change_message()
    history = client.get(f"{LIST}{entity.id}/history/")
    assert history.status_code == 200 and "link" in history.content.decode()


def test_every_type_survives_an_unchanged_save():
    entity = Entity.objects.create(**EVERY_TYPE)
    before = Entity.objects.get(id=entity.id).row_updated
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    assert same(jsonview.loads(textarea(page)), EVERY_TYPE)
    response = post_body(client, entity, textarea(page), page)
    assert response.status_code == 302
    assert Entity.objects.get(id=entity.id).row_updated == before  # nothing was written
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"title": ', "invalid JSON"),
        ('["a list"]', "not a list"),
        ('{"n": 18446744073709551616}', "cannot store"),
        ('{"when": {"$datetime": "2020-01-01T00:00:00"}}', "needs a UTC offset"),
        ('{"user_id": {"$uuid": "nope"}}', "not a UUID"),
        ('{"id": "00000000000000000000000000000000"}', "id cannot change"),
        ('{"link": {"$float": "nan"}}', "NaN cannot be indexed"),
        ('{"link": "' + "x" * 300 + '"}', "the column holds"),
    ],
)
def test_bad_edits_are_form_errors_and_write_nothing(body, message):
    entity = PostFactory.create(link="https://keep")
    client = client_for(*CHANGE_PERMS)
    response = post_body(client, entity, body)
    assert response.status_code == 200
    content = html.unescape(response.content.decode())
    assert "errornote" in content and message in content
    assert body in content  # the operator's text is kept for correcting
    assert Entity.objects.get(id=entity.id)["link"] == "https://keep"
    assert link_rows() == {(index_values.encode_key("https://keep"), entity.id.bytes)}
    assert not LogEntry.objects.exists()


def test_own_id_in_the_body_is_accepted():
    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS)
    body = f'{{"id": {{"$uuid": "{entity.id}"}}, "title": "b"}}'
    assert post_body(client, entity, body).status_code == 302
    assert Entity.objects.get(id=entity.id).properties == {"id": entity.id, "title": "b"}


def test_edit_of_an_entity_changed_meanwhile_is_refused():
    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    other = Entity.objects.get(id=entity.id)
    other["title"] = "someone else"
    other.save()
    response = post_body(client, entity, '{"title": "mine"}', page)
    assert response.status_code == 200 and "changed by someone else" in response.content.decode()
    assert Entity.objects.get(id=entity.id)["title"] == "someone else"


def test_edit_refused_when_a_write_lands_after_the_post_read_the_entity(monkeypatch):
    """The check runs under the save's row lock: a write between the view's read of the
    entity (which still matches the page) and its save is caught too."""
    from schemaless_store.admin import entity_admin

    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS)
    page = client.get(change_url(entity))
    build = Entity.from_properties

    def racing(properties):
        other = Entity.objects.get(id=entity.id)
        other["title"] = "raced"
        other.save()
        return build(properties)

    monkeypatch.setattr(entity_admin.Entity, "from_properties", racing)
    response = post_body(client, entity, '{"title": "mine"}', page)
    monkeypatch.undo()
    assert response.status_code == 200 and "changed by someone else" in response.content.decode()
    assert Entity.objects.get(id=entity.id)["title"] == "raced"


# --- deleting ----------------------------------------------------------------------------------


def test_delete_confirms_then_removes_entity_and_index_rows():
    entity = PostFactory.create()
    keep = PostFactory.create()
    client = client_for(*VIEW, "delete_entity")
    confirm = client.get(f"{LIST}{entity.id}/delete/")
    assert confirm.status_code == 200 and "3 index rows" in confirm.content.decode()
    response = client.post(f"{LIST}{entity.id}/delete/")
    assert response.status_code == 302 and response["Location"] == LIST
    with pytest.raises(Entity.DoesNotExist):
        Entity.objects.get(id=entity.id)
    for index in registry.valid():
        assert all(row[-2] != entity.id.bytes for row in index_rows(index.name)), index.name
    assert Entity.objects.get(id=keep.id)
    log = LogEntry.objects.get()
    assert log.action_flag == DELETION and log.object_id == str(entity.id)


def test_state_changing_posts_need_csrf():
    entity = Entity.objects.create(title="a")
    client = client_for(*CHANGE_PERMS, "delete_entity", enforce_csrf=True)
    assert client.post(f"{LIST}{entity.id}/delete/").status_code == 403
    assert client.post(change_url(entity), {"body": "{}"}).status_code == 403
    assert client.post(CHECK, {"sample": "3"}).status_code == 403
    assert Entity.objects.get(id=entity.id)["title"] == "a"
    assert not LogEntry.objects.exists()


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
