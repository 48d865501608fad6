"""What every page of the store's admin shares: URLs, breadcrumbs, the admin log entry of an
entity (named by its id), and query-string edits."""

from __future__ import annotations

import json
from typing import Any

import django
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest
from django.urls import reverse

from ..config.indexes import is_identifier


def entity_url(entity_id: Any, view: str = "change") -> str:
    """The admin URL of an entity (``view``: change, delete or history)."""
    return reverse(f"admin:schemaless_store_entity_{view}", args=[str(entity_id)])


def log_change(request: HttpRequest, obj: Any, object_id: str, flag: int, message: Any) -> None:
    # LogEntry.objects.log_actions() records obj.pk, which for an entity is a per-shard
    # added_id: the log must name the entity by its id so its links lead back to it.
    user_id = request.user.pk
    assert user_id is not None, "the admin's views are for signed-in staff"
    LogEntry.objects.create(
        user_id=user_id,
        content_type_id=ContentType.objects.get_for_model(type(obj)).pk,
        object_id=object_id,
        object_repr=str(obj)[:200],
        action_flag=flag,
        change_message=json.dumps(message) if isinstance(message, list) else message,
    )


def crumbs(opts: Any, *tail: tuple[str, str]) -> dict[str, Any]:
    """Breadcrumbs Home > the app > ``tail`` (label, url; the current page has no url)."""
    return {
        "crumbs": [
            ("Home", reverse("admin:index")),
            (opts.app_config.verbose_name, reverse("admin:app_list", args=[opts.app_label])),
            *tail,
        ],
        "crumbs_as_list": django.VERSION >= (6, 0),
    }


def with_query(request: HttpRequest, **changes: Any) -> str:
    """``?query`` of the current URL with some parameters set (or removed when None)."""
    params = request.GET.copy()
    for key, value in changes.items():
        params.pop(key, None)
        if value not in (None, ""):
            params[key] = value
    return "?" + params.urlencode() if params else "?"


def changelist_url() -> str:
    return reverse("admin:schemaless_store_entity_changelist")


def health_url(index_name: str = "") -> str:
    """The health page, scrolled to an index's section (only for a name that can be one)."""
    url = reverse("admin:schemaless_store_indexstate_changelist")
    return f"{url}#index-{index_name}" if is_identifier(index_name) else url


def page_number(request: HttpRequest) -> int:
    try:
        return max(1, int(request.GET.get("p", 1)))
    except ValueError:
        return 1


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nothing can be added, changed or deleted: a record or an immutable store."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
