"""The conditions of a query: ``property=value`` (``__exact``), ``__in``, ``__gt``, ``__gte``,
``__lt`` and ``__lte``, parsed once and compared the same way in SQL and in Python."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config.indexes import Index
from ..exceptions import IndexValueError, InvalidQuery
from ..topology import bucket_map, shards

LOOKUPS = ("exact", "in", "gt", "gte", "lt", "lte")
EQUALITY_LOOKUPS = ("exact", "in")
RANGE_LOOKUPS = ("gt", "gte", "lt", "lte")
# The same comparisons in Python (column value, condition's column value): the re-check.
CHECKS: dict[str, Callable[[Any, Any], bool]] = {
    "exact": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "in": lambda value, targets: value in targets,
}


@dataclass(frozen=True)
class Condition:
    prop: str
    lookup: str
    value: Any

    @property
    def is_equality(self) -> bool:
        return self.lookup in EQUALITY_LOOKUPS

    def __str__(self) -> str:
        suffix = "" if self.lookup == "exact" else f"__{self.lookup}"
        return f"{self.prop}{suffix}={self.value!r}"


def parse_conditions(conditions: dict[str, Any]) -> list[Condition]:
    """``{"published__gte": 5, ...}`` as :class:`Condition` objects; :class:`InvalidQuery` for
    an unknown lookup or an ``__in`` not given a list."""
    if not conditions:
        raise InvalidQuery("filter_index() needs at least one condition")
    parsed = []
    for key, value in conditions.items():
        prop, _, lookup = key.partition("__")
        lookup = lookup or "exact"
        if lookup not in LOOKUPS:
            raise InvalidQuery(
                f"unknown lookup {lookup!r} in {key!r}; lookups: {', '.join(LOOKUPS)}"
            )
        if lookup == "in":
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise InvalidQuery(f"{key} takes a list of values, not {type(value).__name__}")
            value = list(value)
        parsed.append(Condition(prop, lookup, value))
    return parsed


def named_properties(conditions: Iterable[Condition], order: str | None) -> list[str]:
    """The properties a query names, in the order it names them: an entity matches only if it
    has every one of them (docs/design.md#query-rule)."""
    names = [c.prop for c in conditions]
    if order is not None:
        names.append(order)
    return list(dict.fromkeys(names))


class ColumnConditions:
    """A query's conditions bound to the index that serves it: values as that index's column
    values, the re-check of a row in Python, the order of rows, and the shards to read."""

    def __init__(self, conditions: list[Condition], index: Index, order: str | None) -> None:
        self.index = index
        converted = []
        for cond in conditions:
            try:
                if cond.lookup == "in":
                    value: Any = [index.column_value(cond.prop, v) for v in cond.value]
                else:
                    value = index.column_value(cond.prop, cond.value)
            except IndexValueError as exc:
                raise InvalidQuery(f"{cond.prop}__{cond.lookup}: {exc}") from None
            converted.append((cond.prop, cond.lookup, value))
        self.values: list[tuple[str, str, Any]] = converted
        position = {p: n for n, p in enumerate(index.properties)}
        self._checks = [
            (position[p], CHECKS[lookup], frozenset(t) if lookup == "in" else t)
            for p, lookup, t in converted
        ]
        # Positions (in a row, entity_id last) that order the results: the ordering, then the
        # properties no exact condition fixes, then the entity id.
        fixed = {c.prop for c in conditions if c.lookup == "exact"}
        sort = [] if order is None else [index.properties.index(order)]
        sort += [n for n, p in enumerate(index.properties) if p not in fixed and n not in sort]
        self.sort_positions = [*sort, len(index.properties)]

    @property
    def empty(self) -> bool:
        """An ``in`` of no values: nothing can match."""
        return any(lookup == "in" and not value for _p, lookup, value in self.values)

    def meets(self, row: Sequence[Any]) -> bool:
        """Whether a row's column values meet every condition (the re-check)."""
        for n, check, target in self._checks:  # noqa: SIM110 - all() of a generator is slower
            if not check(row[n], target):
                return False
        return True

    def target_aliases(self) -> list[str]:
        """The shards whose index tables can hold matching rows."""
        index = self.index
        for prop, lookup, value in self.values:
            if prop == index.shard_on and lookup == "exact":
                return [bucket_map.alias_for(index.routing_key(value))]
            if prop == index.shard_on and lookup == "in":
                return sorted({bucket_map.alias_for(index.routing_key(v)) for v in value})
        return list(shards.shard_aliases())

    def described(self) -> list[tuple[str, str, str]]:
        return sorted((prop, lookup, repr(value)) for prop, lookup, value in self.values)
