"""The demo project's error pages: a missing page is a 404 in the site's look (not Django's DEBUG
page listing the URL patterns), the admin's refusals are 403 pages in the admin's look, and the
demo runs with DEBUG off unless ``DJANGO_DEBUG=1``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from django.test import RequestFactory
from django.views.defaults import server_error

from tests.support import STORE
from tests.support.feed import FOREIGN, ROOT

pytestmark = STORE

SITE = "<title>Page not found · schemaless_store demo</title>"
DEBUG_PAGE = ("Using the URLconf", "urlpatterns", "DEBUG = True", "Django tried these URL patterns")


@pytest.fixture(autouse=True)
def debug_off(feed_site, settings) -> None:
    assert settings.DEBUG is False


def test_a_missing_page_is_a_404_in_the_sites_look(client):
    response = client.get("/no/such/<page>/")
    assert response.status_code == 404
    html = response.content.decode()
    assert SITE in html
    assert '<a class="brand" href="/">Feed</a>' in html  # the site's header
    assert "There is no page at <code>/no/such/&lt;page&gt;/</code>" in html  # escaped
    for text in DEBUG_PAGE:
        assert text not in html


@pytest.mark.parametrize("path", ["/u/nobody/", f"/e/{uuid.uuid4()}/"])
def test_a_missing_user_or_entry_is_the_same_page(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert SITE in response.content.decode()
    assert "no user named" not in response.content.decode()  # the exception's text is not shown


def test_the_404_page_knows_who_the_visitor_acts_as(client):
    client.post("/signup/", {"username": "kim", "email": "kim@example.com", "name": ""})
    html = client.get("/nothing-here/").content.decode()
    assert '<a href="/u/kim/" id="viewer">@kim</a>' in html


def test_adding_an_entity_in_the_admin_is_a_403_in_the_admins_look(admin_client):
    response = admin_client.get("/admin/schemaless_store/entity/add/")
    assert response.status_code == 403
    html = response.content.decode()
    assert "<h1>403 Forbidden</h1>" not in html  # Django's bare page
    assert 'id="header"' in html and 'id="site-name"' in html  # the admin's header
    assert 'href="/static/admin/css/base.css"' in html  # and its styles
    assert "<title>Forbidden | Django site admin</title>" in html
    assert "Entities, for example, are never added through the admin" in html
    assert '<a href="/admin/">Home</a> &rsaquo; Forbidden' in html
    assert "Log out" in html  # the user tools: the visitor is still logged in


def test_a_missing_admin_page_is_a_404_in_the_admins_look(admin_client):
    response = admin_client.get("/admin/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'id="site-name"' in html and "<h2>Page not found</h2>" in html
    for text in DEBUG_PAGE:
        assert text not in html


def test_a_server_error_page_stands_alone(settings):
    response = server_error(RequestFactory().get("/"))
    assert response.status_code == 500
    html = response.content.decode()
    assert "<title>Server error · schemaless_store demo</title>" in html
    assert 'id="server-error"' in html


@pytest.mark.parametrize(
    ("value", "debug"), [(None, False), ("", False), ("1", True), ("0", False)]
)
def test_the_demo_runs_with_debug_off_unless_asked(tmp_path, value, debug):
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env.update(SCHEMALESS_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="project.settings")
    env.pop("DJANGO_DEBUG", None)
    if value is not None:
        env["DJANGO_DEBUG"] = value
    found = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.DEBUG)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert found == str(debug)
