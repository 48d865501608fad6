"""The YCSB run's files: ``ycsb-<timestamp>.json`` (everything) and ``.md`` (the tables)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TARGETS = {  # issue 35: ratio to the JSON column (store, store_near)
    "load": (0.8, None),
    "A": (0.6, None),
    "B": (0.8, 1.5),
    "C": (0.85, 2.0),
    "D": (0.8, 1.5),
    "F": (0.6, None),
}
CONCURRENT_TARGETS = {"B": 0.8, "C": 0.8}


def _target(name: str, contender: str) -> float | None:
    store, near = TARGETS.get(name, (None, None))
    return {"store": store, "store_near": near}.get(contender)


def _verdict(ratio: float, target: float | None) -> str:
    if target is None:
        return ""
    return f"≥ {target:g} {'met' if ratio >= target else 'MISSED'}"


def markdown(run: dict[str, Any]) -> str:
    lines = [
        f"# YCSB, {run['started']}",
        "",
        f"`{run['command']}`: {run['records']:,} records of 10 fields x 100 bytes, "
        f"{run['rounds']} rounds of {run['ops_per_round']:,} operations per workload, "
        f"zipfian (scrambled, 0.99) or latest keys, history off, single client per contender "
        f"unless said; seed {run['seed']}; {run['seconds']:.0f} s; machine: "
        f"{run['machine']['nproc']} cores, MariaDB {run['machine']['mariadb']}, load "
        f"{run['machine']['loadavg_start']} → {run['machine']['loadavg_end']}, "
        f"git {run['machine']['git']}.",
        "",
        "Ratio: ops/s over the JSON column's in the same round (median over rounds); above 1 is "
        "faster. Targets are issue 35's.",
        "",
        "| workload | contender | ops/s | ratio to JSON | target | p50 / p99 ms per operation |",
        "|---|---|---:|---:|---|---|",
    ]
    for found in run["workloads"]:
        for contender, figures in found["contenders"].items():
            ratio = figures["ratio_to_json"]
            per_op = "; ".join(
                f"{kind} {s['p50_ms']:.2f} / {s['p99_ms']:.2f}"
                for kind, s in figures["per_op"].items()
            )
            lines.append(
                f"| {found['workload']} | {contender} | {figures['ops_per_s']:,.0f} | "
                f"{ratio:.2f} | {_verdict(ratio, _target(found['workload'], contender))} | "
                f"{per_op} |"
            )
    if run.get("concurrent"):
        lines += [
            "",
            "| workload | client processes | contender | ops/s | ratio to JSON | target |",
            "|---|---:|---|---:|---:|---|",
        ]
        for found in run["concurrent"]:
            for contender, rate in found["ops_per_s"].items():
                ratio = found["ratio_to_json"][contender]
                target = CONCURRENT_TARGETS.get(found["workload"]) if contender == "store" else None
                lines.append(
                    f"| {found['workload']} | {found['threads']} | {contender} | {rate:,.0f} | "
                    f"{ratio:.2f} | {_verdict(ratio, target)} |"
                )
    if run.get("round_trips"):
        kinds = sorted({k for per in run["round_trips"].values() for k in per})
        lines += [
            "",
            "Round trips per operation, MariaDB + Redis (counted, untimed; reads: a cold then a "
            "warm pass over the same keys):",
            "",
            "| contender | " + " | ".join(kinds) + " |",
            "|---|" + "---:|" * len(kinds),
        ]
        for contender, per in run["round_trips"].items():
            cells = [
                f"{per[k]['mariadb']:.1f} + {per[k]['redis']:.1f}" if k in per else "-"
                for k in kinds
            ]
            lines.append(f"| {contender} | " + " | ".join(cells) + " |")
    caches = [
        (found["workload"], contender, stats)
        for found in run["workloads"]
        for contender, stats in found.get("cache", {}).items()
        if stats.get("hits") or stats.get("misses")
    ]
    if caches:
        lines += [
            "",
            "Entity cache counters of each store client, cumulative since it started:",
            "",
            "| after | contender | hits | of them from memory | misses | near: refused, pushed |",
            "|---|---|---:|---:|---:|---|",
        ]
        for workload, contender, stats in caches:
            near = stats.get("near") or {}
            lines.append(
                f"| {workload} | {contender} | {stats['hits']:,} | {stats['near_hits']:,} | "
                f"{stats['misses']:,} | {near.get('refused', '-')}, {near.get('pushed', '-')} |"
            )
    return "\n".join(lines) + "\n"


def write(run: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    stamp = run["started"].replace("-", "").replace(":", "")
    json_path = out / f"ycsb-{stamp}.json"
    md_path = out / f"ycsb-{stamp}.md"
    json_path.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n")
    md_path.write_text(markdown(run))
    return json_path, md_path
