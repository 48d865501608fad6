"""How much each leg does: the full run's sizes and counts, and the ``--quick`` smoke mode's."""

from __future__ import annotations

from dataclasses import dataclass, replace

LEGS = (
    "put",
    "bulk_put",
    "get",
    "get_many",
    "query",
    "cache",
    "clients",
    "scatter",
    "scale",
    "index_add",
    "index_move",
    "backup",
    "netem",
    "devapi",
    "layout",
)
# ``netem`` only when asked for: it puts the servers behind a veth pair for the whole run (the
# other legs then cross it too, without delay), and the targets are checked without it.
# ``layout`` only when asked for: it rebuilds every shard's entities twice (docs/performance.md).
DEFAULT_LEGS = tuple(leg for leg in LEGS if leg not in ("netem", "layout"))


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # the store grows to each in turn; the scale leg measures at each
    main_size: int  # the size at which put/get/query legs compare against their baselines
    rounds: int  # alternating rounds per comparison (ratios are medians over rounds)
    put_ops: int  # single puts per contender per round
    bulk_batches: int  # bulk batches per contender per round
    bulk_batch: int  # entities per bulk batch (bulk_put's default batch size)
    get_ops: int
    get_many_ops: int
    query_ops: int
    unindexed_ops: int  # unindexed JSON scans per round (each reads the whole table)
    scale_rounds: int
    scale_ops: int
    writer_before_s: float  # the live writer's warm-up before an index is added
    settle_s: float  # at most this long, wait for InnoDB to flush before a latency measurement
    load_chunk: int  # entities generated in memory at a time while loading
    load_batch: int  # bulk_put batch size while loading
    buffer_pool: str  # innodb_buffer_pool_size of each server
    backup_rounds: int  # alternating rounds of whole-store exports (ours, raw)
    clients_rounds: int  # alternating rounds of the clients leg (4 processes, ours then raw)
    clients_s: float  # seconds each contender's 4 clients run the mixed workload per round


FULL = Plan(
    sizes=(10_000, 100_000, 1_000_000),
    main_size=100_000,
    rounds=7,
    put_ops=300,
    bulk_batches=4,
    bulk_batch=500,
    get_ops=1000,
    get_many_ops=60,
    query_ops=200,
    unindexed_ops=1,
    scale_rounds=5,
    scale_ops=200,
    writer_before_s=5.0,
    settle_s=20.0,
    load_chunk=20_000,
    load_batch=2_000,
    buffer_pool="1G",
    backup_rounds=3,
    clients_rounds=7,
    clients_s=3.0,
)

QUICK = Plan(
    sizes=(1_000, 3_000),
    main_size=3_000,
    rounds=3,
    put_ops=30,
    bulk_batches=1,
    bulk_batch=200,
    get_ops=60,
    get_many_ops=5,
    query_ops=20,
    unindexed_ops=1,
    scale_rounds=3,
    scale_ops=20,
    writer_before_s=0.5,
    settle_s=0.0,
    load_chunk=2_000,
    load_batch=1_000,
    buffer_pool="128M",
    backup_rounds=2,
    clients_rounds=3,
    clients_s=0.5,
)


def choose(
    quick: bool,
    sizes: list[int] | None = None,
    main_size: int | None = None,
    rounds: int | None = None,
    buffer_pool: str | None = None,
) -> Plan:
    plan = QUICK if quick else FULL
    if sizes:
        plan = replace(plan, sizes=tuple(sorted(set(sizes))))
        if main_size is None:
            main_size = plan.main_size if plan.main_size in plan.sizes else plan.sizes[-1]
    if main_size is not None:
        if main_size not in plan.sizes:
            raise ValueError(f"--main-size {main_size} is not one of the sizes {plan.sizes}")
        plan = replace(plan, main_size=main_size)
    if rounds is not None:
        plan = replace(
            plan,
            rounds=rounds,
            scale_rounds=rounds,
            backup_rounds=rounds,
            clients_rounds=rounds,
        )
    if buffer_pool is not None:
        plan = replace(plan, buffer_pool=buffer_pool)
    return plan
