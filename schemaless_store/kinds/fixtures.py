"""``dumpdata`` and ``loaddata`` of kinds (docs/kinds.md#fixtures).

A kind's entities live on the shards, as bodies, so Django's serializers (which read a
model's columns on ``default``) see none of them. The commands hand kinds to this module:

- :func:`dump` writes each entity of the kinds asked for as a fixture object,
  ``{"model": "library.book", "pk": "<id>", "fields": {...}}``, its properties in the JSON
  view of :mod:`..values.jsonview` (UUIDs, aware datetimes and bytes tagged, so they come back
  with their types); only the JSON format;
- :func:`load` reads such objects back with the kind's ``bulk_put()``: each validated before
  anything is written, an entity of the same id replaced (so loading twice is loading once).

A fixture mixing kinds with table rows is refused: dump and load them apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from ..config.indexes import KIND_PROPERTY
from ..values import jsonview


def is_kind(model: Any) -> bool:
    return getattr(model, "_kind", None) is not None


def requested_models(labels: Iterable[str]) -> list[tuple[str, list[Any]]]:
    """Each ``app_label`` or ``app_label.Model`` label with the models it names (Django's
    ``CommandError`` for an unknown one)."""
    found = []
    for label in labels:
        try:
            if "." in label:
                found.append((label, [apps.get_model(label)]))
            else:
                found.append((label, list(apps.get_app_config(label).get_models())))
        except LookupError as exc:
            raise CommandError(f"Unknown model or app: {label} ({exc})") from None
    return found


def kinds_of(labels: Iterable[str]) -> list[Any]:
    """The kinds that ``labels`` name; ``CommandError`` if a label names kinds and tables
    together (an app with both), which one fixture cannot hold."""
    kinds: list[Any] = []
    for label, models in requested_models(labels):
        named = [m for m in models if is_kind(m)]
        tables = [m for m in models if not is_kind(m) and not m._meta.proxy]
        if named and tables:
            raise CommandError(
                f"dumpdata {label}: the app has kinds ({', '.join(m.__name__ for m in named)}), "
                "whose entities live on the shards, and tables; dump them apart: "
                f"`dumpdata {' '.join(m._meta.label for m in named)}` for the kinds, and "
                f"`dumpdata {label} "
                f"{' '.join('--exclude ' + m._meta.label for m in named)}` for the rest"
            )
        kinds += [m for m in named if m not in kinds]
    return kinds


def dump(kinds: Iterable[Any]) -> list[dict[str, Any]]:
    """Every entity of ``kinds`` as a fixture object (see the module docs)."""
    objects = []
    for model in kinds:
        label = model._meta.label_lower
        for entity in model.objects.all():
            properties = dict(entity.body_properties())
            properties.pop(KIND_PROPERTY, None)
            objects.append(
                {
                    "model": label,
                    "pk": str(entity.id),
                    "fields": jsonview.properties_to_json(properties),
                }
            )
    return objects


def kind_objects(text: str, name: str) -> list[dict[str, Any]] | None:
    """The objects of a JSON fixture if they are kinds' (None if none is); ``CommandError``
    for a fixture mixing kinds with table rows."""
    try:
        data = json.loads(text)
    except ValueError:
        return None  # not ours to judge: Django's loaddata reports it
    if not isinstance(data, list):
        return None
    marks = []
    for item in data:
        label = item.get("model") if isinstance(item, dict) else None
        try:
            marks.append(isinstance(label, str) and is_kind(apps.get_model(label)))
        except (LookupError, ValueError):
            marks.append(False)
    if not any(marks):
        return None
    if not all(marks):
        raise CommandError(
            f"fixture {name} mixes kinds' entities (stored on the shards) with table rows; "
            "dump and load them apart (`dumpdata app.Kind ...` makes a fixture of kinds)"
        )
    return data


def load(objects: list[dict[str, Any]], name: str) -> int:
    """Write the fixture objects of kinds (validated, all before any write); their count."""
    by_model: dict[Any, list[dict[str, Any]]] = {}
    for n, item in enumerate(objects):
        model = apps.get_model(item["model"])
        fields = item.get("fields")
        if not isinstance(fields, dict) or "pk" not in item:
            raise CommandError(f"fixture {name}, object {n}: a kind's object has pk and fields")
        try:
            properties = {k: jsonview.from_json(v, k) for k, v in fields.items()}
        except jsonview.JSONViewError as exc:
            raise CommandError(f"fixture {name}, object {n}: {exc}") from None
        properties["id"] = item["pk"]
        by_model.setdefault(model, []).append(properties)
    for model, items in by_model.items():
        try:
            model.objects.bulk_put(items)
        except ValidationError as exc:
            raise CommandError(
                f"fixture {name}: a {model.__name__} in it is invalid, nothing of it was "
                f"written: {'; '.join(exc.messages)}"
            ) from None
    return len(objects)
