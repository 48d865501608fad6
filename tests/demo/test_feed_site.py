"""What a visitor of the demo site reads: "who else shared this?" offered only once its index
can answer, a like or comment URL opened in the address bar, the site's own 405 page, and the
post form's labels and required marks (docs/demo.md)."""

from __future__ import annotations

from html import unescape
from io import StringIO

import pytest
from django.core.management import call_command

from project.feed.models import LINK_INDEX_NAME, Entry, Like, User
from schemaless_store.tables import lifecycle
from tests.support import STORE
from tests.support.feed import SHARED, sign_up

pytestmark = [STORE, pytest.mark.usefixtures("feed_pages")]

WHO_ELSE = "who else shared this?"


def test_who_else_is_not_offered_while_the_index_is_undeclared(client, undeclared, sharers):
    page = client.get("/").content.decode()
    assert "Look 0" in page and WHO_ELSE not in page
    assert WHO_ELSE not in client.get(f"/e/{sharers[0].id}/").content.decode()
    # Opened directly (an operator, a bookmark): the page says what to run.
    response = client.get("/shared/", {"link": SHARED})
    assert response.status_code == 503
    html = response.content.decode()
    assert "FEED_LIVE_INDEXES=link bash scripts/demo.sh" in html
    assert f"runcleaner --index={LINK_INDEX_NAME} --once" in html


def test_who_else_is_offered_once_the_index_is_built(client, sharers, declared_live):
    assert WHO_ELSE not in client.get("/").content.decode()  # declared, still building
    call_command("runcleaner", f"--index={LINK_INDEX_NAME}", "--once", stdout=StringIO())
    lifecycle.forget_states()
    page = client.get("/").content.decode()
    assert page.count(WHO_ELSE) == 4  # every entry with a link
    assert '/shared/?link=https%3A%2F%2Ffriendfeed.com%2F">who else shared this?' in page


def test_a_like_or_comment_url_opened_in_the_browser_leads_to_the_entry(client):
    author = User.objects.create(username="fay", email="fay@example.com")
    entry = Entry.objects.create(
        user=author, title="Schemaless MySQL", link="https://example.com/schemaless"
    )
    sign_up(client, "gus")
    for action in ("like", "comment"):
        response = client.get(f"/e/{entry.id}/{action}/")
        assert response.status_code == 302, action
        assert response["Location"] == f"/e/{entry.id}/"
    assert not Like.objects.filter_index(entry_id=entry.id).order_by("created")
    assert client.get(f"/e/{entry.id}/like/", follow=True).status_code == 200


def test_another_method_gets_the_sites_own_405_page(client):
    author = User.objects.create(username="fay", email="fay@example.com")
    entry = Entry.objects.create(
        user=author, title="Schemaless MySQL", link="https://example.com/schemaless"
    )
    for method, path, allowed in [
        ("get", "/leave/", "POST"),
        ("get", "/act-as/", "POST"),
        ("put", f"/e/{entry.id}/like/", "GET, HEAD, POST"),
        ("delete", "/", "GET, HEAD"),
    ]:
        response = getattr(client, method)(path)
        assert response.status_code == 405, (method, path)
        assert response["Allow"] == allowed
        html = unescape(response.content.decode())
        assert 'id="not-allowed"' in html and '<header class="site">' in html  # the site's
        assert f"does not answer a {method.upper()} request" in html


def test_the_post_form_labels_each_field_and_marks_what_is_required(client):
    sign_up(client, "carol")
    page = client.get("/").content.decode()
    form = page[page.index('<form class="card" method="post" action="/post/"') :]
    form = form[: form.index("</form>")]
    assert '<label for="id_title">Title <span class="required" title="required">*</span>' in form
    assert '<label for="id_link">Link <span class="required" title="required">*</span>' in form
    assert '<span class="required">*</span> required' in form

    response = client.post("/post/", {"title": "", "link": ""})
    html = response.content.decode()
    title, link = html.index('for="id_title"'), html.index('for="id_link"')
    # Each message names its field, and sits under that field's label.
    assert title < html.index("Give the entry a title.") < link
    assert link < html.index("Give the link the entry shares.")
    assert "This field is required." not in html
    assert 'id="id_title" maxlength="200" required aria-required="true"' in html
