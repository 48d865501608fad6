"""What the cleaner's tests share (tests/cleaner/): the index they backfill (``PUBLISHED``, the
``published`` fixture declares it), its state, the passes recorded, and a stale row planted by
hand."""

from __future__ import annotations

from schemaless_store.config.indexes import registry
from schemaless_store.models import CleanerPass, Entity
from schemaless_store.tables import lifecycle
from schemaless_store.topology import bucket_map
from tests.support.raw import index_rows, insert_index_row

PUBLISHED = "index_cleaner_published"


def fixed_after_backfill(name: str) -> int:
    """Rows the repair and sweep passes had to fix: none if the backfill itself was exact."""
    return sum(
        p.rows_inserted + p.stale_removed + p.orphans_removed
        for p in CleanerPass.objects.filter(index_name=name, kind__in=["repair", "sweep"])
    )


def state(name: str) -> str | None:
    return lifecycle.states(refresh=True).get(name)


def passes(**filters) -> list[CleanerPass]:
    return list(CleanerPass.objects.filter(**filters).order_by("id"))


def plant_stale_link(entity: Entity) -> tuple[str, tuple]:
    """A row of index_link the entity does not imply (as a writer that died before removing
    it leaves behind), on the shard the value routes to: that shard and the row."""
    link = registry.get("index_link")
    old_link = link.column_value("link", "https://example.com/gone")
    home = bucket_map.alias_for(link.routing_key(old_link))
    row = (old_link, entity.id.bytes)
    insert_index_row("index_link", home, row)
    assert row in index_rows("index_link", home)
    return home, row
