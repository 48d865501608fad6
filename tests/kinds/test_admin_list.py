"""A kind's admin list as Django's (issue 44, item 4): ``list_display`` callables and methods,
choices by their labels, ``list_filter`` and ``search_fields`` through the kind's indexes,
``ordering`` and ``?o=``, ``?p=`` pages, and no 500 for any query string."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.facesapp.models import Novel
from tests.support import STORE

pytestmark = STORE

LIST = "/admin/facesapp/novel/"


def day(n: int) -> dt.datetime:
    return dt.datetime(2020, 1, n, tzinfo=dt.UTC)


def titles(client: Client, query: str = "") -> list[str]:
    response = client.get(LIST + query)
    assert response.status_code == 200
    return re.findall(r'<th class="field-1"><a href="[^"]+">([^<]*)</a>', response.content.decode())


def page_text(client: Client, query: str = "") -> str:
    response = client.get(LIST + query)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def novels() -> list[Novel]:
    specs = [
        ("Dune", "sf", "111", True),
        ("Maigret", "crime", "222", True),
        ("Solaris", "sf", "333", False),
        ("Odes", "poetry", "444", True),
        ("Dust", "crime", "555", False),
    ]
    return [
        Novel.objects.create(title=t, genre=g, isbn=i, in_print=p, published=day(n + 1))
        for n, (t, g, i, p) in enumerate(specs)
    ]


def test_list_display_callables_methods_and_choice_labels(admin_client, novels):
    text = page_text(admin_client)
    # A callable, a model method and an admin method, with @admin.display's labels.
    assert "Loud title" in text and "ODES" in text  # loud(novel)
    assert "Shout" in text  # Novel.shout
    assert "Stars" in text and "***" in text  # NovelAdmin.stars_shown
    # Choices by their labels, not their codes; a boolean as Django's icon.
    assert '<td class="field-2">Poetry</td>' in text
    assert '<td class="field-2">poetry</td>' not in text
    assert "icon-no.svg" in text and "icon-yes.svg" in text


def test_ordering_and_pages(admin_client, novels):
    # NovelAdmin.ordering = ["-published"], 3 a page: newest first, then page 2.
    assert titles(admin_client) == ["Dust", "Odes", "Solaris"]
    assert titles(admin_client, "?p=2") == ["Maigret", "Dune"]
    assert 'href="?p=2"' in page_text(admin_client)
    assert 'href="?p=2"' not in page_text(admin_client, "?p=2")
    # ?o= by a column an index orders by: title (column 1, after the action checkbox).
    assert titles(admin_client, "?o=1") == ["Dune", "Dust", "Maigret"]
    assert titles(admin_client, "?o=-1") == ["Solaris", "Odes", "Maigret"]
    assert titles(admin_client, "?o=4&p=2") == ["Odes", "Dust"]  # published, oldest first
    text = page_text(admin_client, "?o=1")
    assert 'class="sortable sorted ascending"' in text and 'href="?o=-1"' in text


def test_list_filter_through_indexes(admin_client, novels):
    text = page_text(admin_client)
    assert 'href="?genre__exact=crime">Crime</a>' in text
    assert 'href="?in_print__exact=0">No</a>' in text
    assert titles(admin_client, "?genre__exact=crime") == ["Dust", "Maigret"]
    assert titles(admin_client, "?in_print__exact=0") == ["Dust", "Solaris"] or titles(
        admin_client, "?in_print__exact=0"
    ) == ["Solaris", "Dust"]
    # A filter with no index for the default order is listed in the index's order, and said.
    assert "Not sorted by published" in page_text(admin_client, "?in_print__exact=0")
    # Date ranges, as Django's date filter links them.
    assert titles(
        admin_client, f"?published__gte={day(2).date()}&published__lt={day(4).date()}"
    ) == [
        "Solaris",
        "Maigret",
    ]


def test_search_fields_through_indexes(admin_client, novels):
    assert titles(admin_client, "?q=333") == ["Solaris"]  # =isbn
    assert sorted(titles(admin_client, "?q=Du")) == ["Dune", "Dust"]  # ^title: starts with
    # A search with a filter no index serves together is refused, naming what is missing.
    refused = page_text(admin_client, "?q=Du&genre__exact=crime").replace("&#x27;", "'")
    assert "Novel: no index serves filter_index(genre='crime'" in refused
    assert "To serve it: declare Index(" in refused
    assert "the list did not run" in refused
    assert titles(admin_client, "?q=zzz") == []
    assert "No novels match" in page_text(admin_client, "?q=zzz")
    assert titles(admin_client, f"?q={novels[3].id}") == ["Odes"]  # an id


def test_actions_delete_selected_deletes(admin_client, novels):
    ids = [str(novels[0].id), str(novels[1].id)]
    confirm = admin_client.post(LIST, {"action": "delete_selected", "_selected_action": ids})
    assert confirm.status_code == 200
    assert "Are you sure" in confirm.content.decode() and "Dune" in confirm.content.decode()
    assert Novel.objects.all().count() == 5  # nothing yet
    done = admin_client.post(
        LIST, {"action": "delete_selected", "_selected_action": ids, "post": "yes"}, follow=True
    )
    assert done.status_code == 200
    assert "Successfully deleted 2 novels." in done.content.decode()
    assert sorted(n.title for n in Novel.objects.all()) == ["Dust", "Odes", "Solaris"]
    nothing = admin_client.post(LIST, {"action": "delete_selected"}, follow=True)
    assert "Items must be selected" in nothing.content.decode()


def test_a_custom_action_gets_the_kinds_queryset(admin_client, novels):
    ids = [str(novels[0].id), str(novels[3].id)]
    done = admin_client.post(LIST, {"action": "out_of_print", "_selected_action": ids}, follow=True)
    assert "2 marked out of print." in done.content.decode()
    assert sorted(n.title for n in Novel.objects.filter(in_print=False)) == [
        "Dune",
        "Dust",
        "Odes",
        "Solaris",
    ]


def test_refusals_are_messages_not_500s(admin_client, novels):
    for query, said in [
        ("?p=0", "is not a page number"),
        ("?p=abc", "is not a page number"),
        ("?p=99999999", "narrow it with a filter or a search"),
        ("?o=99", "names no column"),
        ("?o=1.4", "sorted by one column at a time"),
        ("?o=2", "no index serves"),  # genre: no index orders by it alone
        ("?colour__exact=red", "cannot be filtered by 'colour__exact'"),
        ("?stars__exact=many", "must be an integer"),
        ("?published__gte=yesterday", "invalid format"),
    ]:
        text = page_text(admin_client, query)
        assert said in text.replace("&#x27;", "'"), query
        assert "the list did not run" in text


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    params=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "q",
                    "p",
                    "o",
                    "genre__exact",
                    "in_print__exact",
                    "published__gte",
                    "stars",
                    "title__lt",
                    "e",
                    "x__y__z",
                    "_to_field",
                ]
            )
            | st.text(max_size=12),
            st.text(max_size=30),
        ),
        max_size=4,
    )
)
def test_no_query_string_gives_a_500(admin_client, params):
    response = admin_client.get(LIST, dict(params))
    assert response.status_code == 200
