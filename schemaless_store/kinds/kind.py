"""``schemaless_store.kinds.Kind``: a typed model whose instances are entities (docs/kinds.md)::

    class Entry(Kind):
        title = models.CharField(max_length=200)
        link = models.URLField()
        user_id = models.UUIDField()

        class Meta:
            extra = "forbid"
            indexes = [Index("index_entry_user", ["user_id"], shard_on="user_id")]

An ``Entry`` *is* an ``Entity`` (a Django proxy of it): the same table, write protocol,
history, caches, moves and async API. What it adds: the kind's name stored in the ``kind``
property, fields that ``full_clean()`` checks and ``save()`` insists on, ``Entry.objects``
seeing only entries (:mod:`.manager`), and indexes pinned to the kind.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import models
from django.db.models.base import ModelBase
from django.utils.text import capfirst

from ..config.indexes import KIND_PROPERTY, registry
from ..exceptions import ConfigurationError, InvalidEntityError, UniqueViolation
from ..models.entity import Entity
from ..query.asyncapi import sync_only
from ..values.expected import Expected
from ..writes import entity_writes
from .manager import KindManager
from .options import (
    FORBID,
    KindOptions,
    add_fields,
    kind_indexes,
    kind_options,
    split_meta,
    stored_value,
    take_fields,
)
from .references import ReferenceField
from .saving import check_expressions, only_named

# Every kind by its stored name: two kinds with one name would read each other's entities.
KINDS: dict[str, type[Any]] = {}
_MISSING = object()
# Values whose cleaning a field remembers (immutable scalars), and how many per field.
MEMO_TYPES = frozenset((str, int, float, bool, uuid.UUID, type(None)))
MEMO_LIMIT = 4096


class KindBase(ModelBase):
    """The metaclass of kinds: a proxy of ``Entity`` with the declared fields in ``_meta``."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any
    ) -> Any:
        if not any(isinstance(base, KindBase) for base in bases):  # Kind itself: abstract
            return super().__new__(mcs, name, bases, attrs, **kwargs)
        fields: dict[str, Any] = {}
        for base in bases:
            inherited = getattr(base, "_kind", None)
            if inherited is not None:
                fields.update(inherited.fields)
        own = take_fields(name, attrs)
        meta = split_meta(name, attrs)
        attrs.setdefault("objects", KindManager())
        if not any(issubclass(base, Entity) for base in bases):
            bases = (*bases, Entity)
        cls: Any = super().__new__(mcs, name, bases, attrs, **kwargs)
        options = kind_options(name, meta, cls._meta.model_name)
        other = KINDS.get(options.name)
        if other is not None and other.__qualname__ != cls.__qualname__:
            raise ConfigurationError(
                f"kind {cls._meta.label}: the kind name {options.name!r} is taken by "
                f"{other._meta.label}; give one of them Meta.kind_name"
            )
        KINDS[options.name] = cls
        add_fields(cls, own)
        fields.update(own)
        options.fields = {attr: cls._meta.get_field(attr) for attr in fields}
        options.accepted = {attr: {} for attr in fields}
        options.converted = frozenset(
            attr for attr, prop in vars(cls).items() if getattr(prop, "converted", False)
        )
        options.references = tuple(
            attr for attr, f in options.fields.items() if isinstance(f, ReferenceField)
        )
        options.auto_dates = tuple(
            f
            for f in options.fields.values()
            if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
        )
        options.indexes = kind_indexes(name, options.name, meta.get("indexes"), options.fields)
        for index in options.indexes:
            index.module = cls.__module__
        cls._kind = options
        if cls._meta.base_manager_name is None:
            # Django's own base manager (what its internals read through) would be an
            # unpinned one: make it the kind's manager.
            cls._meta.base_manager_name = cls._meta.default_manager.name
        return cls


if TYPE_CHECKING:
    _Base = Entity
else:
    # An abstract model without fields: each kind's bases are (Kind, Entity), and Django (its
    # migrations too) sees a proxy of Entity.
    _Base = models.Model


