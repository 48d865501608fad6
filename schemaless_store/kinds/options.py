"""What a kind declares, collected once when its class is made (as Django's ``ModelBase`` fills
``_meta``): its name, its fields, whether undeclared properties are allowed, its indexes.

A kind is a Django *proxy* of ``Entity``: same table, same write path, its own content type and
permissions. Its fields are Django field instances added to ``_meta`` as *private* fields
(``_meta.fields`` and ``get_field()`` find them, so ``ModelForm`` and the admin do), with no
column: the ORM never selects them. On an instance each one is a :class:`Property`, a
descriptor over the entity's property of the same name.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import models
from django.utils import timezone

from ..config.indexes import KIND_PROPERTY, Index, registry
from ..exceptions import ConfigurationError
from ..values.index_values import COLUMN_TYPES
from .references import Reference, ReferenceField, ReferenceId

ALLOW, FORBID = "allow", "forbid"
# Meta options of a kind that Django's own Options would refuse.
KIND_OPTIONS = ("kind_name", "extra", "indexes")
# Values the body codec cannot hold are stored as text and read back with the field's
# ``to_python`` (docs/kinds.md): dates, times, durations, decimals.
TEXT_STORED = (models.DateField, models.TimeField, models.DurationField, models.DecimalField)
_MISSING = object()
# Cleaned values the body stores unchanged.
STORED_AS_IS = frozenset((str, int, float, bool, type(None), uuid.UUID, list, dict))


@dataclass
class KindOptions:
    """``Entry._kind``: the kind's own options (``Entry._meta`` holds Django's)."""

    name: str
    extra: str
    fields: dict[str, models.Field] = field(default_factory=dict)
    indexes: list[Index] = field(default_factory=list)
    # The fields read back through ``to_python`` (stored as text).
    converted: frozenset[str] = frozenset()
    # Per field, the scalar values it accepted and what they were cleaned to (kind.clean_fields).
    accepted: dict[str, dict[Any, Any]] = field(default_factory=dict)
    # The ReferenceFields' names, and the fields with auto_now or auto_now_add.
    references: tuple[str, ...] = ()
    auto_dates: tuple[models.Field, ...] = ()


class Property:
    """A declared field on an instance: the entity's property of the same name.

    Reading never raises for a value that no longer fits the field (``full_clean()`` reports
    it): a property the entity lacks reads as the field's default, a stored value as stored
    (dates and the like converted back from text when they can be)."""

    def __init__(self, model_field: models.Field) -> None:
        self.field = model_field
        self.name = model_field.name
        self.converted = isinstance(model_field, TEXT_STORED) and not isinstance(
            model_field, models.DateTimeField
        )

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance._properties().get(self.name, _MISSING)
        if value is _MISSING:
            return self.field.get_default()
        if self.converted and isinstance(value, str):
            try:
                return self.field.to_python(value)
            except Exception:  # a stored value that no longer fits: shown as it is
                return value
        return value

    def __set__(self, instance: Any, value: Any) -> None:
        instance._properties()[self.name] = value


def stored_value(model_field: models.Field, value: Any) -> Any:
    """A cleaned value as the body stores it: aware datetimes, text for dates and decimals."""
    if type(value) in STORED_AS_IS:  # the usual case, first
        return value
    if isinstance(value, dt.datetime):
        if timezone.is_naive(value):
            value = timezone.make_aware(value, timezone.get_default_timezone())
        if isinstance(model_field, models.DateTimeField):
            return value
    if isinstance(value, dt.date | dt.time | decimal.Decimal):
        return value.isoformat() if not isinstance(value, decimal.Decimal) else str(value)
    if isinstance(value, dt.timedelta):
        from django.utils.duration import duration_string

        return duration_string(value)
    return value


def split_meta(name: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """Take the kind's own options out of ``attrs["Meta"]`` (Django's would refuse them) and
    make the class a proxy; return the kind's options."""
    meta = attrs.pop("Meta", None)
    own: dict[str, Any] = {}
    django_meta: dict[str, Any] = {}
    if meta is not None:
        for key, value in vars(meta).items():
            if key.startswith("__"):
                continue
            if key in KIND_OPTIONS:
                own[key] = value
            else:
                django_meta[key] = value
    if django_meta.get("abstract"):
        raise ConfigurationError("a kind cannot be abstract; give the shared fields a mixin")
    together = django_meta.get("unique_together")
    if together:
        first = list(together[0]) if isinstance(together[0], list | tuple) else list(together)
        raise ConfigurationError(
            f"kind {name}: Meta.unique_together is not enforced on a kind (uniqueness needs a "
            f"lock across shards). {unique_hint(name, [str(f) for f in first])}"
        )
    django_meta["proxy"] = True
    attrs["Meta"] = type("Meta", (), django_meta)
    return own


