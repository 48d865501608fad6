"""``ShardUnavailablePage``: a page that needs a shard that is down answers a clear 503 page
(``Retry-After``, the alias in ``X-Schemaless-Unavailable``), pages that do not need it keep
serving, and the site recovers by itself when the shard returns (issue 37)."""

from __future__ import annotations

import contextlib
from typing import Any
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from django.contrib.sessions.backends.db import SessionStore
from django.db import OperationalError
from django.http import HttpResponse
from django.test import AsyncClient, Client, RequestFactory

from project.feed.models import Entry, User
from schemaless_store.exceptions import NotOwner, ShardUnavailable
from schemaless_store.middleware import UNAVAILABLE_HEADER, ShardUnavailablePage
from schemaless_store.sql.server_errors import CR_CONN_HOST_ERROR, ER_LOCK_DEADLOCK
from schemaless_store.topology import bucket_map
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


def test_a_move_left_mid_flip_past_move_wait_is_a_503_naming_the_shard():
    """A mover killed mid-flip: writes give up with NotOwner and reads with StaleRead after
    MOVE_WAIT, until the move is run again; the user is told to try again, not shown a 500."""
    refused = _answer(NotOwner("shard_0", {3, 4}))
    assert refused is not None and refused.status_code == 503
    assert refused[UNAVAILABLE_HEADER] == "shard_0 (moving)"
    try:
        try:
            raise bucket_map.StaleRead()
        except bucket_map.StaleRead as exc:
            raise RuntimeError("while rendering") from exc
    except RuntimeError as wrapped:
        stale = _answer(wrapped)
    assert stale is not None and stale.status_code == 503
    assert stale["Retry-After"] == "5"


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
    author = User.objects.create(username="writer", email="w@example.com")
    Entry.objects.create(user=author, title="Before the outage", link="https://example.com/before")
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


# --- a database found down outside a view: handler500 -------------------------------------------


def _session_save_failing(exception: Exception) -> Any:
    """The session's save (``SessionMiddleware.process_response``, after the view) raising
    ``exception``, as the database backend raises it when ``default`` is down."""
    return mock.patch.object(SessionStore, "save", side_effect=exception)


@STORE
def test_default_down_when_the_session_is_saved_after_the_view_is_a_503(site):
    User.objects.create(username="writer", email="w@example.com")
    client = Client(raise_request_exception=False)
    refused = OperationalError(CR_CONN_HOST_ERROR, "Can't connect to server on '127.0.0.1'")
    with _session_save_failing(refused):
        response = client.post("/act-as/", {"username": "writer"})
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response[UNAVAILABLE_HEADER] == "database"
    assert "Temporarily unavailable" in response.content.decode()


@STORE
def test_default_really_down_when_the_session_is_saved_is_a_503(site):
    """``default`` taken away between the view and the session's save: the save meets a
    refused port (MariaDB) or a database file that cannot be opened (SQLite), for real."""
    User.objects.create(username="writer", email="w@example.com")
    client = Client(raise_request_exception=False)
    real_save = SessionStore.save
    with contextlib.ExitStack() as outage:

        def save(store: SessionStore, must_create: bool = False) -> None:
            outage.enter_context(shard_down("default"))
            real_save(store, must_create)

        with mock.patch.object(SessionStore, "save", save):
            response = client.post("/act-as/", {"username": "writer"})
    assert response.status_code == 503
    assert response[UNAVAILABLE_HEADER] == "database"
    assert client.get("/signup/").status_code == 200  # default is back: served again


@STORE
def test_another_error_after_the_view_is_still_the_500_page(site):
    User.objects.create(username="writer", email="w@example.com")
    client = Client(raise_request_exception=False)
    with _session_save_failing(OperationalError(ER_LOCK_DEADLOCK, "Deadlock found")):
        response = client.post("/act-as/", {"username": "writer"})
    assert response.status_code == 500
    assert "Server error" in response.content.decode()
    assert UNAVAILABLE_HEADER not in response


@STORE
@pytest.mark.asyncio
async def test_under_asgi_too_default_down_after_the_view_is_a_503(site):
    """Django's async handler answers the exception from another thread (``sync_to_async``),
    where ``server_error`` still finds it."""
    await sync_to_async(User.objects.create)(username="writer", email="w@example.com")
    client = AsyncClient(raise_request_exception=False)
    refused = OperationalError(CR_CONN_HOST_ERROR, "Can't connect to server on '127.0.0.1'")
    with _session_save_failing(refused):
        response = await client.post("/act-as/", {"username": "writer"})
    assert response.status_code == 503
    assert response[UNAVAILABLE_HEADER] == "database"
