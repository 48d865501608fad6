"""The admin's versions pages: an entity's history and a cell column's versions, listed and
compared; the cell store's row page; permissions and bad input."""

from __future__ import annotations

import html
import re
import uuid

import pytest
from django.test import override_settings

from schemaless_store.models import Cell, Entity
from tests.support import STORE
from tests.support.admin import client_for

pytestmark = STORE

HISTORY = override_settings(SCHEMALESS={"BUCKETS": 4096, "HISTORY": True})
CELLS = "/admin/schemaless_store/cell/"


def versions_url(entity) -> str:
    return f"/admin/schemaless_store/entity/{entity.id}/versions/"


def comparison(response) -> dict[str, tuple[str, str, str]]:
    """{property: (change, before, after)} from the comparison table."""
    content = response.content.decode()
    table = re.search(r'<table id="comparison">(.*?)</table>', content, re.DOTALL)
    assert table, "no comparison on the page"
    rows = re.findall(
        r'<tr class="change-\w+"><td>(.*?)</td><td>(\w+)</td><td><code>(.*?)</code></td>'
        r"<td><code>(.*?)</code></td></tr>",
        table.group(1),
    )
    return {html.unescape(n): (s, html.unescape(a), html.unescape(b)) for n, s, a, b in rows}


@HISTORY
def test_an_entitys_versions_are_listed_and_two_are_compared():
    entity = Entity.objects.create(title="first", n=1, gone="x")
    entity["title"] = "second"
    entity["n"] = 1.0
    del entity["gone"]
    entity["tags"] = ["a"]
    entity.save()
    client = client_for("view_entity")
    response = client.get(versions_url(entity))
    assert response.status_code == 200
    content = response.content.decode()
    assert 'id="version-1"' in content and 'id="version-2"' in content
    assert content.index('id="version-2"') < content.index('id="version-1"')  # newest first
    assert comparison(response) == comparison(client.get(versions_url(entity) + "?a=1&b=2"))
    changes = comparison(client.get(versions_url(entity) + "?a=1&b=2"))
    assert changes["title"] == ("changed", '"first"', '"second"')
    assert changes["n"] == ("changed", "1", "1.0")  # an int and a float differ in the store
    assert changes["gone"] == ("removed", '"x"', "")
    assert changes["tags"] == ("added", "", '["a"]')
    assert "id" not in changes  # the entity's id, not a property: the body view has none
    assert '"id"' not in re.search(r'id="version-1".*?</pre>', content, re.S).group(0)
    assert (
        "Versions"
        in client.get(f"/admin/schemaless_store/entity/{entity.id}/change/").content.decode()
    )


@HISTORY
@pytest.mark.parametrize("query", ["?a=7&b=1", "?a=x&b=1", "?a=1&b=-2"])
def test_bad_version_numbers_are_a_message_not_an_error(query):
    entity = Entity.objects.create(title="t")
    response = client_for("view_entity").get(versions_url(entity) + query)
    assert response.status_code == 200
    content = html.unescape(response.content.decode())
    assert "there is no version" in content or "is not a version number" in content
    assert 'id="comparison"' not in content


def test_with_history_off_the_page_says_how_to_turn_it_on():
    entity = Entity.objects.create(title="t")
    response = client_for("view_entity").get(versions_url(entity))
    assert response.status_code == 200
    assert "SCHEMALESS[&#x27;HISTORY&#x27;] = True" in response.content.decode()


@HISTORY
def test_versions_need_the_view_permission():
    entity = Entity.objects.create(title="t")
    client = client_for()
    assert client.get(versions_url(entity)).status_code == 403
    assert client.get(CELLS).status_code == 403
    assert client.get(CELLS + "versions/?row=x&column=users").status_code == 403


def test_a_rows_cells_and_a_columns_versions():
    row = uuid.uuid4()
    Cell.objects.put(row, "users", {"email": "a@example.com"})
    Cell.objects.put(row, "users", {"email": "b@example.com", "name": "B"})
    Cell.objects.put(row, "schools", {"name": "MIT"})
    client = client_for("view_cell")
    response = client.get(CELLS, {"row": row.hex})
    assert response.status_code == 200
    content = response.content.decode()
    assert "schools" in content and "users" in content
    link = re.search(r'href="([^"]*versions/\?[^"]*column=users[^"]*)"', content)
    assert link
    versions = client.get(html.unescape(link.group(1)) + "&a=1&b=2")
    assert versions.status_code == 200
    changes = comparison(versions)
    assert changes["email"] == ("changed", '"a@example.com"', '"b@example.com"')
    assert changes["name"] == ("added", "", '"B"')


@pytest.mark.parametrize(
    ("params", "message"),
    [({"row": "not-a-uuid"}, "is not a row key"), ({"row": uuid.uuid4().hex}, "has no cells")],
)
def test_the_row_page_handles_bad_and_empty_rows(params, message):
    response = client_for("view_cell").get(CELLS, params)
    assert response.status_code == 200
    assert message in html.unescape(response.content.decode())


def test_cells_cannot_be_added_changed_or_deleted_in_the_admin():
    row = uuid.uuid4()
    cell = Cell.objects.put(row, "users", {"v": 1})
    client = client_for("view_cell", "add_cell", "change_cell", "delete_cell")
    assert client.get(CELLS + "add/").status_code == 404
    assert client.get(f"{CELLS}{cell.added_at}/change/").status_code == 404
    assert client.get(f"{CELLS}{cell.added_at}/delete/").status_code == 404
    bad = client.get(CELLS + "versions/", {"row": row.hex, "column": "_x" * 40})
    assert bad.status_code == 302  # back to the row page, with the reason as a message
