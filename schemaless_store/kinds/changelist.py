"""The list page of a kind's admin (:class:`~.admin.KindAdmin`): Django's own parameters,
served through the kind's indexes (docs/kinds.md#the-admin).

- ``?q=``: an entity's id, or the admin's ``search_fields`` (``"=isbn"``: equal to the text,
  ``"^title"``: starts with it, a range on the index), one index query per field, merged, as
  ndb runs an OR. Without ``search_fields``: ``property=value & property=value``;
- ``?genre__exact=sf``, ``?in_print__exact=1``, ``?published__gte=...&published__lt=...``:
  the ``list_filter`` choices (and any ``field__lookup`` of ``exact``, ``gt``, ``gte``, ``lt``,
  ``lte``), conditions of the same index query;
- ``?o=N`` / ``?o=-N``: ordered by column N of the list (as Django counts them, the action
  checkbox first); a column can be sorted when an index serves that order with the conditions.
  Else ``KindAdmin.ordering``, when an index serves it;
- ``?p=N``: page N (offset pages of ``list_per_page``; one more entity is read to know whether
  there is a next page, none are counted).

A value a field refuses, a query no index serves, a bad page or order: a message on the page,
which lists nothing ("the list did not run"), never a server error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from ..exceptions import InvalidEntityId, SchemalessError
from ..values import entity_ids
from ..values.index_values import encode_key
from .options import stored_value

SEARCH_VAR, PAGE_VAR, ORDER_VAR, POPUP_VAR = "q", "p", "o", "_popup"
# Django's own parameters that are not conditions (popups, the error flag, facets).
IGNORED_VARS = frozenset({"e", "_facets", "_popup", "_to_field", "_changelist_filters"})
LOOKUPS = ("exact", "gt", "gte", "lt", "lte")
# A search over several fields reads at most this many entities from each.
MAX_SEARCH_RESULTS = 1000
# A page starts at most this far in (a page is read from the start of its list: offsets).
MAX_OFFSET = 100_000


class Refused(Exception):
    """The list cannot run as asked: the message is shown on the page."""


def refusal_text(model: Any, exc: Exception) -> str:
    """A query's refusal in a line or two: the kind, why, and what would serve it (the
    planner's "To serve it: declare Index(...)" line), without the list of every index."""
    lines = str(exc).split("\n")
    first = lines[0] if lines[0].startswith(model.__name__) else f"{model.__name__}: {lines[0]}"
    fix = next((line for line in lines[1:] if line.startswith("To serve it")), "")
    return f"{first} {fix}".strip()


def field_value(model: Any, name: str, raw: str) -> Any:
    """``raw`` (text from a URL) as the value the kind stores for field ``name``: converted
    by the field, a naive date or time made aware in the current time zone, a date given for a
    datetime field made its midnight (``ValidationError`` if the field refuses it)."""
    model_field = model._kind.fields[name]
    if isinstance(model_field, models.DateTimeField):
        value = model_field.to_python(raw.strip())
        if isinstance(value, dt.datetime) and timezone.is_naive(value):
            value = timezone.make_aware(value)
        return value
    return stored_value(model_field, model_field.to_python(raw))


def prefix_range(prefix: str) -> tuple[str, str] | None:
    """The bounds ``[low, high)`` of every string that starts with ``prefix`` (strings order by
    code point), or None when every string does (an empty prefix)."""
    chars = list(prefix)
    while chars and chars[-1] == chr(0x10FFFF):
        chars.pop()
    if not chars:
        return None
    chars[-1] = chr(ord(chars[-1]) + 1)
    if 0xD800 <= ord(chars[-1]) <= 0xDFFF:  # surrogates are not characters: skip them
        chars[-1] = chr(0xE000)
    return prefix, "".join(chars)


def index_order_key(prop: str) -> Callable[[Any], bytes]:
    """A sort key giving entities in an index's order of ``prop`` (its encoded value)."""

    def key(entity: Any) -> bytes:
        try:
            return encode_key(entity.get(prop))
        except (SchemalessError, ValueError):
            return b""

    return key


@dataclass
class Listing:
    """What the list page shows: the page's entities, or why it did not run."""

    entities: list[Any] = field(default_factory=list)
    has_next: bool = False
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ran: bool = True
    # The ordering used, ("published", True) for newest first; None: the store's order.
    order: tuple[str, bool] | None = None


