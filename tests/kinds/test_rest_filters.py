"""The REST extra as DRF users expect it (issue 44, item 5), through DRF's ``APIClient``:
filters through the kind's indexes with 400s and never 500s (``?published=2022-05-06``),
``?ordering=`` among the indexed orders, cursor pages under DRF's names, ``?page=`` and
``?ordering=`` not taken for fields, a default ordering that does not bind every filter, and a
unique clash naming the field and not the entity holding the value."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.contrib.auth.models import Permission, User
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from tests.facesapp.models import Novel
from tests.support import STORE

pytestmark = STORE

URL = "/faces-api/novels/"


@pytest.fixture
def api() -> APIClient:
    user = User.objects.create_user(f"api{uuid.uuid4().hex[:8]}", password="pw")
    for codename in ("view_novel", "add_novel", "change_novel"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def novels() -> list[Novel]:
    made = []
    for n, (title, genre) in enumerate(
        [("Dune", "sf"), ("Maigret", "crime"), ("Solaris", "sf"), ("Odes", "poetry")]
    ):
        published = dt.datetime(2022, 5, 5 + n, 10 + n, tzinfo=dt.UTC)
        made.append(
            Novel.objects.create(title=title, genre=genre, isbn=str(n), published=published)
        )
    return made


def titles(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [r["title"] for r in response.json()["results"]]


def test_filters_by_a_date_and_by_ranges(api, novels):
    assert titles(api.get(URL, {"published": "2022-05-06"})) == ["Maigret"]  # that day
    assert titles(api.get(URL, {"published__gte": "2022-05-07"})) == ["Odes", "Solaris"]
    exact = novels[2].published.isoformat()
    assert titles(api.get(URL, {"published": exact})) == ["Solaris"]
    assert titles(api.get(URL, {"stars__gte": "3", "stars__lt": "4"})) != []


def test_ordering_among_the_indexed_orders(api, novels):
    assert titles(api.get(URL)) == ["Odes", "Solaris", "Maigret", "Dune"]  # ordering = -published
    assert titles(api.get(URL, {"ordering": "published"})) == ["Dune", "Maigret", "Solaris", "Odes"]
    assert titles(api.get(URL, {"ordering": "title"})) == ["Dune", "Maigret", "Odes", "Solaris"]
    refused = api.get(URL, {"ordering": "genre"})
    assert refused.status_code == 400
    assert "Novel lists can be ordered by" in refused.json()["ordering"][0]
    assert "published" in refused.json()["ordering"][0]


def test_a_default_ordering_does_not_bind_every_filter(api, novels):
    """ordering = "-published"; isbn has an index of its own, none with published."""
    assert titles(api.get(URL, {"isbn": "2"})) == ["Solaris"]
    assert titles(api.get(URL, {"genre": "sf"})) == ["Solaris", "Dune"]  # [genre, published]
    # Asked for, an order no index serves with the filter is a 400.
    assert api.get(URL, {"isbn": "2", "ordering": "title"}).status_code == 400


def test_cursor_pages_under_drfs_names(api, novels):
    first = api.get(URL, {"page_size": 3}).json()
    assert set(first) == {"next", "previous", "results"}
    assert len(first["results"]) == 3 and "cursor=" in first["next"]
    rest = api.get(first["next"]).json()
    assert [r["title"] for r in rest["results"]] == ["Dune"] and rest["next"] is None
    assert first["previous"] is None
    # One at a time, forward to the end, then back to the first page by "previous".
    pages, url = [], f"http://testserver{URL}?page_size=1"
    while url:
        pages.append(api.get(url).json())
        url = pages[-1]["next"]
    assert [p["results"][0]["title"] for p in pages] == ["Odes", "Solaris", "Maigret", "Dune"]
    back, url = [], pages[-1]["previous"]
    while url:
        back.append(api.get(url).json())
        url = back[-1]["previous"]
    assert [p["results"][0]["title"] for p in back] == ["Maigret", "Solaris", "Odes"]
    page = api.get(URL, {"page": "2"})
    assert page.status_code == 400
    assert "follow 'next'" in page.json()["page"][0]
    assert "has no field 'page'" not in page.content.decode()
    assert api.get(URL, {"page_size": "0"}).status_code == 400


def test_a_unique_clash_names_the_field_not_the_holder(api, novels):
    response = api.post(URL, {"title": "Again", "isbn": "1"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"isbn": ["Novel with this Isbn already exists."]}
    assert str(novels[1].id) not in response.content.decode()


def test_refusals_are_400s_that_say_why(api, novels):
    for params, field, said in [
        ({"published": "yesterday"}, "published", "invalid format"),
        ({"published": "2022-13-45"}, "published", "invalid"),
        ({"stars": "many"}, "stars", "must be an integer"),
        ({"colour": "red"}, "colour", "Novel has no field 'colour'; filter by one of"),
        ({"title__contains": "x"}, "title__contains", "unknown lookup 'contains'"),
        ({"genre": "sf", "stars": "3"}, "non_field_errors", "Novel: no index serves"),
        ({"cursor": "forged"}, "cursor", ""),
    ]:
        response = api.get(URL, params)
        assert response.status_code == 400, (params, response.content)
        assert said in response.json()[field][0], params
    fix = api.get(URL, {"genre": "sf", "stars": "3"}).json()["non_field_errors"][0]
    assert "To serve it: declare Index(" in fix and "of kind 'novel'" in fix


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    params=st.dictionaries(
        st.sampled_from(
            [
                "published",
                "published__gte",
                "stars",
                "stars__in",
                "title__lt",
                "genre",
                "isbn",
                "in_print",
                "ordering",
                "page",
                "back",
                "page_size",
                "size",
                "cursor",
                "format",
                "x__y",
            ]
        )
        | st.text(max_size=10),
        st.text(max_size=30) | st.sampled_from(["2022-05-06", "-published", "1", "sf", ""]),
        max_size=3,
    )
)
@example(params={"published": "2022-05-06"})  # the 500
@example(params={"published__gte": "2022-05-06T10:00", "ordering": "-published"})
@example(params={"stars__in": "1,x"})
def test_no_query_string_gives_a_500(api, params):
    assert api.get(URL, params).status_code in (200, 400, 404)
