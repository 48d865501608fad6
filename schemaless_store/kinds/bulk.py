"""The writes of a kind's queryset (:class:`~.query.KindQuery`): ``delete()`` and ``update()``
of the matches, ``get_or_create()`` and ``update_or_create()``.

- ``update(stars=4)`` and ``update(stars=F("stars") + 1)`` change each match with
  ``modify()``: read, change, validate, save if unchanged, retried. ``F()`` is applied in
  Python to the entity's stored value (``+ - * /`` of fields and constants); any other
  expression is refused. There is no SQL over bodies, so nothing is atomic across entities.
- ``get_or_create(title=...)`` is race-free when a unique index of the kind holds exactly the
  properties it looks up (or it looks up ``pk``/``id``): two racing calls create one entity,
  the loser's write is refused by the index (or the id) and it reads the winner's. Without
  such an index it is refused, naming the ``Index`` to declare.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from django.db.models import F, Value
from django.db.models.expressions import CombinedExpression

from ..exceptions import EntityExists, InvalidQuery, UniqueViolation
from .lookups import ID_NAMES
from .options import unique_hint

_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


def apply_expression(kind: str, entity: Any, name: str, value: Any) -> Any:
    """``value`` for property ``name`` of ``entity``: an ``F()`` (or ``F() + 1`` ...) read
    from the entity; a plain value as it is."""
    if not hasattr(value, "resolve_expression"):
        return value
    if isinstance(value, F):
        if value.name not in entity:
            raise InvalidQuery(f"{kind}: F({value.name!r}) names a property this entity lacks")
        if value.name in type(entity)._kind.fields:
            return getattr(entity, value.name)
        return entity[value.name]
    if isinstance(value, Value):
        return value.value
    if isinstance(value, CombinedExpression) and value.connector in _OPERATORS:
        left = apply_expression(kind, entity, name, value.lhs)
        right = apply_expression(kind, entity, name, value.rhs)
        return _OPERATORS[value.connector](left, right)
    raise InvalidQuery(
        f"{kind}.{name}: {value!r} is an expression a kind cannot apply (there is no SQL over "
        "bodies); update() applies F() with + - * /, else compute the value in "
        f"{kind}.objects.modify(id, fn)"
    )


def set_values(entity: Any, values: dict[str, Any]) -> None:
    """Set fields as attributes (a reference takes an entity), other properties as items."""
    fields = type(entity)._kind.fields
    for name, value in values.items():
        if name in fields:
            setattr(entity, name, value)
        else:
            entity[name] = value


class KindWrites:
    """The writes of :class:`~.query.KindQuery` (see the module docs)."""

    model: Any
    _offset: int
    _limit: int | None

    if TYPE_CHECKING:

        def __iter__(self) -> Iterator[Any]: ...

        def filter(self, *args: Any, **kwargs: Any) -> Any: ...

    def _no_slice(self, what: str) -> None:
        if self._offset or self._limit is not None:
            raise InvalidQuery(f"{self.model.__name__}: cannot {what} a sliced query")

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete every match (each with its index rows); ``(count, {label: count})``."""
        self._no_slice("delete()")
        deleted = 0
        for entity in list(self):
            deleted += entity.delete()[0]
        return deleted, {self.model._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]

    def update(self, **values: Any) -> int:
        """Set ``values`` (``F()`` applied) on every match through ``modify()``, each save
        validated; the number of entities changed."""
        self._no_slice("update()")
        kind = self.model.__name__
        for name in values:
            if name in ID_NAMES or name == "kind":
                raise InvalidQuery(f"{kind}.objects.update() cannot change {name!r}")

        def change(entity: Any) -> None:
            resolved = {n: apply_expression(kind, entity, n, v) for n, v in values.items()}
            set_values(entity, resolved)

        changed = 0
        for entity in list(self):
            try:
                self.model.objects.modify(entity.id, change)
            except self.model.DoesNotExist:
                continue  # deleted meanwhile
            changed += 1
        return changed

    update.alters_data = True  # type: ignore[attr-defined]

    def _unique_lookup(self, what: str, kwargs: dict[str, Any]) -> None:
        """Refuse a lookup no unique index (nor the id) guards: creating could race."""
        names = {key.partition("__")[0] for key in kwargs}
        if any("__" in key and not key.endswith("__exact") for key in kwargs):
            raise InvalidQuery(f"{self.model.__name__}.objects.{what}() takes exact lookups")
        if names & set(ID_NAMES):
            return
        for index in self.model._kind.indexes:
            if index.unique and index.property_set == names:
                return
        props = sorted(names)
        raise InvalidQuery(
            f"{self.model.__name__}.objects.{what}({', '.join(props)}=...) is race-free only "
            f"on a unique index over exactly {props}: two racing calls would both create. "
            f"{unique_hint(self.model.__name__, props)}"
        )

    def get_or_create(self, defaults: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """``(entity, created)``: the entity matching ``kwargs``, or a new one made from
        ``kwargs`` and ``defaults`` (validated). Race-free on a unique index (module docs)."""
        self._unique_lookup("get_or_create", kwargs)
        try:
            return self.filter(**kwargs).get(), False
        except self.model.DoesNotExist:
            pass
        properties = {k.removesuffix("__exact"): v for k, v in kwargs.items()}
        for name in ID_NAMES:
            if name in properties:
                properties["id"] = properties.pop(name)
        properties.update({k: v() if callable(v) else v for k, v in (defaults or {}).items()})
        try:
            return self.model.objects.create(**properties), True
        except (UniqueViolation, EntityExists):
            # Another writer created it first: the index (or the id) refused this one.
            return self.filter(**kwargs).get(), False

    get_or_create.alters_data = True  # type: ignore[attr-defined]

    def update_or_create(
        self,
        defaults: dict[str, Any] | None = None,
        create_defaults: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """``(entity, created)``: ``get_or_create`` (with ``create_defaults``, else
        ``defaults``), then ``defaults`` set on an entity that existed, by ``modify()``."""
        values = {k: v() if callable(v) else v for k, v in (defaults or {}).items()}
        found, created = self.get_or_create(
            defaults=values if create_defaults is None else create_defaults, **kwargs
        )
        if created or not values:
            return found, created
        return self.model.objects.modify(found.id, lambda e: set_values(e, values)), False

    update_or_create.alters_data = True  # type: ignore[attr-defined]
