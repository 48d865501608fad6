"""References between kinds (docs/kinds.md#references): App Engine's ``KeyProperty``,
MongoEngine's ``ReferenceField``::

    class Review(Kind):
        book = ReferenceField(Book)

- The body stores the referenced entity's id (a ``UUID``), under the field's name: an index
  can be declared on it, and ``Review.objects.filter(book=book)`` takes an entity or an id.
- ``review.book`` is the ``Book``, read on first use and kept; ``review.book_id`` the id.
  ``review.book = book`` (or an id) sets it.
- ``full_clean()`` refuses an id that is no entity of the referenced kind.
- ``select_related("book")``/``prefetch_related("book")`` read the references of a page in
  one ``get_many`` (one query per shard).
- Deleting the referenced entity leaves the reference dangling (``on_delete=DANGLE``, the only
  rule): ``review.book`` is then None and ``review.book_id`` still the id. Nothing is checked
  or cascaded across shards; a kind that must not lose its references checks before it deletes
  (``Review.objects.filter(book=book).exists()``, through an index on ``book``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import models

from ..exceptions import ConfigurationError

DANGLE = "dangle"
_CACHE = "_references"


class ReferenceField(models.UUIDField):
    """A reference to an entity of another kind (see the module docs). ``to``: the kind, or
    its ``"app_label.ModelName"``."""

    description = "A reference to an entity of another kind"

    def __init__(self, to: Any, *, on_delete: str = DANGLE, **kwargs: Any) -> None:
        if on_delete != DANGLE:
            raise ConfigurationError(
                f"ReferenceField({_label(to)}): on_delete={on_delete!r} cannot be kept across "
                "shards; a reference is left dangling when its entity is deleted "
                "(on_delete=DANGLE, the default): check before deleting (docs/kinds.md)"
            )
        self.to = to
        self.on_delete = on_delete
        super().__init__(**kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["to"] = _label(self.to)
        return name, path, args, kwargs

    def target(self) -> Any:
        """The referenced kind (a string ``to`` is resolved on first use)."""
        to = self.to
        if isinstance(to, str):
            label = to if "." in to else f"{self.model._meta.app_label}.{to}"
            try:
                to = apps.get_model(label)
            except (LookupError, ValueError):
                raise ConfigurationError(
                    f"kind {self.model.__name__}: {self.name} refers to {self.to!r}, which is "
                    "no installed model; give the kind or 'app_label.ModelName'"
                ) from None
        if getattr(to, "_kind", None) is None:
            raise ConfigurationError(
                f"kind {self.model.__name__}: {self.name} refers to {to!r}, which is not a "
                "kind; a ReferenceField refers to a schemaless_store.Kind"
            )
        self.to = to
        return to

    def to_python(self, value: Any) -> Any:
        if hasattr(value, "body_properties"):
            return value.id
        return super().to_python(value)

    def clean(self, value: Any, model_instance: Any) -> Any:
        target = self.target()
        if hasattr(value, "body_properties") and not isinstance(value, target):
            raise ValidationError(
                "%(field)s refers to a %(target)s, not a %(given)s.",
                code="invalid_reference",
                params={
                    "field": self.name,
                    "target": target.__name__,
                    "given": type(value).__name__,
                },
            )
        return super().clean(value, model_instance)

    def validate(self, value: Any, model_instance: Any) -> None:
        super().validate(value, model_instance)
        if value is None:
            return
        target = self.target()
        if value not in target.objects.get_many([value]):
            raise ValidationError(
                "There is no %(target)s with id %(id)s.",
                code="invalid_reference",
                params={"target": target.__name__, "id": value},
            )

    def value_from_object(self, obj: Any) -> Any:
        """The id (what a form edits), not the entity."""
        return obj._properties().get(self.name)


class Reference:
    """The attribute of a :class:`ReferenceField`: the referenced entity, read on first use
    (None for no reference or a dangling one)."""

    def __init__(self, model_field: ReferenceField) -> None:
        self.field = model_field
        self.name = model_field.name
        self.converted = False

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        raw = instance._properties().get(self.name)
        if raw is None:
            return None
        if hasattr(raw, "body_properties"):
            return raw
        key = _as_uuid(raw)
        if key is None:
            return None
        cached = instance.__dict__.get(_CACHE, {}).get(self.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        found = self.field.target().objects.get_many([key]).get(key)
        remember(instance, self.name, key, found)
        return found

    def __set__(self, instance: Any, value: Any) -> None:
        if hasattr(value, "body_properties") and isinstance(value, self.field.target()):
            instance._properties()[self.name] = value.id
            remember(instance, self.name, value.id, value)
        else:  # an id, or an entity of another kind (full_clean() refuses it)
            instance._properties()[self.name] = value


class ReferenceId:
    """``review.book_id``: the stored id of a reference."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        raw = instance._properties().get(self.name)
        return raw.id if hasattr(raw, "body_properties") else raw

    def __set__(self, instance: Any, value: Any) -> None:
        instance._properties()[self.name] = value


def remember(instance: Any, name: str, key: Any, found: Any) -> None:
    instance.__dict__.setdefault(_CACHE, {})[name] = (key, found)


def reference_names(model: Any) -> list[str]:
    return [n for n, f in model._kind.fields.items() if isinstance(f, ReferenceField)]


def prefetch(model: Any, entities: Iterable[Any], names: Iterable[str]) -> None:
    """Read the ``names`` references of ``entities`` with one ``get_many`` per field (one
    query per shard), kept on each instance as its attribute's value."""
    entities = list(entities)
    for name in dict.fromkeys(names):
        target = model._kind.fields[name].target()
        keys = {}
        for entity in entities:
            key = _as_uuid(entity._properties().get(name))
            if key is not None:
                keys[id(entity)] = key
        found = target.objects.get_many(set(keys.values())) if keys else {}
        for entity in entities:
            key = keys.get(id(entity))
            if key is not None:
                remember(entity, name, key, found.get(key))


def _as_uuid(value: Any) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value)) if value is not None else None
    except ValueError:
        return None


def _label(to: Any) -> str:
    return to if isinstance(to, str) else to._meta.label
