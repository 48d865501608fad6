"""The system checks of a kind's admin (``manage.py check``): every ``list_filter``,
``search_fields`` and ``ordering`` entry must be one an index of the kind serves, or the page
would have to refuse it at run time. Django's own checks of the admin run first.

- ``schemaless.E411``: a ``list_filter`` entry that is not a field of the kind with choices, a
  boolean or a date;
- ``schemaless.E412``: a ``list_filter`` field no index of the kind serves;
- ``schemaless.E413``: a ``search_fields`` entry other than ``"=field"`` or ``"^field"`` (Django's
  default, ``icontains``, and ``"@"`` need a scan no index does);
- ``schemaless.E414``: a ``search_fields`` field no index of the kind serves;
- ``schemaless.E415``: an ``ordering`` no index of the kind serves;
- ``schemaless.E416``: ``list_editable`` or ``date_hierarchy``, which a kind's list does not
  offer (they would be silently ignored).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.checks import ModelAdminChecks
from django.core.checks import CheckMessage, Error
from django.db import models

from ..exceptions import SchemalessError
from ..query.conditions import parse_conditions
from ..query.planner import check_index

DOCS = "docs/kinds.md#the-admin"


def served(model: Any, conditions: dict[str, Any], order: str | None = None) -> bool:
    """Whether an index of the kind serves these conditions (their values stand for any) in
    this order: the planner's own test, without reading the database (the indexes' states)."""
    try:
        parsed = parse_conditions(conditions) if conditions else []
    except SchemalessError:
        return False
    prop = None if order is None else order.lstrip("-")
    return any(check_index(index, parsed, prop) is None for index in model._kind.indexes)


def index_hint(model: Any, name: str) -> str:
    kind = model._kind.name
    return (
        f"declare Index('index_{kind}_{name}', ['{name}'], shard_on='{name}') in "
        f"{model.__name__}.Meta.indexes ({DOCS})"
    )


def filterable(model_field: Any) -> bool:
    return bool(model_field.flatchoices) or isinstance(
        model_field, models.BooleanField | models.DateField | models.DateTimeField
    )


class KindAdminChecks(ModelAdminChecks):
    """Django's checks of a ``ModelAdmin``, and the kind's own (see the module docs)."""

    def check(self, admin_obj: Any, **kwargs: Any) -> list[CheckMessage]:
        return [
            *super().check(admin_obj, **kwargs),
            *self._kind_list_filter(admin_obj),
            *self._kind_search_fields(admin_obj),
            *self._kind_ordering(admin_obj),
            *self._kind_unoffered(admin_obj),
        ]

    def _kind_unoffered(self, admin_obj: Any) -> list[CheckMessage]:
        found = []
        if admin_obj.list_editable:
            found.append(("list_editable", "edit each entity on its page"))
        if admin_obj.date_hierarchy:
            found.append(("date_hierarchy", f"list_filter = [{admin_obj.date_hierarchy!r}]"))
        return [
            Error(
                f"{option} of {type(admin_obj).__name__}: a kind's list (kind "
                f"{admin_obj.model.__name__}) does not offer it",
                hint=f"{instead} ({DOCS})",
                obj=admin_obj.__class__,
                id="schemaless.E416",
            )
            for option, instead in found
        ]

    def _kind_list_filter(self, admin_obj: Any) -> list[CheckMessage]:
        model = admin_obj.model
        name = model.__name__
        errors: list[CheckMessage] = []
        for position, item in enumerate(admin_obj.list_filter):
            model_field = model._kind.fields.get(item) if isinstance(item, str) else None
            if model_field is None or not filterable(model_field):
                errors.append(
                    Error(
                        f"list_filter[{position}] of {type(admin_obj).__name__}: {item!r} is "
                        f"not a field of kind {name} with choices, a boolean or a date",
                        hint="a kind's list is filtered through its indexes, by a field's "
                        "choices, yes/no or date ranges; search other fields with "
                        f"search_fields = ['=field'] ({DOCS})",
                        obj=admin_obj.__class__,
                        id="schemaless.E411",
                    )
                )
                continue
            if not any(served(model, {item: None}, order) for order in self._orders(model, item)):
                errors.append(
                    Error(
                        f"list_filter[{position}] of {type(admin_obj).__name__}: no index of "
                        f"kind {name} serves a filter on {item!r}",
                        hint=index_hint(model, item),
                        obj=admin_obj.__class__,
                        id="schemaless.E412",
                    )
                )
        return errors

    @staticmethod
    def _orders(model: Any, prop: str) -> list[str | None]:
        """The orders a query of ``prop`` could use: none, or another property of an index
        of the kind that holds ``prop``."""
        orders: list[str | None] = [None]
        for index in model._kind.indexes:
            if prop in index.properties:
                orders.extend(p for p in index.properties if p != prop)
        return orders

    def _kind_search_fields(self, admin_obj: Any) -> list[CheckMessage]:
        model = admin_obj.model
        errors: list[CheckMessage] = []
        for position, item in enumerate(admin_obj.search_fields):
            label = f"search_fields[{position}] of {type(admin_obj).__name__}"
            text = str(item)
            name = text.lstrip("=^")
            if not text.startswith(("=", "^")) or name not in model._kind.fields:
                errors.append(
                    Error(
                        f"{label}: {item!r} is not '=field' or '^field' of a field of kind "
                        f"{model.__name__}",
                        hint="a kind's search goes through its indexes: '=title' finds the "
                        "text, '^title' what starts with it; 'contains' and full text need a "
                        f"scan no index does ({DOCS})",
                        obj=admin_obj.__class__,
                        id="schemaless.E413",
                    )
                )
                continue
            if not any(served(model, {name: None}, order) for order in self._orders(model, name)):
                errors.append(
                    Error(
                        f"{label}: no index of kind {model.__name__} serves a search of {name!r}",
                        hint=index_hint(model, name),
                        obj=admin_obj.__class__,
                        id="schemaless.E414",
                    )
                )
        return errors

    def _kind_ordering(self, admin_obj: Any) -> list[CheckMessage]:
        model = admin_obj.model
        ordering = list(admin_obj.ordering or ())
        if not ordering:
            return []
        first = ordering[0]
        if (
            isinstance(first, str)
            and first.lstrip("-") in model._kind.fields
            and len(ordering) == 1
            and served(model, {}, first)
        ):
            return []
        return [
            Error(
                f"ordering of {type(admin_obj).__name__}: {ordering!r} is not one property "
                f"of kind {model.__name__} that an index orders by",
                hint=f"ordering = ['-published'] (one field), and "
                f"{index_hint(model, str(first).lstrip('-'))}",
                obj=admin_obj.__class__,
                id="schemaless.E415",
            )
        ]
