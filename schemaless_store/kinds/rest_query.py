"""The list of a :class:`~.rest.KindViewSet`: query parameters to the kind's index query, and
pages by the store's signed cursors under DRF's parameter names (docs/kinds.md#a-json-api).

- ``?published=2022-05-06``, ``?stars__gte=3``, ``?genre__in=sf,crime``: conditions, each value
  converted by its field (a date given for a datetime field, without ``__lookup``, means that
  day: a range over it in the current time zone);
- ``?ordering=-published``: one of the view's ``ordering_fields`` (default: each field an index
  of the kind orders by). Without it, the view's ``ordering``, when an index serves it with the
  conditions; else the index's own order;
- ``?cursor=`` and ``?page_size=`` (DRF's ``CursorPagination`` names; ``?size=`` too);
  ``?page=`` is refused: these pages follow ``next``.

Every refusal is a 400 naming the kind and what to do, never a 500: an unknown parameter, a
value its field refuses, a query no index serves, a value an index cannot hold.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.utils import timezone
from rest_framework import pagination
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from ..exceptions import InvalidCursor, SchemalessError
from .admin_checks import served
from .changelist import field_value, refusal_text

LOOKUPS = ("exact", "in", "gt", "gte", "lt", "lte")


def refused(name: str, message: str) -> ValidationError:
    return ValidationError({name: [message]})


def conditions_from(model: Any, params: Any, reserved: frozenset[str]) -> dict[str, Any]:
    """The conditions of the query's parameters (``ValidationError``, a 400, for one that is
    not a field of the kind, an unknown lookup or a value the field refuses)."""
    fields = model._kind.fields
    found: dict[str, Any] = {}
    for key, raw in params.items():
        if key in reserved:
            continue
        if key == "page":
            raise refused(
                key,
                f"{model.__name__} lists are paged by cursor: follow 'next' (?cursor=...); "
                "the page size is ?page_size=",
            )
        name, _, lookup = key.partition("__")
        lookup = lookup or "exact"
        if name not in fields:
            raise refused(
                key,
                f"{model.__name__} has no field {name!r}; filter by one of {', '.join(fields)} "
                "(?field=value or ?field__gte=value), order with ?ordering=",
            )
        if lookup not in LOOKUPS:
            raise refused(key, f"unknown lookup {lookup!r}; the lookups are {', '.join(LOOKUPS)}")
        try:
            if lookup == "in":
                found[key] = [field_value(model, name, part) for part in raw.split(",")]
            elif lookup == "exact" and _is_day_of_datetime(fields[name], raw):
                low = timezone.make_aware(
                    dt.datetime.combine(dt.date.fromisoformat(raw.strip()), dt.time())
                )
                found[f"{name}__gte"], found[f"{name}__lt"] = low, low + dt.timedelta(days=1)
            else:
                found[name if lookup == "exact" else key] = field_value(model, name, raw)
        except DjangoValidationError as exc:
            raise ValidationError({key: exc.messages}) from None
    return found


def _is_day_of_datetime(model_field: Any, raw: str) -> bool:
    if not isinstance(model_field, models.DateTimeField):
        return False
    try:
        dt.date.fromisoformat(raw.strip())
    except ValueError:
        return False
    return len(raw.strip()) == 10


def orderable(model: Any) -> list[str]:
    """The fields an index of the kind orders the whole kind by."""
    return [name for name in model._kind.fields if served(model, {}, name)]


def planned(model: Any, query: Any) -> Any:
    """The query with its index chosen now (``ValidationError`` if none serves it)."""
    try:
        query.index  # noqa: B018
    except SchemalessError as exc:
        raise refused("non_field_errors", refusal_text(model, exc)) from None
    return query


def list_query(
    model: Any, conditions: dict[str, Any], asked: str | None, default: str | None
) -> Any:
    """``all()``, or the index query of the conditions in the order asked (``?ordering=``,
    which an index must serve with them), else in the default order when an index serves
    that, else in the serving index's own order."""
    if not conditions and asked is None and default is None:
        return model.objects.all()
    query = model.objects.filter_index(**conditions)
    if asked is not None:
        return planned(model, query.order_by(asked))
    if default is not None:
        ordered = query.order_by(default)
        try:
            ordered.index  # noqa: B018
        except SchemalessError:
            if not conditions:
                return model.objects.all()
        else:
            return ordered
    return planned(model, query)


class StoreCursorPagination(pagination.BasePagination):
    """Pages by the store's signed cursors, keyset pages that neither skip nor repeat while
    entities are added, under DRF's ``CursorPagination`` names: ``?cursor=`` and
    ``?page_size=`` (up to ``max_page_size``; ``?size=`` is the same). The answer is DRF's:
    ``next``, ``previous`` and ``results``. The store's cursors lead forward only, so each
    ``next`` URL carries the cursors of the pages before it (``?back=``, the last
    ``back_limit``), and ``previous`` pops the last one: null on the first page and past the
    trail's start."""

    page_size = 30
    max_page_size = 200
    cursor_query_param = "cursor"
    page_size_query_param = "page_size"
    back_query_param = "back"
    back_limit = 50

    def get_page_size(self, request: Any) -> int:
        for name in (self.page_size_query_param, "size"):
            raw = request.query_params.get(name)
            if raw is None:
                continue
            if not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
                raise refused(name, f"a whole number from 1 to {self.max_page_size}")
            return int(raw)
        return self.page_size

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> list[Any]:
        self.request = request
        size = self.get_page_size(request)
        after = request.query_params.get(self.cursor_query_param) or None
        try:
            self.page = queryset.page(after=after, size=size)
        except InvalidCursor as exc:
            raise refused(self.cursor_query_param, str(exc)) from None
        except SchemalessError as exc:  # a value the index cannot hold, met as it runs
            model = getattr(view, "kind_model", lambda: None)()
            text = str(exc) if model is None else refusal_text(model, exc)
            raise refused("non_field_errors", text) from None
        return list(self.page.entities)

    def _url(self, cursor: str, back: list[str]) -> str:
        params = self.request.query_params.copy()
        params.pop(self.cursor_query_param, None)
        if cursor:
            params[self.cursor_query_param] = cursor
        params.setlist(self.back_query_param, back)
        query = params.urlencode()
        return self.request.build_absolute_uri("?" + query if query else self.request.path)

    def get_paginated_response(self, data: Any) -> Response:
        params = self.request.query_params
        current = params.get(self.cursor_query_param) or ""
        trail = params.getlist(self.back_query_param)[-self.back_limit :]
        next_url = previous = None
        if self.page.next_cursor is not None:
            next_url = self._url(self.page.next_cursor, [*trail, current][-self.back_limit :])
        if current and trail:  # the page before this one: the trail's last cursor
            previous = self._url(trail[-1], trail[:-1])
        return Response({"next": next_url, "previous": previous, "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["results"],
            "properties": {
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "previous": {"type": "string", "nullable": True, "format": "uri"},
                "results": schema,
            },
        }
