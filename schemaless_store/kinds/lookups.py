"""A kind's query conditions (``Book.objects.filter(...)``): keyword lookups and ``Q`` objects
made branches of index conditions, each value as the kind stores it.

- Values go through the field, as ``save()`` cleans them: ``published__gte=date(2002, 1, 1)``
  on a ``DateField`` is the stored ``"2002-01-01"``, a ``Book`` given to a reference field its
  id, ``"4"`` on an ``IntegerField`` the int 4.
- ``Q`` objects with ``&`` and ``|`` are put in disjunctive normal form: one :class:`Branch`
  per alternative, each read through its own index and the answers merged (App Engine ndb's
  ``OR``). A negated ``Q`` (``~Q(...)``) and ``exclude()`` are re-checked on each entity of
  the branch they narrow (:meth:`Branch.keeps`), never read from an index of their own.
- ``startswith`` is a range on the index (``gte`` the prefix, ``lt`` the next prefix).
- ``pk`` and ``id`` name entities by id: such a branch is read with ``get_many``.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q

from ..config.indexes import KIND_PROPERTY
from ..exceptions import IndexValueError, InvalidQuery
from ..values import entity_ids
from ..values.index_values import decimal_key, encode_key
from .options import stored_value

# The lookups a kind's query takes; ``startswith`` becomes a range on the index.
LOOKUPS = ("exact", "in", "gt", "gte", "lt", "lte", "startswith")
ID_NAMES = ("pk", "id")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "exact": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
# Code points UTF-8 cannot encode (surrogates): the prefix after U+D7FF is U+E000.
_SURROGATES = (0xD800, 0xDFFF)


@dataclass
class Branch:
    """One alternative of a query: index conditions (``{"title__gte": "A"}``), ids (when it
    names entities by id) and the negated conditions its entities are re-checked against."""

    conditions: dict[str, Any] = field(default_factory=dict)
    ids: list[uuid.UUID] | None = None
    # Each a list of (property, lookup, stored value) that together exclude an entity.
    negated: list[list[tuple[str, str, Any]]] = field(default_factory=list)
    # The positive conditions, for re-checking an entity fetched by id.
    checks: list[tuple[str, str, Any]] = field(default_factory=list)
    # Positive conditions no index condition holds (a lookup given twice): re-checked.
    rechecks: list[tuple[str, str, Any]] = field(default_factory=list)

    def merged(self, other: Branch) -> Branch:
        """Both branches' conditions (an AND). A lookup given two values keeps the first as
        the index's condition and re-checks the second on each entity."""
        out = Branch(dict(self.conditions), self.ids, [*self.negated, *other.negated])
        out.checks = [*self.checks, *other.checks]
        out.rechecks = [*self.rechecks, *other.rechecks]
        for key, value in other.conditions.items():
            if key in out.conditions and out.conditions[key] != value:
                prop, _, lookup = key.partition("__")
                out.rechecks.append((prop, lookup or "exact", value))
            else:
                out.conditions[key] = value
        if other.ids is not None:
            out.ids = (
                list(other.ids) if out.ids is None else [i for i in out.ids if i in set(other.ids)]
            )
        return out

    @property
    def empty(self) -> bool:
        """Nothing can match (``id__in=[]``)."""
        return self.ids is not None and not self.ids

    def keeps(self, entity: Any, fields: dict[str, Any]) -> bool:
        """Whether an entity read for this branch meets its re-checks: by id, the positive
        conditions; always, none of the negated ones (``exclude(pk=...)`` included)."""
        properties, key = entity.body_properties(), entity.id
        if self.ids is not None and not all(
            matches(properties, c, fields, key) for c in self.checks
        ):
            return False
        if not all(matches(properties, c, fields, key) for c in self.rechecks):
            return False
        return not any(
            all(matches(properties, c, fields, key) for c in group) for group in self.negated
        )


def sort_key(model_field: Any, value: Any) -> bytes:
    """The order of a stored value, as the index orders it (decimals by their number)."""
    if model_field is not None and model_field.get_internal_type() == "DecimalField":
        return decimal_key(value)
    return encode_key(value)


def matches(
    properties: dict[str, Any], check: tuple[str, str, Any], fields: dict, key: Any = None
) -> bool:
    """One condition in Python, comparing as the index does (a missing property never
    matches, as it has no index row); ``"id"`` is the entity's id, ``key``."""
    prop, lookup, target = check
    if prop == "id":
        value: Any = key
    elif prop not in properties:
        return False
    else:
        value = properties[prop]
    if lookup == "startswith":
        return isinstance(value, str) and value.startswith(target)
    model_field = fields.get(prop)
    values = value if type(value) is list else [value]
    try:
        if lookup == "in":
            wanted = {sort_key(model_field, t) for t in target}
            return any(sort_key(model_field, v) in wanted for v in values)
        goal = sort_key(model_field, target)
        compare = _COMPARE[lookup]
        return any(compare(sort_key(model_field, v), goal) for v in values)
    except (IndexValueError, ValueError, TypeError):
        return False


def next_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (None: none is)."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if _SURROGATES[0] <= code <= _SURROGATES[1]:
            code = _SURROGATES[1] + 1
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


