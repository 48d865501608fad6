""" "Check now": a sampled consistency check of each index, for the admin's health page:
entities sampled on every shard (the newest, and a run from a random place) compared with the
rows each index holds for them."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.db.models import Max

from ..cleaner import consistency
from ..config.indexes import registry
from ..exceptions import CorruptBody, SchemalessError, ShardUnavailable
from ..models.entity import Entity
from ..tables import lifecycle
from ..topology import shards
from .health_report import CHECK_OK_SUFFIX, CHECK_PREFIX

DEFAULT_SAMPLE = 100
MAX_SAMPLE = 5000


@dataclass
class CheckResult:
    index: str
    state: str | None
    sampled: int = 0
    missing: int = 0
    stale: int = 0
    unindexable: int = 0
    undecodable: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        if self.error or self.stale or self.unindexable or self.undecodable:
            return False
        # A building index lacks rows for entities the backfill has not reached: expected.
        return self.missing == 0 or self.state == lifecycle.BUILDING

    def summary(self, per_shard: int) -> str:
        text = (
            f"{CHECK_PREFIX} {self.index}: sampled {self.sampled} entities "
            f"(up to {per_shard} per shard): {self.missing} missing and {self.stale} stale "
            "index rows"
        )
        if self.unindexable:
            text += f", {self.unindexable} entities whose values do not fit the index"
        if self.undecodable:
            text += f", {self.undecodable} undecodable bodies"
        if self.error:
            text += f"; failed: {self.error}"
        if self.state == lifecycle.BUILDING and self.missing:
            text += " (building: rows are missing until the backfill finishes)"
        return text + ("; " + CHECK_OK_SUFFIX if self.ok else "; PROBLEMS.")


def sample_entities(alias: str, per_shard: int, rng: random.Random) -> list[Any]:
    """Up to ``per_shard`` entities of one shard: the most recently written half (where a crashed
    write would show) and a run of consecutive rows from a random place (everything else)."""
    on_shard = Entity.objects.using(alias)
    newest = list(on_shard.order_by("-row_updated", "-added_id")[: (per_shard + 1) // 2])
    picked = {e.added_id: e for e in newest}
    want = per_shard - len(picked)
    top = on_shard.aggregate(top=Max("added_id"))["top"]
    if want > 0 and top:
        start = rng.randint(1, top)
        window = list(on_shard.filter(added_id__gte=start).order_by("added_id")[: want * 2])
        if len(window) < want * 2:  # wrap around to the first rows
            window += list(on_shard.order_by("added_id")[: want * 2 - len(window)])
        for entity in window:
            if len(picked) >= per_shard:
                break
            picked.setdefault(entity.added_id, entity)
    return list(picked.values())


def check(
    names: Iterable[str] | None = None,
    per_shard: int = DEFAULT_SAMPLE,
    rng: random.Random | None = None,
) -> list[CheckResult]:
    """Compare sampled entities with the rows of each maintained index (``names``: all)."""
    rng = rng or random.Random()
    per_shard = max(1, min(MAX_SAMPLE, per_shard))
    states = lifecycle.states(refresh=True)
    wanted = None if names is None else set(names)
    # Entities are sampled: indexes over cell columns are checked by the cleaner's passes.
    indexes = [
        i for i in registry.valid() if i.column is None and (wanted is None or i.name in wanted)
    ]
    props: dict[bytes, dict[str, Any]] = {}
    undecodable = 0
    unavailable = []
    for alias in shards.shard_aliases():
        try:
            with shards.errors_named(alias):
                sample = sample_entities(alias, per_shard, rng)
        except (ShardUnavailable, DatabaseError) as exc:
            unavailable.append(f"{alias}: {exc}")
            continue
        for entity in sample:
            try:
                props[bytes(entity.row_id)] = entity.body_properties()
            except CorruptBody:
                undecodable += 1
    results = []
    for index in indexes:
        result = CheckResult(
            index=index.name,
            state=states.get(index.name),
            sampled=len(props) + undecodable,
            undecodable=undecodable,
            error="; ".join(unavailable),
        )
        try:
            diff = consistency.compare(index, props)
        except (SchemalessError, DatabaseError) as exc:
            result.error = "; ".join([*unavailable, str(exc)])
        else:
            result.missing, result.stale = len(diff.missing), len(diff.stale)
            result.unindexable = len(diff.unindexable)
        results.append(result)
    return results
