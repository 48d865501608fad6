"""The system checks of kinds (``manage.py check``): ``Meta.ordering`` is one property that
one of the kind's indexes holds, since a kind's query is ordered by its index
(docs/kinds.md#querysets). IDs ``schemaless.E401``-``E402``."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import Error, Tags, register


def ordering_problems(model: Any) -> list[Error]:
    """``model``'s ``Meta.ordering``, if it is one a kind cannot use."""
    ordering = list(model._meta.ordering or ())
    if not ordering:
        return []
    name = model.__name__
    first = ordering[0]
    if len(ordering) > 1 or not isinstance(first, str) or first.lstrip("-") in ("?", "pk", "id"):
        return [
            Error(
                f"kind {name}: Meta.ordering = {ordering!r}; a kind's query is ordered by one "
                "indexed property",
                hint="give Meta.ordering one property that an index of the kind holds, "
                "e.g. ordering = ['-published'] with Index('index_"
                f"{name.lower()}_published', ['published'], shard_on='published')",
                obj=model,
                id="schemaless.E401",
            )
        ]
    prop = first.lstrip("-")
    if not any(prop in index.properties for index in model._kind.indexes):
        return [
            Error(
                f"kind {name}: Meta.ordering = {ordering!r}, but no index of the kind holds "
                f"{prop!r}, so no query could be ordered by it",
                hint=f"declare Index('index_{name.lower()}_{prop}', [{prop!r}], "
                f"shard_on={prop!r}) in the kind's Meta.indexes, or drop Meta.ordering",
                obj=model,
                id="schemaless.E402",
            )
        ]
    return []


@register(Tags.models)
def check_kinds(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    found: list[Any] = []
    configs = app_configs or apps.get_app_configs()
    for config in configs:
        for model in config.get_models():
            if getattr(model, "_kind", None) is not None:
                found += ordering_problems(model)
    return found
