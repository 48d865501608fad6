"""The "Shards and buckets" page (the ``BucketMove`` changelist): the bucket map in force drawn
as a bar of every bucket coloured by shard, what each shard holds and serves, each shard's
replicas with their state and lag (docs/replicas.md), the move in progress with its phase and
rows copied so far, and past moves: when each ran, how long it took, the rows it copied per
table, whether its copies were verified and how long writes paused (docs/resharding.md).
Moves are made with ``manage.py movebuckets``; the page only shows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from ..config import conf
from ..config.indexes import registry
from ..config.metadata import BucketMove
from ..exceptions import ShardUnavailable
from ..moves.record import describe
from ..tables import buckets as bucket_table
from ..tables.counts import TableCount, count_tables
from ..topology import bucket_map, replicas, shards
from .common import ReadOnlyAdmin, crumbs

# One colour per shard, in shard order (cycled past eight).
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]


@dataclass
class Span:
    alias: str
    first: int
    last: int
    colour: str
    width: float  # percent of the bar

    @property
    def label(self) -> str:
        what = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{self.alias}: buckets {what}"


@dataclass
class ShardRow:
    alias: str
    colour: str
    buckets: int
    ranges: str
    entities: TableCount
    index_rows: int
    served: str  # what its own bucket table says
    problem: str = ""


def bar(owners: tuple[str, ...], colours: dict[str, str]) -> list[Span]:
    found: list[Span] = []
    total = len(owners)
    for number, alias in enumerate(owners):
        if found and found[-1].alias == alias and found[-1].last == number - 1:
            found[-1].last = number
            found[-1].width = 100.0 * (found[-1].last - found[-1].first + 1) / total
        else:
            found.append(Span(alias, number, number, colours.get(alias, "#999"), 100.0 / total))
    return found


def shard_rows(found: bucket_map.BucketMap, colours: dict[str, str]) -> list[ShardRow]:
    tables = ["entities", *(index.name for index in registry.valid())]
    rows = []
    for alias in shards.shard_aliases():
        mapped = found.buckets_of(alias)
        counts = count_tables(alias, tables)
        index_rows = sum(c.rows or 0 for name, c in counts.items() if name != "entities")
        try:
            states = bucket_table.states(alias)
            by_state: dict[str, int] = {}
            for state in states.values():
                name = bucket_table.NAMES.get(state, str(state))
                by_state[name] = by_state.get(name, 0) + 1
            served = ", ".join(f"{n} {name}" for name, n in sorted(by_state.items())) or "nothing"
            serving = {b for b, s in states.items() if s in bucket_table.SERVING}
            missing = len(set(mapped) - serving)
            problem = (
                f"its table does not serve {missing} of the buckets the map gives it"
                if missing
                else ""
            )
        except ShardUnavailable as exc:
            served, problem = "?", str(exc)
        except Exception as exc:
            served, problem = "?", f"no bucket table ({exc}): run migrateall"
        rows.append(
            ShardRow(
                alias,
                colours[alias],
                len(mapped),
                bucket_map.describe(mapped),
                counts["entities"],
                index_rows,
                served,
                problem,
            )
        )
    return rows


@admin.register(BucketMove)
class BucketMoveAdmin(ReadOnlyAdmin):
    """Its changelist is the "Shards and buckets" page."""

    change_list_template = "admin/schemaless_store/bucketmove/shards.html"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        found = bucket_map.refresh()
        aliases = list(shards.shard_aliases())
        colours = {alias: PALETTE[n % len(PALETTE)] for n, alias in enumerate(aliases)}
        moves = list(BucketMove.objects.order_by("-pk")[:50])
        context = {
            **self.admin_site.each_context(request),
            "title": "Shards and buckets",
            "subtitle": None,
            "opts": self.opts,
            **crumbs(self.opts, ("Shards and buckets", "")),
            "map": found,
            "spans": bar(found.owners, colours),
            "shard_rows": shard_rows(found, colours),
            "moving": bucket_map.describe(sorted(found.moving)),
            "in_progress": [describe(m) for m in moves if m.phase not in BucketMove.FINISHED],
            "past": [describe(m) for m in moves if m.phase in BucketMove.FINISHED],
            "time_zone": timezone.get_current_timezone_name(),
            "health_url": reverse("admin:schemaless_store_indexstate_changelist"),
            "replica_rows": [
                {"shard": shard["shard"], **replica}
                for shard in replicas.status()
                for replica in shard["replicas"]
            ],
            "read_from_replicas": conf.get().read_from_replicas,
            "replica_max_lag": conf.get().replica_max_lag,
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
        # A move's page is its row on the shards page.
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse("admin:schemaless_store_bucketmove_changelist"))
