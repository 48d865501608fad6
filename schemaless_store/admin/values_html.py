"""Property values as HTML for the admin, in the JSON view of
:mod:`schemaless_store.values.jsonview`:
an entity's body (the same text as ``jsonview.dumps``, character for character) and the entity
list's preview (each property ``name: value``, wrapping over a few lines).

Two additions that are not part of the text, so what is copied from the page reads back
exactly: the id in a ``{"$uuid": ...}`` value is a link to that entity's admin page, and a
number that is a time by the rule of :mod:`.timestamps` carries its date — after the line in the
body (drawn by CSS from ``data-when``, so it is not copied), in a tooltip in the preview.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..values import jsonview
from .timestamps import time_note

# The most a preview holds: what a wide screen shows in its three lines. Narrower screens show
# fewer (the browser cuts the text at three lines); the tooltip has the longer text.
PREVIEW_CHARS = 400
TOOLTIP_CHARS = 1000
SEPARATOR = " · "
PART = '<span class="sls-prop"><span class="sls-name">{}</span>: {}</span>'
MORE = mark_safe('<span class="sls-more">…</span>')

# The admin URL of the entity with this id (text of a UUID), or None to show it without a link.
Linker = Callable[[str], str | None]


def _no_links(text: str) -> str | None:
    return None


@dataclass
class Preview:
    html: SafeString  # the properties, each in a span.sls-prop
    text: str  # the same as plain text (longer), for the tooltip


def body_html(properties: dict[str, Any], link: Linker = _no_links) -> SafeString:
    """``jsonview.dumps(properties)`` as HTML, with entity links and dates (see the module).
    Raises :class:`~schemaless_store.values.jsonview.JSONViewError` as ``dumps`` does."""
    data = jsonview.properties_to_json(properties)
    return mark_safe(_render(data, None, 2, 0, link, top=True)[0])


def value_html(name: Any, value: Any, link: Linker = _no_links) -> SafeString:
    """One value as compact JSON (``jsonview.dumps_value``), with entity links and dates."""
    return mark_safe(_render(jsonview.to_json(value), name, None, 0, link)[0])


def preview(properties: dict[str, Any], link: Linker = _no_links) -> Preview:
    """The first properties of a body as ``name: value`` parts, values in the JSON view."""
    parts: list[SafeString] = []
    texts: list[str] = []
    used = 0
    for name, value in properties.items():
        if used > TOOLTIP_CHARS:
            texts.append("…")
            break
        value_text = jsonview.dumps_value(value)
        texts.append(f"{name}: {value_text}")
        if used > PREVIEW_CHARS:
            if parts[-1] != MORE:
                parts.append(MORE)
        else:
            room = PREVIEW_CHARS - used - len(str(name)) - 2
            if len(value_text) > room:  # the last part shown: cut (as plain text), and marked so
                value_text = value_text[: max(room, 8)] + "…"
                parts.append(format_html(PART, name, value_text))
            else:
                parts.append(format_html(PART, name, value_html(name, value, link)))
        used += len(str(name)) + 2 + len(value_text) + len(SEPARATOR)
    text = SEPARATOR.join(texts)
    if len(text) > TOOLTIP_CHARS:
        text = text[: TOOLTIP_CHARS - 1] + "…"
    return Preview(html=format_html_join(SEPARATOR, "{}", ((p,) for p in parts)), text=text)


def entity_ids(properties: dict[str, Any], limit: int = 200) -> list[uuid.UUID]:
    """The UUIDs among a body's values (in lists and dicts too, keys included), at most
    ``limit``: the ids that may name other entities."""
    found: dict[uuid.UUID, None] = {}
    pending = list(properties.values())
    while pending and len(found) < limit:
        value = pending.pop()
        if type(value) is uuid.UUID:
            found[value] = None
        elif type(value) is list:
            pending.extend(value)
        elif type(value) is dict:
            pending.extend(value.keys())
            pending.extend(value.values())
    return list(found)


# --- rendering ---------------------------------------------------------------------------------


def _render(
    data: Any, name: Any, indent: int | None, level: int, link: Linker, top: bool = False
) -> tuple[str, str]:
    """``(html, note)`` of one JSON-form value: the HTML of ``json.dumps(data, indent=indent)``
    and, for a time, its date (placed by the caller at the end of the line)."""
    if type(data) is dict:
        if not top and len(data) == 1 and type(data.get("$uuid")) is str:
            items = [(escape(json.dumps("$uuid")) + ": " + _uuid(data["$uuid"], link), "")]
        else:
            items = []
            for key, item in data.items():
                html, note = _render(item, key, indent, level + 1, link)
                items.append((escape(json.dumps(key, ensure_ascii=False)) + ": " + html, note))
        return _container("{", "}", items, indent, level), ""
    if type(data) is list:
        items = [_render(item, name, indent, level + 1, link) for item in data]
        return _container("[", "]", items, indent, level), ""
    text = escape(json.dumps(data, ensure_ascii=False, allow_nan=False))
    found = time_note(name, data)
    if found is None:
        return text, ""
    when, unit = found
    if indent is None:  # compact: the date in the value's tooltip
        return str(
            format_html('<span class="sls-time" title="{} ({})">{}</span>', when, unit, text)
        ), ""
    return text, str(
        format_html(
            '<span class="sls-when" data-when="{}" title="{} since 1970-01-01 UTC"></span>',
            when,
            unit,
        )
    )


def _container(
    open_: str, close: str, items: list[tuple[str, str]], indent: int | None, level: int
) -> str:
    if not items:
        return open_ + close
    if indent is None:
        return open_ + ", ".join(html for html, _ in items) + close
    pad = " " * (indent * (level + 1))
    last = len(items) - 1
    lines = [pad + html + ("," if n < last else "") + note for n, (html, note) in enumerate(items)]
    return open_ + "\n" + "\n".join(lines) + "\n" + " " * (indent * level) + close


def _uuid(text: str, link: Linker) -> str:
    url = link(text)
    if url is None:
        return escape(json.dumps(text))
    return str(
        format_html('"<a class="sls-ref" href="{}" title="open this entity">{}</a>"', url, text)
    )
