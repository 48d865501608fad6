"""Leg 5: the same get and page query at every size the store grows through."""

from __future__ import annotations

from typing import Any

from ..context import Bench
from ..stats import compare, result
from . import get, query


def run(bench: Bench) -> list[dict[str, Any]]:
    plan = bench.plan
    get_timings = compare(
        get.get_contenders(bench, plan.scale_ops),
        lambda _r, n: get.random_ids(bench, n),
        plan.scale_rounds,
    )
    page_timings = compare(
        query.page_contenders(bench, plan.scale_ops),
        lambda _r, n: query.random_users(bench, n),
        plan.scale_rounds,
    )
    return [
        result(get_timings, [("ours", "raw")], leg="scale_get", size=bench.size),
        result(
            page_timings,
            [("ours", "raw"), ("ours", "json_column")],
            leg="scale_query_page",
            size=bench.size,
        ),
    ]


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency at the largest size over the smallest, per leg and contender (p50 and p99)."""
    out: dict[str, Any] = {}
    for leg in ("scale_get", "scale_query_page"):
        rows = sorted((r for r in records if r["leg"] == leg), key=lambda r: r["size"])
        if len(rows) < 2:
            continue
        small, large = rows[0], rows[-1]
        out[leg] = {
            "from_size": small["size"],
            "to_size": large["size"],
            **{
                name: {
                    "p50_growth": large["contenders"][name]["p50_ms"] / stats["p50_ms"],
                    "p99_growth": large["contenders"][name]["p99_ms"] / stats["p99_ms"],
                }
                for name, stats in small["contenders"].items()
            },
        }
    return out