class Kind(_Base, metaclass=KindBase):
    """A typed model stored as entities; see the module docs and docs/kinds.md."""

    _kind: KindOptions

    class Meta:
        abstract = True

    def __init__(self, *args: Any, **properties: Any) -> None:
        if args:  # Django building an instance from a database row
            super().__init__(*args)
            return
        stored = properties.get(KIND_PROPERTY, _MISSING)
        options = self._kind
        if stored is not _MISSING and stored != options.name:
            raise InvalidEntityError(
                f"a {type(self).__name__} has kind {options.name!r}, not {stored!r}"
            )
        super().__init__(**properties)
        props = self._properties()
        props[KIND_PROPERTY] = options.name
        for attr, model_field in options.fields.items():
            if attr not in props:
                props[attr] = model_field.get_default()
        for attr in options.references:  # Review(book=book): the id stored, the book kept
            value = props[attr]
            if hasattr(value, "body_properties"):
                setattr(self, attr, value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} {self.id}"

    @property
    def pk(self) -> Any:  # type: ignore[override]
        """The entity's id: what the admin and forms address an instance by (``added_id``,
        the row's number on its shard, is not unique across shards)."""
        return self.id

    def _get_pk_val(self, meta: Any = None) -> Any:
        return self.id

    # --- validation -------------------------------------------------------------------------

    def clean_fields(self, exclude: Iterable[str] | None = None) -> None:
        """Clean every declared field (``exclude``: those not to check), keeping the cleaned
        values; a ``forbid`` kind also refuses undeclared properties.

        A field's validators are taken to be functions of the value (Django's own are): a
        scalar value a field accepted is remembered (:data:`MEMO_LIMIT` per field) and not
        checked again, so saving an entity again checks only what changed."""
        skip = set(exclude or ())
        props = self._properties()
        accepted = self._kind.accepted
        errors: dict[str, Any] = {}
        for attr, model_field in self._kind.fields.items():
            if attr in skip:
                continue
            raw = props.get(attr, _MISSING)
            if raw is _MISSING:
                raw = model_field.get_default()
            elif attr in self._kind.converted and isinstance(raw, str):
                raw = getattr(self, attr)
            if model_field.blank and raw in model_field.empty_values:
                props[attr] = raw
                continue
            memo = accepted[attr]
            key = (type(raw), raw) if type(raw) in MEMO_TYPES else None
            cleaned = _MISSING if key is None else memo.get(key, _MISSING)
            if cleaned is not _MISSING:
                props[attr] = cleaned
                continue
            try:
                props[attr] = cleaned = stored_value(model_field, model_field.clean(raw, self))
            except ValidationError as exc:
                errors[attr] = exc.error_list
                continue
            if key is not None and len(memo) < MEMO_LIMIT:
                memo[key] = cleaned
        if self._kind.extra == FORBID:
            extra = sorted(set(props) - set(self._kind.fields) - {KIND_PROPERTY})
            if extra:
                errors[NON_FIELD_ERRORS] = [
                    ValidationError(
                        "%(kind)s allows no undeclared properties: %(names)s",
                        code="undeclared",
                        params={"kind": type(self).__name__, "names": ", ".join(extra)},
                    )
                ]
        if errors:
            raise ValidationError(errors)

    def validate_unique(self, exclude: Iterable[str] | None = None) -> None:
        """Nothing to check here: uniqueness is a unique index's, decided by the write
        (``UniqueViolation``), so that two racing saves cannot both win."""

    @classmethod
    def unique_error(cls, violation: UniqueViolation) -> ValidationError:
        """A unique index's refusal of a write, as a form shows it: Django's "Entry with this
        Link already exists." on the field the index guards (the first of its properties the
        kind declares), so that ``form.add_error(None, Entry.unique_error(exc))`` puts it
        there; the violation's own message, not on a field, if the index guards none."""
        try:
            properties = registry.get(violation.index).properties
        except ConfigurationError:  # an index no longer declared
            properties = ()
        name = next((p for p in properties if p in cls._kind.fields), None)
        if name is None:
            return ValidationError(str(violation), code="unique")
        model_field = cls._kind.fields[name]
        message = model_field.error_messages["unique"] % {
            "model_name": capfirst(cls._meta.verbose_name),
            "field_label": capfirst(model_field.verbose_name),
        }
        return ValidationError({name: ValidationError(message, code="unique")})

    def validate_constraints(self, exclude: Iterable[str] | None = None) -> None:
        """A kind has no database constraints (``Meta.constraints`` is not read)."""

    def kind_errors(self) -> dict[str, list[str]]:
        """What ``full_clean()`` would refuse, by field, without raising (the admin shows it
        beside a stored entity whose values no longer fit)."""
        try:
            self.full_clean()
        except ValidationError as exc:
            return exc.message_dict
        return {}

    # --- persistence ------------------------------------------------------------------------

    @sync_only
    def save(
        self,
        *,
        force_insert: bool | tuple[Any, ...] = False,
        force_update: bool = False,
        using: str | None = None,
        update_fields: Iterable[str] | None = None,
        if_unchanged: bool = False,
        validate: bool = True,
        expect: Expected | None = None,
    ) -> None:
        """``full_clean()``, then the entity's save: an invalid instance raises Django's
        ``ValidationError`` (naming the fields) and nothing is written. ``validate=False``
        skips the check, for values just cleaned. ``expect``: the stored state the write
        requires (:mod:`schemaless_store.values.expected`; the admin's token of the page it
        loaded)."""
        options = self._kind
        named = only_named(self, update_fields)
        for model_field in options.auto_dates:
            if named is None or model_field.name in named:
                model_field.pre_save(self, self._state.adding)
        check_expressions(self, named)
        if validate:
            if named is None:
                self.full_clean()
            else:  # as Django's: only the fields written are checked
                self.full_clean(exclude=[f for f in options.fields if f not in named])
        self._properties()[KIND_PROPERTY] = options.name
        if expect is not None:
            entity_writes.save(
                self, force_insert=bool(force_insert), expect=expect, update_fields=update_fields
            )
            return
        super().save(
            force_insert=force_insert, if_unchanged=if_unchanged, update_fields=update_fields
        )

    save.alters_data = True  # type: ignore[attr-defined]

    @sync_only
    def save_base(
        self,
        *args: Any,
        force_insert: Any = False,
        update_fields: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.save(force_insert=bool(force_insert), update_fields=update_fields)

    def refresh_from_db(
        self,
        using: str | None = None,
        fields: Iterable[str] | None = None,
        from_queryset: Any = None,
    ) -> None:
        """Read the stored entity again (by id, through the store's read path)."""
        fresh = type(self).objects.get(id=self.id)
        self.__dict__.update(
            added_id=fresh.added_id,
            row_updated=fresh.row_updated,
            row_body=fresh.row_body,
            _props=None,
        )
        self._state.adding = False
        self._state.db = fresh._state.db
