"""The cell store in the admin, read-only: a row's columns (the latest version of each), a
column's versions, and two versions compared. Cells are immutable: nothing can be added,
changed or deleted."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from ..exceptions import InvalidCell, InvalidEntityId, ShardUnavailable
from ..models.cell import Cell
from ..topology import bucket_map
from ..values import entity_ids
from .common import ReadOnlyAdmin, crumbs
from .versions import version_view, versions_page


@admin.register(Cell)
class CellAdmin(ReadOnlyAdmin):
    """The cell store, read-only: a row's columns (latest version of each), a column's versions,
    and two versions compared. Cells are immutable: nothing can be added, changed or deleted."""

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("", wrap(self.changelist_view), name="schemaless_store_cell_changelist"),
            path("versions/", wrap(self.versions_view), name="schemaless_store_cell_versions"),
        ]

    def _row_key(self, request: HttpRequest) -> tuple[bytes | None, str]:
        text = request.GET.get("row", "").strip()
        if not text:
            return None, ""
        try:
            return entity_ids.entity_id_bytes(text), ""
        except (InvalidEntityId, ValueError, TypeError) as exc:
            return None, f"{text!r} is not a row key: {exc}"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        key, error = self._row_key(request)
        columns = []
        if key is not None:
            try:
                latest = Cell.objects.row(key)
            except ShardUnavailable as exc:
                error, latest = str(exc), {}
            for cell in latest.values():
                url = (
                    reverse("admin:schemaless_store_cell_versions")
                    + "?"
                    + urlencode({"row": str(cell.row_key), "column": cell.column_name})
                )
                columns.append((cell, url))
        context = {
            **self.admin_site.each_context(request),
            "title": "Cells of a row",
            "subtitle": None,
            "opts": self.opts,
            **crumbs(self.opts, ("Cells", "")),
            "row_text": request.GET.get("row", ""),
            "row_key": None if key is None else str(uuid.UUID(bytes=key)),
            "shard": None if key is None else bucket_map.alias_for(key),
            "columns": columns,
            "error": error,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/schemaless_store/cell/row.html", context)

    def versions_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        key, error = self._row_key(request)
        column = request.GET.get("column", "")
        rows_url = reverse("admin:schemaless_store_cell_changelist")
        if key is None or not column:
            messages.error(request, error or "give a row key and a column")
            return HttpResponseRedirect(rows_url)
        try:
            cells = Cell.objects.versions(key, column)
        except (InvalidCell, ShardUnavailable) as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(rows_url)
        views = [version_view(c.ref_key, c.created_at, lambda c=c: c.body) for c in cells]
        bodies = {c.ref_key: (lambda c=c: c.body) for c in cells}
        row_text = str(uuid.UUID(bytes=key))
        trail = crumbs(
            self.opts,
            ("Cells", rows_url),
            (row_text, rows_url + "?" + urlencode({"row": row_text})),
            (column, ""),
        )
        title = f"Versions of column {column!r} of row {row_text}"
        keep = [("row", row_text), ("column", column)]
        return versions_page(self, request, title, trail, views, bodies, keep, "")