def take_fields(name: str, attrs: dict[str, Any]) -> dict[str, models.Field]:
    """The Django fields declared in the class body, removed from ``attrs`` (ModelBase would
    make them columns)."""
    fields = {}
    for attr, value in list(attrs.items()):
        if not isinstance(value, models.Field):
            continue
        if value.is_relation:
            raise ConfigurationError(
                f"kind {name}: {attr} is a relation; a kind holds properties, so store the "
                "other entity's id in a UUIDField and read it with get() or get_many()"
            )
        if attr in ("id", KIND_PROPERTY) or attr.startswith("row_") or attr == "added_id":
            raise ConfigurationError(
                f"kind {name}: a field cannot be named {attr!r} (the entity's id, its kind and "
                "its row columns have these names)"
            )
        if value.primary_key:
            raise ConfigurationError(
                f"kind {name}: {attr} has primary_key=True; an entity's key is its id"
            )
        unique = [
            option
            for option in ("unique", "unique_for_date", "unique_for_month", "unique_for_year")
            if getattr(value, option)
        ]
        if unique:
            raise ConfigurationError(
                f"kind {name}: {attr} has {unique[0]}=..., which a kind cannot enforce "
                f"(uniqueness needs a lock across shards). {unique_hint(name, [attr])}"
            )
        fields[attr] = attrs.pop(attr)
    return fields


def unique_hint(name: str, properties: list[str]) -> str:
    """What to declare instead of ``unique=True`` or ``unique_together``: a unique index."""
    table = "_".join(["index", name.lower(), *properties])
    listed = ", ".join(f"{p!r}" for p in properties)
    return (
        f"Declare a unique index in the kind's Meta.indexes instead: Index({table!r}, "
        f"[{listed}], shard_on={properties[0]!r}, unique=True); a taken value then raises "
        "UniqueViolation and nothing is written (docs/kinds.md)."
    )


def add_fields(cls: Any, fields: dict[str, models.Field]) -> None:
    """Add the declared fields to ``cls._meta`` as private, column-less fields."""
    for attr, model_field in fields.items():
        model_field.contribute_to_class(cls, attr, private_only=True)
        # No column: the ORM's queries (and Model.__init__) leave the field alone.
        model_field.column = None  # type: ignore[assignment]
        model_field.concrete = False
        if isinstance(model_field, ReferenceField):
            if f"{attr}_id" in fields:
                raise ConfigurationError(
                    f"kind {cls.__name__}: {attr}_id is the id of the reference {attr}; "
                    "rename the field"
                )
            setattr(cls, attr, Reference(model_field))
            setattr(cls, f"{attr}_id", ReferenceId(attr))
            continue
        setattr(cls, attr, Property(model_field))
    cls._meta._expire_cache()


def kind_indexes(
    name: str, kind: str, declared: Any, fields: dict[str, models.Field] | None = None
) -> list[Index]:
    """The kind's ``Meta.indexes``: each pinned to the kind and registered. A property of a
    ``DecimalField`` given no column type is indexed as ``"decimal"`` (its body holds text,
    which would sort ``"10"`` before ``"9"``)."""
    if declared is None:
        return []
    indexes = list(declared)
    for index in indexes:
        if not isinstance(index, Index):
            raise ConfigurationError(
                f"kind {name}: Meta.indexes holds schemaless_store.Index declarations, not "
                f"{index!r}"
            )
        if index.kind is not None and index.kind != kind:
            raise ConfigurationError(
                f"kind {name}: index {index.name!r} is declared on another kind"
            )
        index.kind = kind
        for prop in index.properties:
            model_field = (fields or {}).get(prop)
            if (
                isinstance(model_field, models.DecimalField)
                and type(index.columns.get(prop)) is COLUMN_TYPES["key"]
            ):
                index.columns[prop] = COLUMN_TYPES["decimal"]()
        registry.register(index)
    return indexes


def kind_options(name: str, own: dict[str, Any], model_name: str) -> KindOptions:
    kind = own.get("kind_name", model_name)
    if not isinstance(kind, str) or not kind:
        raise ConfigurationError(f"kind {name}: Meta.kind_name must be a non-empty string")
    extra = own.get("extra", ALLOW)
    if extra not in (ALLOW, FORBID):
        raise ConfigurationError(
            f"kind {name}: Meta.extra is {extra!r}; use {ALLOW!r} (undeclared properties are "
            f"kept) or {FORBID!r} (full_clean() refuses them)"
        )
    return KindOptions(name=kind, extra=extra)
