"""What every leg shares: the plan, the servers, the baselines' connections, the loaded data."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from . import data, peer
from .data import Stage
from .plan import Plan
from .raw import RawStore


@dataclass
class Bench:
    plan: Plan
    servers: list[Any]
    raw: RawStore
    peer: peer.Peer
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    loaded: list[Stage] = field(default_factory=list)
    verbose: bool = True

    @property
    def size(self) -> int:
        """Entities of the data set in the store (the write legs add a few of their own)."""
        return self.loaded[-1].hi if self.loaded else 0

    def random_user(self) -> int:
        """A user of the data set (each has ~100 entities), uniformly over all loaded stages."""
        stage = self.rng.choices(self.loaded, weights=[s.users for s in self.loaded])[0]
        return stage.first_user + self.rng.randrange(stage.users)

    def random_entity(self) -> int:
        return self.rng.randrange(self.size)

    def log(self, message: str) -> None:
        if self.verbose:
            print(f"bench: {message}", flush=True)


def check_same(bench: Bench, stage: Stage, samples: int = 20) -> None:
    """The store and the peer hold the same property bags (sampled), or the run stops."""
    from schemaless_store.models import Entity

    cursor = bench.peer.conn.cursor()
    for _ in range(samples):
        i = bench.rng.randrange(stage.lo, stage.hi)
        expected = stage.properties(i)
        expected.pop("id")
        ours = Entity.objects.get(id=data.entity_id(i)).body_properties()
        cursor.execute(f"SELECT body FROM {peer.TABLE} WHERE id = %s", (data.peer_id(i),))
        theirs = json.loads(cursor.fetchone()[0])
        if not ours == theirs == expected:
            raise AssertionError(f"entity {i}: store {ours!r} != peer {theirs!r}")
