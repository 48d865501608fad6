"""The admin tests' addresses, a logged-in client with given permissions, and the edit box."""

from __future__ import annotations

import html
import re
from typing import Any

from django.test import Client

from tests.support.factories import StaffFactory

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
