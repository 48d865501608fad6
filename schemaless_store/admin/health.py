"""The index-health page (the ``IndexState`` changelist, with a "check now" action: POST,
change permission on index states) and the read-only list of cleaner passes."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from ..config.metadata import CleanerPass, IndexState
from ..tables.counts import EXACT_COUNT_BELOW, count_tables
from ..topology import shards
from .cache_panel import cache_panel
from .common import ReadOnlyAdmin, crumbs, health_url, log_change
from .health_report import ENTITIES_TABLE, PassView, report
from .sample_check import DEFAULT_SAMPLE, MAX_SAMPLE, check


@admin.register(IndexState)
class IndexStateAdmin(admin.ModelAdmin):
    """Its changelist is the index-health page; "check now" samples entities per shard."""

    change_list_template = "admin/schemaless_store/indexstate/health.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # states are recorded by migrateall and the cleaner

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        check = self.admin_site.admin_view(require_POST(self.check_view))
        return [
            path("check/", check, name="schemaless_store_indexstate_check"),
            *super().get_urls(),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        reports = report()
        aliases = list(shards.shard_aliases())
        entities = {
            alias: next(
                (s.entities for r in reports for s in r.shards if s.alias == alias),
                count_tables(alias, [ENTITIES_TABLE])[ENTITIES_TABLE],
            )
            for alias in aliases
        }
        context = {
            **self.admin_site.each_context(request),
            "title": "Index health",
            "subtitle": None,
            "opts": self.opts,
            **crumbs(self.opts, ("Index health", "")),
            "reports": reports,
            "aliases": aliases,
            "entity_counts": [(alias, entities[alias]) for alias in aliases],
            "can_check": self.has_change_permission(request),
            "sample_default": DEFAULT_SAMPLE,
            "sample_max": MAX_SAMPLE,
            "exact_below": EXACT_COUNT_BELOW,
            "passes_url": reverse("admin:schemaless_store_cleanerpass_changelist"),
            "entities_url": reverse("admin:schemaless_store_entity_changelist"),
            "now": dt.datetime.now(dt.UTC),
            "cache": cache_panel(),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # An index's state is the cleaner's to change; its page is its section of the health page.
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(health_url(unquote(object_id)))

    def check_view(self, request: HttpRequest) -> HttpResponse:
        """POST: sample entities on every shard and compare them with the indexes' rows."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        name = request.POST.get("index", "")
        per_shard, note = sample_size(request.POST.get("sample", ""))
        if per_shard is None:
            messages.error(request, note)
            return HttpResponseRedirect(health_url(name))
        if note:
            messages.warning(request, note)
        results = check([name] if name else None, per_shard, random.Random())
        if name and not results:
            messages.error(request, f"No maintained index is called {name!r}.")
        states = {s.name: s for s in IndexState.objects.filter(name__in=[r.index for r in results])}
        for result in results:
            summary = result.summary(per_shard)
            state = states.get(result.index)
            if state is not None:
                log_change(request, state, state.pk, CHANGE, summary)
            messages.add_message(
                request, messages.SUCCESS if result.ok else messages.ERROR, summary
            )
        return HttpResponseRedirect(health_url(name))


def sample_size(text: str) -> tuple[int | None, str]:
    """The "check now" sample size typed in the form: ``(size, "")``; ``(size, why)`` when it
    was clamped to 1..MAX_SAMPLE or left empty; ``(None, why)`` for text that is not a number."""
    text = text.strip()
    shown = text if len(text) <= 24 else text[:24] + "…"
    if not text:
        return DEFAULT_SAMPLE, f"No sample size given: checked the default, {DEFAULT_SAMPLE}."
    try:
        asked = int(text)
    except ValueError:
        return None, (
            f"The sample size {shown!r} is not a whole number: give 1 to {MAX_SAMPLE:,} "
            "entities per shard. Nothing was checked."
        )
    if asked > MAX_SAMPLE:
        return MAX_SAMPLE, (
            f"A sample of {shown} is over the most a check takes, {MAX_SAMPLE:,} per shard: "
            f"checked {MAX_SAMPLE:,}."
        )
    if asked < 1:
        return 1, f"A sample of {shown} is under the least, 1 per shard: checked 1."
    return asked, ""


@admin.register(CleanerPass)
class CleanerPassAdmin(ReadOnlyAdmin):
    """Every recorded cleaner pass, read-only (the cleaner writes them). Compact columns, so the
    list fits a 1280 px window beside the admin's navigation and the filters."""

    change_list_template = "admin/schemaless_store/cleanerpass/change_list.html"
    list_display = (
        "index",
        "shard",
        "kind",
        "pass_status",
        "started_at",
        "took",
        "entities_scanned",
        "rows_inserted",
        "stale_removed",
        "orphans_removed",
        "errors",
    )
    list_filter = ("index_name", "shard", "kind", "status")
    # No date_hierarchy: on MariaDB it needs the server's time zone tables, often not loaded.

    @admin.display(description="index", ordering="index_name")
    def index(self, obj: CleanerPass) -> str:
        # A long name may break after an underscore rather than widen the column.
        return mark_safe("_<wbr>".join(escape(part) for part in obj.index_name.split("_")))

    @admin.display(description="status", ordering="status")
    def pass_status(self, obj: CleanerPass) -> str:
        failed = PassView(obj).failed
        return format_html('<span class="{}">{}</span>', "sls-bad" if failed else "", obj.status)

    @admin.display(description="started", ordering="started")
    def started_at(self, obj: CleanerPass) -> str:
        local = timezone.localtime(obj.started)
        return format_html(
            '<span title="{}">{}<br>{}</span>',
            local.isoformat(),
            local.strftime("%Y-%m-%d"),
            local.strftime("%H:%M:%S"),
        )

    @admin.display(description="took")
    def took(self, obj: CleanerPass) -> str:
        duration = PassView(obj).duration
        return duration if obj.finished else f"{duration} so far"
