"""The operators' admin, through Django's test client: permissions, browsing and search across
shards, the detail page and escaping (editing and deleting: test_admin_edits.py; index health
and "check now": test_admin_health.py)."""

from __future__ import annotations

import html
import re
import uuid

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from schemaless_store.admin.entity_admin import EntityAdmin
from schemaless_store.config.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.topology import bucket_map, shards
from schemaless_store.values import bucket_hash, index_values
from tests.support import STORE
from tests.support.admin import (
    CHANGE_PERMS,
    CHECK,
    HEALTH,
    LIST,
    VIEW,
    change_url,
    client_for,
    shown_ids,
)
from tests.support.factories import NumberedFactory, PostFactory
from tests.support.raw import insert_index_row

pytestmark = STORE

LINK = registry.get("index_link")


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
