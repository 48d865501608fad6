"""The admin tests' addresses, a logged-in client with given permissions, and the edit box."""

from __future__ import annotations

import html
import re
from typing import Any

from django.test import Client

from tests.support.factories import StaffFactory
from tests.support.raw import index_rows

LIST = "/admin/schemaless_store/entity/"
HEALTH = "/admin/schemaless_store/indexstate/"
CHECK = "/admin/schemaless_store/indexstate/check/"
VIEW = ("view_entity", "view_indexstate")
CHANGE_PERMS = (*VIEW, "change_entity", "change_indexstate")


def change_url(entity: Any) -> str:
    return f"{LIST}{entity.id}/change/"


def client_for(*perms: str, staff: bool = True, enforce_csrf: bool = False) -> Client:
    """A client logged in as a new user (staff unless told) with these permissions."""
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(StaffFactory(is_staff=staff, perms=perms))
    return client


def textarea(response: Any) -> str:
    """The edit box's text on an entity's change page."""
    match = re.search(r"<textarea[^>]*>(.*?)</textarea>", response.content.decode(), re.DOTALL)
    assert match, "no edit form on the page"
    return html.unescape(match.group(1)).lstrip("\n")


def shown_ids(response) -> list[str]:
    """The ids the entity list shows, in order."""
    pattern = r'<th class="field-id[^"]*"[^>]*><a href="[^"]+">([0-9a-f-]{36})</a>'
    return re.findall(pattern, response.content.decode())


def link_rows() -> set[tuple]:
    """``index_link``'s rows on every shard: ``(value, entity id)``."""
    return {(value, entity_id) for value, entity_id, _alias in index_rows("index_link")}


def loaded_marker(response) -> str:
    match = re.search(r'name="loaded" value="([^"]*)"', response.content.decode())
    assert match
    return match.group(1)


def post_body(client: Client, entity: Any, body: str, response=None, **extra):
    """Post ``body`` in the entity's edit box, as loaded by ``response`` (or a fresh GET)."""
    response = response or client.get(change_url(entity))
    data = {"body": body, "loaded": loaded_marker(response), "_continue": "1", **extra}
    return client.post(change_url(entity), data)
