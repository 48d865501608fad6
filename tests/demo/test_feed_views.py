"""The demo feed (project/feed) through Django's test client, on the test databases.

The views are exercised the way a visitor uses them: sign up, post, page through feeds with
cursors, like, comment, and hit the page that needs the live index before and after it exists.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from project.feed import views
from project.feed.factories import EntryFactory, UserFactory
from project.feed.models import Comment, Entry, Like, User, now
from schemaless_store.exceptions import UniqueViolation
from schemaless_store.models import Entity
from tests.support import STORE
from tests.support.feed import (
    entry_ids,
    older_link,
    pager_href,
    sign_up,
    unsigned,
    walk,
    walk_pages,
)
from tests.support.raw import count_everything

# The time of the paging tests' entries (their order is what is tested).
T0 = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)

pytestmark = [STORE, pytest.mark.usefixtures("feed_pages")]


# --- users -----------------------------------------------------------------------------------


def test_sign_up_then_post_shows_the_entry_on_the_users_page_and_the_public_feed(client):
    response = sign_up(client, "Alice", name="Alice Liddell")
    assert response.status_code == 302
    assert response["Location"] == "/u/alice/"

    response = client.post("/post/", {"title": "We just launched", "link": "friendfeed.com"})
    assert response.status_code == 302
    assert response["Location"] == "/u/alice/"

    (entry,) = Entry.objects.filter(user=User.named("alice")).order_by("published")
    assert entry["title"] == "We just launched"
    assert entry["link"] == "https://friendfeed.com"  # assume_scheme="https"
    assert isinstance(entry["published"], dt.datetime)  # stored as an aware datetime
    assert entry["published"].utcoffset() is not None

    mine = client.get("/u/alice/").content.decode()
    assert entry_ids(mine) == [str(entry.id)]
    assert "We just launched" in mine
    assert "Alice Liddell" in mine
    public = client.get("/").content.decode()
    assert entry_ids(public) == [str(entry.id)]
    assert 'id="viewer">@alice</a>' in public  # the session remembers who is acting


@pytest.mark.parametrize(
    ("second", "field", "label"),
    [
        ({"username": "ALICE", "email": "other@example.com"}, "username", "Username"),
        ({"username": "bob", "email": "Alice@Example.com"}, "email", "Email"),
    ],
)
def test_a_taken_username_or_email_is_a_form_error_and_writes_nothing(client, second, field, label):
    sign_up(client, "alice", "alice@example.com")
    before = count_everything()

    response = Client().post("/signup/", second)

    assert response.status_code == 200
    message = f"User with this {label} already exists."
    assert response.context["form"].errors == {field: [message]}
    assert message in response.content.decode()
    assert count_everything() == before  # no entity, no index row: the store refused the write
    assert [u["username"] for u in User.objects.all()] == ["alice"]


@pytest.mark.parametrize(
    ("index", "field"),
    [
        ("index_feed_username", "username"),
        ("index_feed_email", "email"),
        ("index_users_username", "username"),  # the test app's: indexes are global
        ("index_gone", None),
    ],
)
def test_a_unique_violation_names_the_field_its_index_guards(index, field):
    error = User.unique_error(UniqueViolation("taken", index=index))
    assert (list(error.error_dict) if hasattr(error, "error_dict") else [None]) == [field]


def test_act_as_and_leave(client):
    bob = User.objects.create(username="bob", email="bob@example.com")
    response = client.post("/act-as/", {"username": "BOB", "next": "/users/"})
    assert response.status_code == 302 and response["Location"] == "/users/"
    assert client.session["feed_user_id"] == bob.id.hex

    client.post("/leave/")
    assert "feed_user_id" not in client.session

    response = client.post("/act-as/", {"username": "nobody"}, follow=True)
    assert "There is no such user." in response.content.decode()
    # An open redirect is not followed: "next" must stay on this site.
    response = client.post("/act-as/", {"username": "bob", "next": "https://evil.example/"})
    assert response["Location"] == "/u/bob/"


def test_users_list_pages_by_username(client):
    Entity.objects.bulk_put(UserFactory(username=f"user{n:02}") for n in range(12))
    names = []
    after = None
    while True:
        html = client.get("/users/" + (f"?after={after}" if after else "")).content.decode()
        names += re.findall(r'href="/u/([a-z0-9_]+)/">@', html)
        after = older_link(html)
        if after is None:
            break
    assert names == [f"user{n:02}" for n in range(12)]  # 50 per page: one page


# --- entries and pages -------------------------------------------------------------------------


@pytest.fixture
def two_authors() -> tuple[dict, dict, list[dict]]:
    """13 entries, 9 by ann and 4 by ben, at distinct times, plus two with the same time."""
    ann, ben = UserFactory(username="ann"), UserFactory(username="ben")
    entries = [
        EntryFactory(user=ann if n % 3 else ben, published=T0 + dt.timedelta(milliseconds=n))
        for n in range(11)
    ]
    # Same timestamp: the entity id breaks the tie, so paging neither repeats nor skips one.
    entries += [
        EntryFactory(user=ann, published=T0 + dt.timedelta(milliseconds=5)) for _ in range(2)
    ]
    Entity.objects.bulk_put([ann, ben, *entries])
    return ann, ben, entries


def newest_first(entries: list[dict]) -> list[dict]:
    return sorted(entries, key=lambda e: e["published"], reverse=True)


def test_public_feed_pages_newest_first_without_duplicates(client, two_authors):
    _ann, _ben, entries = two_authors
    seen = walk(client, "/")
    assert len(seen) == len(set(seen)) == 13
    assert sorted(seen) == sorted(str(e["id"]) for e in entries)
    published = [Entity.objects.get(id=i)["published"] for i in seen]
    assert published == sorted(published, reverse=True)
    assert seen[:2] == [str(e["id"]) for e in newest_first(entries)[:2]]


def test_a_users_page_shows_only_their_entries_newest_first_across_pages(client, two_authors):
    ann, _ben, entries = two_authors
    seen = walk(client, "/u/ann/")
    theirs = [e for e in entries if e["user"] == ann["id"]]
    assert len(seen) == len(set(seen)) == len(theirs) == 9  # two pages of 5
    published = [Entity.objects.get(id=i)["published"] for i in seen]
    assert published == sorted(published, reverse=True)
    assert set(seen) == {str(e["id"]) for e in theirs}


def test_entries_posted_while_paging_do_not_shift_the_next_page(client, two_authors):
    ann, _ben, _entries = two_authors
    first = client.get("/u/ann/").content.decode()
    Entity.objects.bulk_put([EntryFactory(user=ann, published=T0 + dt.timedelta(days=900))])
    second = client.get(f"/u/ann/?after={older_link(first)}").content.decode()
    assert not set(entry_ids(first)) & set(entry_ids(second))
    assert len(entry_ids(first)) + len(entry_ids(second)) == 9


def test_newer_goes_back_one_page_at_a_time_to_the_first(client, two_authors):
    forward = walk_pages(client, "/")
    assert [len(page) for page in forward] == [5, 5, 3]
    last_href = None
    html = client.get("/").content.decode()
    assert pager_href(html, "newer") is None and pager_href(html, "newest") is None
    for _ in forward[1:]:
        last_href = pager_href(html, "older")
        html = client.get("/" + last_href).content.decode()

    backward = walk_pages(client, "/", which="newer", start=last_href)
    assert backward == forward[::-1]


def test_the_second_pages_newer_link_is_the_first_page_and_newest_shows_from_the_third(
    client, two_authors
):
    first = client.get("/").content.decode()
    second = client.get("/" + pager_href(first, "older")).content.decode()
    assert pager_href(second, "newer") == "/"
    assert pager_href(second, "newest") is None  # it would be the same link
    third = client.get("/" + pager_href(second, "older")).content.decode()
    assert pager_href(third, "newest") == "/"
    assert parse_qs(urlsplit(pager_href(third, "newer")).query)["after"] == [older_link(first)]
    assert 'id="newer" rel="prev">&larr; Newer</a>' in third


def test_a_users_page_and_the_users_list_page_back_too(client, two_authors):
    forward = walk_pages(client, "/u/ann/")
    assert [len(page) for page in forward] == [5, 4]
    html = client.get("/u/ann/").content.decode()
    html = client.get("/u/ann/" + pager_href(html, "older")).content.decode()
    assert pager_href(html, "newer") == "/u/ann/"

    Entity.objects.bulk_put(UserFactory(username=f"user{n:02}") for n in range(52))
    first = client.get("/users/").content.decode()  # 50 a page, by username
    second = client.get("/users/" + pager_href(first, "older")).content.decode()
    # ann and ben first: user48 to user51 are left for the second page
    assert re.findall(r'href="/u/([a-z0-9_]+)/">@', second) == [f"user{n}" for n in range(48, 52)]
    assert pager_href(second, "newer") == "/users/"


def test_newer_stops_where_a_cut_trail_ends(client, two_authors, monkeypatch, settings):
    settings.FEED_PAGE_SIZE = 3  # 13 entries: five pages
    monkeypatch.setattr(views, "BACK_LIMIT", 1)
    pages = [client.get("/").content.decode()]
    for _ in range(3):
        pages.append(client.get("/" + pager_href(pages[-1], "older")).content.decode())
    first, second, third, fourth = pages
    third_query = parse_qs(urlsplit(pager_href(second, "older")).query)
    assert third_query["back"] == [older_link(first)] and "cut" not in third_query
    # The fourth page's trail would hold two cursors: the oldest is dropped, and marked so.
    fourth_query = parse_qs(urlsplit(pager_href(third, "older")).query)
    assert fourth_query["back"] == [older_link(second)] and fourth_query["cut"] == ["1"]

    third_again = client.get("/" + pager_href(fourth, "newer")).content.decode()
    assert entry_ids(third_again) == entry_ids(third)
    assert pager_href(third_again, "newer") is None  # the way to the second page is forgotten
    assert pager_href(third_again, "newest") == "/"
    # The same next page, though not the same string: a cursor is signed with its time.
    assert unsigned(pager_href(third_again, "older")) == unsigned(pager_href(third, "older"))


def test_a_tampered_newer_cursor_is_a_400(client, two_authors):
    first = client.get("/").content.decode()
    second_href = pager_href(first, "older")
    response = client.get("/" + second_href + "&back=garbage")
    newer = pager_href(response.content.decode(), "newer")
    assert parse_qs(urlsplit(newer).query)["after"] == ["garbage"]
    assert client.get("/" + newer).status_code == 400


@pytest.mark.parametrize("after", ["garbage", "", "x" * 500])
def test_a_bad_cursor_is_a_400_with_a_way_back(client, two_authors, after):
    response = client.get("/", {"after": after})
    if after == "":
        assert response.status_code == 200  # no cursor: the first page
        return
    assert response.status_code == 400
    html = response.content.decode()
    assert "That page link is not valid" in html
    assert '<a href="/">Start from the first page</a>' in html


def test_a_cursor_from_another_list_is_refused(client, two_authors):
    cursor = older_link(client.get("/u/ann/").content.decode())
    response = client.get(f"/u/ben/?after={cursor}")
    assert response.status_code == 400
    assert '<a href="/u/ben/">Start from the first page</a>' in response.content.decode()


def test_posting_needs_a_user_and_a_valid_link(client):
    response = client.post("/post/", {"title": "t", "link": "https://example.com/"})
    assert response.status_code == 302 and response["Location"] == "/users/"
    sign_up(client, "carol")
    response = client.post("/post/", {"title": "", "link": "not a link"})
    assert response.status_code == 200
    assert set(response.context["entry_form"].errors) == {"title", "link"}
    assert not Entry.objects.filter_index().order_by("published").exists()


def test_unknown_users_and_entries_are_404(client):
    assert client.get("/u/nobody/").status_code == 404
    assert client.get(f"/e/{uuid.uuid4()}/").status_code == 404
    user = User.objects.create(username="dora", email="dora@example.com")
    assert client.get(f"/e/{user.id}/").status_code == 404  # a user is not an entry


def test_user_content_is_escaped_and_only_http_links_are_links(client):
    author = User.objects.create(username="eve", email="eve@example.com", name="<b>Eve</b>")
    with pytest.raises(ValidationError):  # the Entry kind's URLField refuses it
        Entry.objects.create(
            user=author, title="<script>alert('x')</script>", link="javascript:alert(1)"
        )
    # Written elsewhere (a script, the raw entity admin), past the kind's validation.
    Entity.objects.create(
        kind="entry",
        user=author.id,
        title="<script>alert('x')</script>",
        link="javascript:alert(1)",
        published=now(),
    )
    html = client.get("/").content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "&lt;b&gt;Eve&lt;/b&gt;" in html
    assert 'href="javascript:' not in html


# --- likes and comments ------------------------------------------------------------------------


def test_like_toggles_and_comments_show_oldest_first(client):
    author = User.objects.create(username="fay", email="fay@example.com")
    entry = Entry.objects.create(
        user=author, title="Schemaless MySQL", link="https://example.com/schemaless"
    )
    sign_up(client, "gus")

    response = client.post(f"/e/{entry.id}/like/", {"next": "/"})
    assert response.status_code == 302 and response["Location"] == "/"
    client.post(f"/e/{entry.id}/like/")  # twice from the entry page: unlike, then like again
    client.post(f"/e/{entry.id}/like/")
    (like,) = Like.objects.filter_index(entry_id=entry.id).order_by("created")
    assert like["user_id"] == User.named("gus").id

    for body in ["first!", "second <i>thoughts</i>"]:
        response = client.post(f"/e/{entry.id}/comment/", {"body": body})
        assert response.status_code == 302
    page = client.get(f"/e/{entry.id}/").content.decode()
    assert page.index("first!") < page.index("second &lt;i&gt;thoughts&lt;/i&gt;")
    assert "@gus</a>" in page and "Unlike" in page

    feed = client.get("/").content.decode()
    assert "1 like" in feed and "2 comments" in feed

    assert client.post(f"/e/{entry.id}/comment/", {"body": ""}).status_code == 400
    assert Comment.objects.filter_index(entry_id=entry.id).order_by("created").count() == 2


def test_liking_unliking_and_commenting_are_confirmed_like_posting(client):
    author = User.objects.create(username="ivy", email="ivy@example.com")
    entry = Entry.objects.create(
        user=author, title="Friends <&> feeds " + "x" * 80, link="https://example.com/"
    )
    sign_up(client, "jon")
    shown = "Friends &lt;&amp;&gt; feeds " + "x" * 41 + "…"  # cut to 60 characters, escaped

    page = client.post(f"/e/{entry.id}/like/", {"next": "/"}, follow=True).content.decode()
    assert f'<li class="success">You like “{shown}”.</li>' in page
    page = client.post(f"/e/{entry.id}/like/", follow=True).content.decode()
    assert f'<li class="success">You no longer like “{shown}”.</li>' in page
    response = client.post(f"/e/{entry.id}/comment/", {"body": "Nice."}, follow=True)
    assert '<li class="success">Comment added.</li>' in response.content.decode()
    assert response.redirect_chain == [(f"/e/{entry.id}/", 302)]
    # Shown once: the next page has no message left.
    assert 'class="messages"' not in client.get(f"/e/{entry.id}/").content.decode()


def test_liking_needs_a_user(client):
    author = User.objects.create(username="hal", email="hal@example.com")
    entry = Entry.objects.create(user=author, title="t", link="https://example.com/")
    response = client.post(f"/e/{entry.id}/like/")
    assert response.status_code == 302 and response["Location"] == "/users/"
    assert not Like.objects.filter_index(entry_id=entry.id).order_by("created").exists()


# --- the live index ------------------------------------------------------------------------------