class KindList:
    """One request's list: its conditions, search, order and page (see the module docs)."""

    def __init__(self, model_admin: Any, request: Any, list_display: list[Any]) -> None:
        self.admin = model_admin
        self.model = model_admin.model
        self.request = request
        self.list_display = list_display
        self.params = request.GET
        self.per_page = int(model_admin.list_per_page)
        self.page = 1
        self.term = self.params.get(SEARCH_VAR, "").strip()

    # --- reading the parameters --------------------------------------------------------------

    def conditions(self) -> dict[str, Any]:
        """The filters of the URL, as ``filter_index`` conditions (``Refused`` if a name or a
        value does not fit the kind)."""
        fields = self.model._kind.fields
        found: dict[str, Any] = {}
        for key, raw in self.params.items():
            if key in (SEARCH_VAR, PAGE_VAR, ORDER_VAR) or key in IGNORED_VARS:
                continue
            name, _, lookup = key.partition("__")
            lookup = lookup or "exact"
            if name not in fields or lookup not in LOOKUPS:
                raise Refused(
                    f"{self.model.__name__} cannot be filtered by {key!r}: filters are "
                    f"field__lookup of a field of the kind ({', '.join(fields)}), with a lookup "
                    f"among {', '.join(LOOKUPS)}"
                )
            try:
                value = field_value(self.model, name, raw)
            except ValidationError as exc:
                raise Refused(f"{key}={raw!r}: {' '.join(exc.messages)}") from None
            found[name if lookup == "exact" else f"{name}__{lookup}"] = value
        return found

    def page_number(self) -> int:
        raw = self.params.get(PAGE_VAR, "1")
        if not raw.isdigit() or int(raw) < 1 or len(raw) > 9:
            raise Refused(f"?{PAGE_VAR}={raw!r} is not a page number (1, 2, 3, ...)")
        if (int(raw) - 1) * self.per_page > MAX_OFFSET:
            raise Refused(
                f"page {raw} starts past the {MAX_OFFSET:,}th {self.model.__name__}: pages are "
                "read from the start of the list; narrow it with a filter or a search"
            )
        return int(raw)

    def column_field(self, column: Any) -> str | None:
        """The field a column sorts by: a declared field's name, or a callable's
        ``admin_order_field`` naming one."""
        if isinstance(column, str) and column in self.model._kind.fields:
            return column
        attr = column if callable(column) else getattr(self.admin, str(column), None)
        if attr is None and isinstance(column, str):
            attr = getattr(self.model, column, None)
        ordered = getattr(attr, "admin_order_field", None)
        if isinstance(ordered, str) and ordered.lstrip("-") in self.model._kind.fields:
            return ordered
        return None

    def requested_order(self) -> tuple[str, bool] | None:
        """``?o=`` as (field, descending), else the admin's ``ordering``; None: no order."""
        raw = self.params.get(ORDER_VAR)
        if raw is None:
            ordering = list(self.admin.get_ordering(self.request) or ())
            if not ordering or not isinstance(ordering[0], str):
                return None
            first = ordering[0]
            return first.lstrip("-"), first.startswith("-")
        parts = raw.split(".")
        if len(parts) > 1:
            raise Refused(
                f"?{ORDER_VAR}={raw!r}: {self.model.__name__}'s list is sorted by one column "
                "at a time (an index orders by one property)"
            )
        part = parts[0]
        number = part.lstrip("-")
        if not number.isdigit() or int(number) >= len(self.list_display):
            raise Refused(f"?{ORDER_VAR}={raw!r} names no column of the list")
        name = self.column_field(self.list_display[int(number)])
        if name is None:
            raise Refused(f"the list cannot be sorted by column {number}")
        descending = part.startswith("-") != name.startswith("-")
        return name.lstrip("-"), descending

    # --- queries ----------------------------------------------------------------------------

    def query(self, conditions: dict[str, Any], order: tuple[str, bool] | None) -> Any:
        """The kind's index query of ``conditions`` in ``order`` (planned now: ``Refused``
        naming the index to declare if none serves it), or ``all()`` when it has neither."""
        if not conditions and order is None:
            return self.model.objects.all()
        query = self.model.objects.filter_index(**conditions)
        if order is not None:
            query = query.order_by(("-" if order[1] else "") + order[0])
        try:
            query.index  # noqa: B018 (choose the index now)
        except SchemalessError as exc:
            raise Refused(refusal_text(self.model, exc)) from None
        return query

    def serves(self, conditions: dict[str, Any], order: tuple[str, bool] | None) -> bool:
        try:
            self.query(conditions, order)
        except Refused:
            return False
        return True

    def ordered_query(
        self, conditions: dict[str, Any], order: tuple[str, bool] | None, listing: Listing
    ) -> Any:
        """The query in ``order`` if an index serves it so; else (the admin's default order,
        not one the user asked for) in the index's own order, with a note saying so."""
        if order is None or self.serves(conditions, order) or ORDER_VAR in self.params:
            listing.order = order
            return self.query(conditions, order)
        listing.notes.append(
            f"Not sorted by {order[0]}: no index of {self.model.__name__} serves these "
            f"conditions in that order ({', '.join(conditions)}). Listed in the index's order."
        )
        return self.query(conditions, None)

    def search_queries(
        self, conditions: dict[str, Any], order: tuple[str, bool] | None, listing: Listing
    ) -> list[Any]:
        """One query per search field the term fits (``Refused`` if it fits none)."""
        branches: list[dict[str, Any]] = []
        problems: list[str] = []
        for spec in self.admin.get_search_fields(self.request):
            name = spec.lstrip("=^")
            try:
                value = field_value(self.model, name, self.term)
            except ValidationError as exc:
                problems.append(f"{name}: {' '.join(exc.messages)}")
                continue
            branch = dict(conditions)
            if spec.startswith("^") and isinstance(value, str):
                bounds = prefix_range(value)
                if bounds is not None:  # else every value starts with "": no condition
                    branch[f"{name}__gte"], branch[f"{name}__lt"] = bounds
            else:
                branch[name] = value
            branches.append(branch)
        if not branches:
            raise Refused(f"{self.term!r} fits no field searched: {'; '.join(problems)}")
        if order is not None and not all(self.serves(b, order) for b in branches):
            if ORDER_VAR in self.params:
                raise Refused(
                    f"no index of {self.model.__name__} serves this search sorted by {order[0]}"
                )
            listing.notes.append(f"Search results are not sorted by {order[0]}.")
            order = None
        listing.order = order
        return [self.query(branch, order) for branch in branches]

    # --- the page ---------------------------------------------------------------------------

    def run(self) -> Listing:
        listing = Listing()
        try:
            self.page = self.page_number()
            self._run(listing)
        except Refused as exc:
            listing.errors.append(str(exc))
            listing.ran, listing.entities, listing.has_next = False, [], False
        except (SchemalessError, ValidationError, ValueError) as exc:  # met while reading
            listing.errors.append(" ".join(getattr(exc, "messages", [str(exc)])))
            listing.ran, listing.entities, listing.has_next = False, [], False
        return listing

    def _run(self, listing: Listing) -> None:
        start = (self.page - 1) * self.per_page
        stop = start + self.per_page + 1
        conditions = self.conditions()
        order = self.requested_order()
        found: Any
        if self.term and self.is_id(self.term):
            found = list(self.model.objects.get_many([self.term]).values())
        elif self.term and self.admin.get_search_fields(self.request):
            found = self.merged(
                self.search_queries(conditions, order, listing), stop, listing.order
            )
        elif self.term:
            found = self.query({**conditions, **self.typed_conditions(self.term)}, None)
        else:
            found = self.ordered_query(conditions, order, listing)
        page = list(found[start:stop])
        listing.entities, listing.has_next = page[: self.per_page], len(page) > self.per_page

    @staticmethod
    def is_id(text: str) -> bool:
        try:
            entity_ids.entity_id_bytes(text)
        except InvalidEntityId:
            return False
        return True

    def typed_conditions(self, text: str) -> dict[str, Any]:
        """``a=b & c__gte=d`` (the search box without ``search_fields``): each value converted
        by its field."""
        found: dict[str, Any] = {}
        for part in text.split("&"):
            name, sep, value = part.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not name:
                raise Refused(f"{part.strip()!r} is not property=value")
            prop, _, lookup = name.partition("__")
            if prop not in self.model._kind.fields:
                raise Refused(f"{self.model.__name__} has no field {prop!r}")
            if (lookup or "exact") not in LOOKUPS:
                raise Refused(f"{name!r}: the lookups are {', '.join(LOOKUPS)}")
            try:
                found[name] = field_value(self.model, prop, value)
            except ValidationError as exc:
                raise Refused(f"{name}={value!r}: {' '.join(exc.messages)}") from None
        return found

    def merged(self, queries: list[Any], stop: int, order: tuple[str, bool] | None) -> list[Any]:
        """The union of the queries' first ``stop`` results, each entity once: in the order
        (the index's order of its property) when there is one, else query after query."""
        stop = min(stop, MAX_SEARCH_RESULTS)
        seen: dict[Any, Any] = {}
        for query in queries:
            for entity in query[:stop]:
                seen.setdefault(entity.id, entity)
        found = list(seen.values())
        if order is not None:
            found.sort(key=index_order_key(order[0]), reverse=order[1])
        return found


def selected_ids(values: Iterable[str]) -> list[bytes]:
    """The ids of the entities an action was given (those that are not ids are left out)."""
    found = []
    for value in values:
        try:
            found.append(entity_ids.entity_id_bytes(value))
        except InvalidEntityId:
            continue
    return found
