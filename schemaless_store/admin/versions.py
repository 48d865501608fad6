"""The admin's view of versions: an entity's history and a cell column's versions, listed and
compared two at a time (which properties were added, removed or changed). See ``docs/admin.md``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..exceptions import CorruptBody
from ..values import jsonview


@dataclass
class VersionView:
    ref_key: int
    created_at: dt.datetime
    deleted: bool
    body_json: str  # the readable JSON view ("" for a deletion)
    error: str = ""  # why the body cannot be shown


@dataclass
class PropertyChange:
    name: str
    status: str  # "added", "removed", "changed" or "same"
    before: str  # compact JSON of the value ("" when absent)
    after: str


def version_view(ref_key: int, created_at: dt.datetime, read_body: Any) -> VersionView:
    """``read_body()`` returns the properties (or None for a deletion) or raises CorruptBody."""
    try:
        properties = read_body()
    except CorruptBody as exc:
        return VersionView(ref_key, created_at, False, "", str(exc))
    if properties is None:
        return VersionView(ref_key, created_at, True, "")
    try:
        return VersionView(ref_key, created_at, False, jsonview.dumps(properties))
    except jsonview.JSONViewError as exc:
        return VersionView(ref_key, created_at, False, "", str(exc))


def compare(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[PropertyChange]:
    """Property by property, in name order; values are compared by their JSON view, so ``1``
    and ``1.0`` or ``True`` differ as they do in the store."""
    before, after = before or {}, after or {}
    changes = []
    for name in sorted(set(before) | set(after), key=str):
        old = _value(before, name)
        new = _value(after, name)
        if name not in before:
            status = "added"
        elif name not in after:
            status = "removed"
        elif old != new:
            status = "changed"
        else:
            status = "same"
        changes.append(PropertyChange(str(name), status, old, new))
    return changes


def _value(properties: dict[str, Any], name: str) -> str:
    if name not in properties:
        return ""
    return json.dumps(jsonview.to_json(properties[name]), ensure_ascii=False, sort_keys=True)


def parse_version(text: str | None, known: list[int]) -> tuple[int | None, str]:
    """A version number from a query parameter: (number, "") or (None, why not)."""
    if text is None or text == "":
        return None, ""
    try:
        number = int(text)
    except ValueError:
        return None, f"{text!r} is not a version number"
    if number not in known:
        return None, f"there is no version {number}"
    return number, ""


def versions_page(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    title: str,
    crumbs: dict[str, Any],
    views: list[VersionView],
    bodies: dict[int, Any],
    keep: list[tuple[str, str]],
    off_message: str,
) -> HttpResponse:
    """The versions page (an entity's, or a cell column's): the list of ``views`` and, given
    ``?a=N&b=M`` (default: the latest two), those two versions compared (``bodies[n]()`` reads
    version ``n``'s properties). ``keep``: query parameters the compare form carries along."""
    known = [v.ref_key for v in views]
    a, a_problem = parse_version(request.GET.get("a"), known)
    b, b_problem = parse_version(request.GET.get("b"), known)
    problems = [p for p in (a_problem, b_problem) if p]
    changes = None
    if (a is None or b is None) and len(known) > 1 and not problems:
        a, b = known[-2], known[-1]  # by default: the latest against the one before
    if a is not None and b is not None:
        try:
            changes = compare(bodies[a](), bodies[b]())
        except CorruptBody as exc:
            problems.append(str(exc))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "subtitle": None,
        "opts": model_admin.opts,
        **crumbs,
        "off_message": off_message,
        "versions": views,
        "versions_newest_first": list(reversed(views)),
        "a": a,
        "b": b,
        "changes": changes,
        "problems": problems,
        "keep": keep,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/schemaless_store/versions.html", context)
