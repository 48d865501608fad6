"""Loading a stage of the data set into the store (``bulk_put``) and the peer (server-side)."""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm import tqdm

from . import peer
from .context import Bench, check_same
from .data import Stage


def load_stage(bench: Bench, stage: Stage) -> dict[str, Any]:
    from schemaless_store.models import Entity

    plan = bench.plan
    count = stage.hi - stage.lo
    start = time.perf_counter()
    with tqdm(
        total=count,
        desc=f"load store to {stage.hi:,}",
        unit="ent",
        disable=not sys.stderr.isatty(),
    ) as progress:
        for chunk in stage.chunks(plan.load_chunk):
            Entity.objects.bulk_put(chunk, batch_size=plan.load_batch)
            progress.update(len(chunk))
    store_s = time.perf_counter() - start
    start = time.perf_counter()
    peer.load(bench.peer.conn, stage)
    peer_s = time.perf_counter() - start
    bench.loaded.append(stage)
    check_same(bench, stage)
    bench.log(
        f"loaded {count:,} entities to reach {stage.hi:,}: store {count / store_s:,.0f}/s "
        f"(bulk_put, batches of {plan.load_batch}), peer {count / peer_s:,.0f}/s (server-side)"
    )
    return {
        "size": stage.hi,
        "entities": count,
        "store_seconds": store_s,
        "store_entities_per_s": count / store_s,
        "peer_seconds": peer_s,
        "peer_rows_per_s": count / peer_s,
    }
