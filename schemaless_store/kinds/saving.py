"""What a kind's ``save()`` checks before it validates: ``update_fields`` as Django's, and
values that are expressions (``F("title")``), which a save cannot apply."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError

from ..config.indexes import KIND_PROPERTY
from .options import FORBID

# Value types that are never expressions (checked first: every save looks at every value).
PLAIN = frozenset((str, int, float, bool, type(None), bytes, uuid.UUID, dt.datetime, list, dict))


def only_named(entity: Any, update_fields: Iterable[str] | None) -> frozenset[str] | None:
    """``save(update_fields=...)`` as a set of names, each a declared field (or, on an
    ``allow`` kind, a property the instance holds): else ``ValueError``, as Django's."""
    if update_fields is None:
        return None
    names = frozenset([update_fields] if isinstance(update_fields, str) else update_fields)
    options = type(entity)._kind
    props = entity._properties()
    unknown = sorted(
        name
        for name in names
        if name not in options.fields
        and (options.extra == FORBID or name not in props or name == KIND_PROPERTY)
    )
    if unknown:
        kind = type(entity).__name__
        raise ValueError(
            f"The following fields do not exist in this model, are m2m fields, or are "
            f"non-concrete fields: {', '.join(unknown)}. {kind}.save(update_fields=...) names "
            f"fields the kind declares ({', '.join(options.fields)})"
            + ("" if options.extra == FORBID else " or properties the instance holds")
        )
    return names


def check_expressions(entity: Any, named: frozenset[str] | None) -> None:
    """Refuse an expression as a value (``b.title = F("title")``): a save writes values, and
    would otherwise store the expression's text."""
    kind = type(entity).__name__
    for name, value in entity._properties().items():
        if type(value) in PLAIN:  # the usual case: no expression
            continue
        if (named is None or name in named) and hasattr(value, "resolve_expression"):
            raise ValidationError(
                {
                    name: ValidationError(
                        "%(kind)s.%(name)s is %(value)s: save() writes values, not "
                        "expressions. Use %(kind)s.objects.filter(pk=...).update(%(name)s="
                        "%(value)s), which applies it, or set the value itself.",
                        code="expression",
                        params={"kind": kind, "name": name, "value": repr(value)},
                    )
                }
            )
