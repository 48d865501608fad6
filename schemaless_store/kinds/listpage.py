"""What a kind's list page draws (:mod:`.changelist` decides what it lists): the columns of
``list_display`` as Django's admin draws them (callables, the admin's and the model's methods,
``@admin.display`` labels, choices by their labels, booleans as icons, dates localized), the
sortable headers (``?o=``) and the ``list_filter`` choices."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.admin.utils import (
    display_for_field,
    display_for_value,
    label_for_field,
    lookup_field,
)
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from ..admin.common import with_query
from .admin_widgets import change_url
from .changelist import ORDER_VAR, PAGE_VAR, POPUP_VAR, KindList, Listing
from .references import ReferenceField, prefetch, reference_names

ACTION_CHECKBOX = "action_checkbox"


def column_label(kind_list: KindList, column: Any) -> str:
    if column == "id":
        return "Id"
    try:
        return str(label_for_field(column, kind_list.model, kind_list.admin))
    except (AttributeError, FieldDoesNotExist):
        return str(column)


def cell(kind_list: KindList, column: Any, entity: Any) -> Any:
    """One value of the list, as Django's change list shows it (a value that does not fit its
    field, as stored)."""
    empty = kind_list.admin.get_empty_value_display()
    if column == "id":
        return str(entity.id)
    try:
        model_field, attr, value = lookup_field(column, entity, kind_list.admin)
    except (AttributeError, FieldDoesNotExist, KeyError):
        return empty
    if isinstance(model_field, ReferenceField):
        return reference_cell(kind_list, entity, column, value)
    try:
        if model_field is None:
            return display_for_value(value, empty, boolean=getattr(attr, "boolean", False))
        return display_for_field(value, model_field, empty)
    except (TypeError, ValueError, AttributeError):
        return display_for_value(value, empty)


def reference_cell(kind_list: KindList, entity: Any, name: str, target: Any) -> Any:
    """A reference: the referenced entity, linked to its admin page; a dangling one's id."""
    if target is None:
        key = entity._properties().get(name)
        empty = kind_list.admin.get_empty_value_display()
        return empty if key is None else format_html("{} (no such entity)", key)
    url = change_url(kind_list.admin.admin_site, target)
    return format_html('<a href="{}">{}</a>', url, target) if url else str(target)


def headers(kind_list: KindList, listing: Listing, columns: list[Any]) -> list[dict[str, Any]]:
    """The column headers; a sortable one links to ``?o=`` (and back, reversed)."""
    found = []
    conditions = {} if not listing.ran else _safe_conditions(kind_list)
    for position, column in enumerate(kind_list.list_display):
        if column == ACTION_CHECKBOX or column not in columns:
            continue
        name = kind_list.column_field(column)
        sortable = name is not None and kind_list.serves(conditions, (name.lstrip("-"), False))
        sorted_now = sortable and listing.order is not None and listing.order[0] == name
        descending = bool(sorted_now and listing.order and listing.order[1])
        url = ""
        if sortable:
            flip = "" if sorted_now and descending else "-" if sorted_now else ""
            url = with_query(kind_list.request, **{ORDER_VAR: f"{flip}{position}", PAGE_VAR: None})
        found.append(
            {
                "label": column_label(kind_list, column),
                "url": url,
                "sorted": "descending" if descending else "ascending" if sorted_now else "",
            }
        )
    return found


def _safe_conditions(kind_list: KindList) -> dict[str, Any]:
    try:
        return kind_list.conditions()
    except Exception:
        return {}


def rows(kind_list: KindList, listing: Listing, columns: list[Any]) -> list[dict[str, Any]]:
    model = kind_list.model
    opts = model._meta
    links = kind_list.admin.get_list_display_links(kind_list.request, columns)
    linked = set(links or ())
    # The page's references, read in one get_many per field (one query per shard).
    prefetch(model, listing.entities, [c for c in columns if c in reference_names(model)])
    popup = POPUP_VAR in kind_list.request.GET
    found = []
    for entity in listing.entities:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[entity.id])
        link = '<a href="{}">{}</a>'
        if popup:  # the lookup of a reference's widget: choosing a row gives its id
            url, link = str(entity.id), '<a href="#" data-popup-opener="{}">{}</a>'
        found.append(
            {
                "id": str(entity.id),
                "label": str(entity),
                "cells": [
                    format_html(link, url, cell(kind_list, c, entity))
                    if c in linked
                    else cell(kind_list, c, entity)
                    for c in columns
                ],
            }
        )
    return found


def filter_choices(kind_list: KindList, name: str) -> list[tuple[str, Any]]:
    """A ``list_filter`` field's choices as (label, the URL parameters they set)."""
    model_field = kind_list.model._kind.fields[name]
    if isinstance(model_field, models.BooleanField):
        return [("Yes", {f"{name}__exact": "1"}), ("No", {f"{name}__exact": "0"})]
    if isinstance(model_field, models.DateField | models.DateTimeField):
        now = timezone.localtime() if timezone.is_aware(timezone.now()) else dt.datetime.now()
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        if not isinstance(model_field, models.DateTimeField):
            today = today.date()  # type: ignore[assignment]
        tomorrow = today + dt.timedelta(days=1)
        month = today.replace(day=1)
        next_month = (month + dt.timedelta(days=32)).replace(day=1)
        year = today.replace(month=1, day=1)
        ranges = [
            ("Today", today, tomorrow),
            ("Past 7 days", today - dt.timedelta(days=7), tomorrow),
            ("This month", month, next_month),
            ("This year", year, year.replace(year=year.year + 1)),
        ]
        return [
            (label, {f"{name}__gte": str(low), f"{name}__lt": str(high)})
            for label, low, high in ranges
        ]
    return [
        (str(label), {f"{name}__exact": str(value)})
        for value, label in model_field.flatchoices
        if value not in ("", None)
    ]


def filters(kind_list: KindList) -> list[dict[str, Any]]:
    """The sidebar: each ``list_filter`` field, its choices, the one in force."""
    found = []
    params = kind_list.request.GET
    for name in kind_list.admin.get_list_filter(kind_list.request):
        if not isinstance(name, str) or name not in kind_list.model._kind.fields:
            continue  # refused by the system check
        mine = [key for key in params if key == name or key.startswith(f"{name}__")]
        cleared = dict.fromkeys(mine) | {PAGE_VAR: None}
        choices = [
            {
                "label": "All",
                "url": with_query(kind_list.request, **cleared),
                "selected": not mine,
            }
        ]
        for label, values in filter_choices(kind_list, name):
            selected = bool(mine) and all(params.get(k) == v for k, v in values.items())
            choices.append(
                {
                    "label": label,
                    "url": with_query(kind_list.request, **{**cleared, **values}),
                    "selected": selected,
                }
            )
        model_field = kind_list.model._kind.fields[name]
        found.append({"title": model_field.verbose_name, "choices": choices})
    return found
