"""``ShardUnavailablePage``: a page that needs a shard that is down answers a clear 503 page
(``Retry-After``, the alias in ``X-Schemaless-Unavailable``), pages that do not need it keep
serving, and the site recovers by itself when the shard returns (issue 37)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError
from django.http import HttpResponse
from django.test import RequestFactory

from project.feed import entities
from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.middleware import UNAVAILABLE_HEADER, ShardUnavailablePage
from schemaless_store.server_errors import CR_CONN_HOST_ERROR, ER_LOCK_DEADLOCK
from tests.support import STORE
from tests.support.outage import shard_down

MIDDLEWARE = "schemaless_store.middleware.ShardUnavailablePage"


def _answer(exception: Exception) -> HttpResponse | None:
    middleware = ShardUnavailablePage(lambda request: HttpResponse())
    return middleware.process_exception(RequestFactory().get("/"), exception)


def test_a_shard_unavailable_is_a_503_with_retry_after_and_the_alias():
    response = _answer(ShardUnavailable("shard_1", "Can't connect"))
    assert response is not None
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response[UNAVAILABLE_HEADER] == "shard_1"
    assert b"Temporarily unavailable" in response.content
    assert b"shard_1" not in response.content  # the page does not name the store's insides


def test_a_refused_connection_from_django_or_one_raised_from_it_is_a_503():
    refused = OperationalError(CR_CONN_HOST_ERROR, "Can't connect to server on '127.0.0.1'")
    assert _answer(refused).status_code == 503  # type: ignore[union-attr]
    try:
        try:
            raise refused
        except OperationalError as exc:
            raise RuntimeError("while rendering") from exc
    except RuntimeError as wrapped:
        assert _answer(wrapped).status_code == 503  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "exception",
    [OperationalError(ER_LOCK_DEADLOCK, "Deadlock found"), ValueError("a bug"), KeyError("x")],
)
def test_other_errors_are_left_to_django(exception: Exception):
    assert _answer(exception) is None


@pytest.fixture
def site(feed_site: None, settings: Any) -> None:
    settings.MIDDLEWARE = [MIDDLEWARE, *settings.MIDDLEWARE]


@STORE
def test_a_shard_down_gives_the_feed_a_503_page_while_others_serve_and_it_recovers(site, client):
    author = entities.create_user("writer", "w@example.com")
    entities.post_entry(author, "Before the outage", "https://example.com/before")
    assert client.get("/").status_code == 200
    with shard_down("shard_1"):
        home = client.get("/")
        assert home.status_code == 503
        assert home[UNAVAILABLE_HEADER] == "shard_1"
        assert "Temporarily unavailable" in home.content.decode()
        assert client.get("/signup/").status_code == 200  # needs no shard
    home = client.get("/")
    assert home.status_code == 200
    assert "Before the outage" in home.content.decode()
