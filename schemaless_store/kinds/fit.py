"""What the write would refuse, told before it: a kind's ``validate_constraints()`` (index
values that do not fit their index: too long once encoded, NaN, a naive datetime, a type the
column does not hold) and ``validate_unique()`` (a value a unique index holds for another
entity). A ``ModelForm``'s ``is_valid()`` runs both, so a form that is valid saves; the write
still decides (a unique value taken meanwhile is refused by it, ``UniqueViolation``).

Each error is on the field whose value does not fit, with the index named and what to do."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.utils.text import capfirst

from ..exceptions import IndexValueError, IndexValueTooLong, SchemalessError
from ..tables.lifecycle import maintained_indexes

_PROPERTY = re.compile(r"property '([^']+)'")


def index_error(model: Any, exc: IndexValueError) -> ValidationError:
    """An index's refusal of a value, on the field it names (as a form shows it)."""
    found = _PROPERTY.search(str(exc))
    name = found.group(1) if found else None
    if isinstance(exc, IndexValueTooLong):
        text = (
            f"This value is too long for the index: {exc}. Shorten it (or give the index's "
            "column more bytes)."
        )
    else:
        text = f"This value cannot be indexed: {exc}."
    error = ValidationError(text, code="index")
    if name is not None and name in model._kind.fields:
        return ValidationError({name: error})
    return ValidationError({NON_FIELD_ERRORS: error})


def check_indexes(instance: Any, exclude: Iterable[str] | None = None) -> None:
    """``ValidationError`` by field for each value an index this entity belongs to cannot
    hold (fields in ``exclude`` are not reported: a form leaves out those it does not show)."""
    skip = set(exclude or ())
    properties = instance.body_properties()
    errors: dict[str, list[ValidationError]] = {}
    for index in maintained_indexes():
        try:
            index.rows_for(properties)
        except IndexValueError as exc:
            for name, problems in index_error(type(instance), exc).error_dict.items():
                if name not in skip:
                    errors.setdefault(name, []).extend(problems)
    if errors:
        raise ValidationError(errors)


def check_unique(instance: Any, exclude: Iterable[str] | None = None) -> None:
    """``ValidationError`` on the guarded field for each unique index of the kind that holds
    this entity's value for another entity (one index read per unique index)."""
    model = type(instance)
    skip = set(exclude or ())
    properties = instance.body_properties()
    errors: dict[str, list[ValidationError]] = {}
    for index in model._kind.indexes:
        if not index.unique or any(p not in properties for p in index.properties):
            continue
        guarded = next((p for p in index.properties if p in model._kind.fields), None)
        if guarded is None or guarded in skip:
            continue
        conditions = {p: properties[p] for p in index.properties}
        try:
            holder = model.objects.filter_index(**conditions).allow_building().first()
        except SchemalessError:
            continue  # a value the index cannot hold: check_indexes says so
        if holder is not None and holder.id != instance.id:
            model_field = model._kind.fields[guarded]
            message = model_field.error_messages["unique"] % {
                "model_name": capfirst(model._meta.verbose_name),
                "field_label": capfirst(model_field.verbose_name),
            }
            errors.setdefault(guarded, []).append(ValidationError(message, code="unique"))
    if errors:
        raise ValidationError(errors)