class Lookups:
    """Parses the conditions of one kind's query (``model``: the kind)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = model.__name__
        self.fields: dict[str, Any] = model._kind.fields

    def refuse(self, message: str) -> InvalidQuery:
        return InvalidQuery(f"{self.name}.objects: {message}")

    def branches(self, args: Iterable[Any], kwargs: dict[str, Any]) -> list[Branch]:
        """``filter(*args, **kwargs)`` in disjunctive normal form."""
        result = [Branch()]
        for arg in args:
            if not isinstance(arg, Q):
                raise self.refuse(
                    f"filter() takes Q objects and keyword lookups, not {arg!r}; "
                    "write Q(title='...') | Q(title='...')"
                )
            result = self._and(result, self._q(arg))
        for key, value in kwargs.items():
            result = self._and(result, [self._one(key, value)])
        return result

    def negation(self, args: Iterable[Any], kwargs: dict[str, Any]) -> list[Branch]:
        """``exclude(*args, **kwargs)``: one branch whose entities are re-checked against
        each alternative of the excluded conditions."""
        groups = []
        for branch in self.branches(args, kwargs):
            if branch.negated:
                raise self.refuse("exclude() of a negated Q (~Q) is a filter(): write filter()")
            group = list(branch.checks)
            if branch.ids is not None:
                group.append(("id", "in", branch.ids))
            groups.append(group)
        return [Branch(negated=groups)]

    def _and(self, left: list[Branch], right: list[Branch]) -> list[Branch]:
        return [a.merged(b) for a in left for b in right]

    def _q(self, q: Q) -> list[Branch]:
        parts: list[list[Branch]] = []
        for child in q.children:
            if isinstance(child, Q):
                parts.append(self._q(child))
            else:
                key, value = child  # type: ignore[misc]
                parts.append([self._one(key, value)])
        if q.connector == Q.OR:
            result = [b for part in parts for b in part]
        else:
            result = [Branch()]
            for part in parts:
                result = self._and(result, part)
        if q.negated:
            return self.negation([], {}) if not parts else self._negate(result)
        return result

    def _negate(self, result: list[Branch]) -> list[Branch]:
        if any(b.negated for b in result):
            raise self.refuse("a Q negated twice is not supported; write it without ~")
        groups = []
        for branch in result:
            group = list(branch.checks)
            if branch.ids is not None:
                group.append(("id", "in", branch.ids))
            groups.append(group)
        return [Branch(negated=groups)]

    def _one(self, key: str, value: Any) -> Branch:
        """One keyword lookup as a branch."""
        prop, _, lookup = key.partition("__")
        lookup = lookup or "exact"
        if prop in ID_NAMES:
            return self._by_id(key, lookup, value)
        if prop == KIND_PROPERTY:
            raise self.refuse(f"{self.name}.objects pins the kind itself; leave out {key!r}")
        if lookup not in LOOKUPS:
            raise self.refuse(
                f"{key!r}: a kind's query takes the lookups {', '.join(LOOKUPS)}, served by "
                f"an index. For {lookup!r}, store a property that an index can hold (a "
                "lowercase copy for iexact, say) or filter the results in Python"
            )
        if lookup == "in":
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise self.refuse(f"{key} takes a list of values, not {type(value).__name__}")
            stored: Any = [self.stored(prop, key, v) for v in value]
        else:
            stored = self.stored(prop, key, value)
        branch = Branch(checks=[(prop, lookup, stored)])
        if lookup != "startswith":
            branch.conditions[key if "__" in key else prop] = stored
            return branch
        if not isinstance(stored, str):
            raise self.refuse(f"{key} takes a str prefix, not {type(value).__name__}")
        branch.conditions[f"{prop}__gte"] = stored
        upper = next_prefix(stored)
        if upper is not None:
            branch.conditions[f"{prop}__lt"] = upper
        return branch

    def _by_id(self, key: str, lookup: str, value: Any) -> Branch:
        if lookup not in ("exact", "in"):
            raise self.refuse(f"{key!r}: ids are looked up with exact or in, not {lookup!r}")
        given = [value] if lookup == "exact" else value
        if lookup == "in" and (isinstance(value, str | bytes) or not isinstance(value, Iterable)):
            raise self.refuse(f"{key} takes a list of ids, not {type(value).__name__}")
        try:
            ids = [uuid.UUID(bytes=entity_ids.entity_id_bytes(_id_of(v))) for v in given]
        except (ValueError, TypeError) as exc:
            raise self.refuse(f"{key}: {exc}") from None
        return Branch(ids=list(dict.fromkeys(ids)))

    def stored(self, prop: str, key: str, value: Any) -> Any:
        """``value`` as the kind stores ``prop`` (cleaned by its field, if declared)."""
        if hasattr(value, "resolve_expression"):
            raise self.refuse(
                f"{key}={value!r}: a kind's query compares with values, not expressions "
                "(there is no SQL over bodies); read the value first"
            )
        model_field = self.fields.get(prop)
        if model_field is None:
            return value
        if value is None:
            return None
        try:
            return stored_value(model_field, model_field.to_python(_id_of(value)))
        except ValidationError as exc:
            raise self.refuse(f"{key}={value!r}: {'; '.join(exc.messages)}") from None


def _id_of(value: Any) -> Any:
    """An entity stands for its id (``filter(author=book)``, ``filter(pk=book)``)."""
    ident = getattr(value, "row_id", None)
    return value.id if ident is not None and hasattr(value, "body_properties") else value
