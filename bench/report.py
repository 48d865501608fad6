"""The run's JSON record and its Markdown tables, with the targets of issues 3, 4, 7 and 21."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# (leg, pair, metric, comparison, bound): every target the issues set that a leg can check.
TARGETS: list[tuple[str, str, str, str, float]] = [
    ("put", "ours/raw", "throughput", ">=", 0.85),
    ("bulk_put", "ours/raw", "throughput", ">=", 0.85),
    ("get", "ours/raw", "throughput", ">=", 0.85),
    ("get_many", "ours/raw", "throughput", ">=", 0.85),
    ("query_page", "ours/raw", "throughput", ">=", 0.8),
    ("query_page", "ours/json_column", "p50_latency", "<=", 2.0),
    ("query_scatter", "ours/pinned", "p50_latency", "<", 2.0),
    ("query_scatter", "ours/raw", "throughput", ">=", 0.8),
    ("query_all", "ours/raw", "throughput", ">=", 0.8),
    ("query_all", "ours/json_column", "p50_latency", "<=", 2.0),
    ("query_all", "ours/json_unindexed", "throughput", ">=", 50.0),
    ("query_page_placed", "ours/json_column", "p50_latency", "<=", 1.3),
    ("query_all_placed", "ours/json_column", "p50_latency", "<=", 1.5),
    # The layout leg's runs clustered by id (issue 27) are held to the same targets.
    ("query_page_layout_id", "ours/json_column", "p50_latency", "<=", 2.0),
    ("query_page_placed_layout_id", "ours/json_column", "p50_latency", "<=", 1.3),
    ("query_all_placed_layout_id", "ours/json_column", "p50_latency", "<=", 1.5),
    ("cache_get", "ours/raw", "throughput", ">=", 2.0),
    ("cache_get_many", "ours/raw", "throughput", ">=", 1.5),
    ("cache_get", "ours_near/raw", "throughput", ">=", 2.0),  # issue 27: the near cache
    ("cache_get_many", "ours_near/raw", "throughput", ">=", 2.0),
    ("clients_mixed", "ours/raw", "throughput", ">=", 0.85),
    ("export", "ours/raw", "throughput", ">=", 0.7),
    ("import", "ours/bulk_put", "throughput", ">=", 0.9),
]
# Peak RSS of exportentities and importentities at the largest size over the smallest: "flat".
MEMORY_BOUND = 1.2
SCALE_BOUND = 1.3


def _met(value: float, comparison: str, bound: float) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    checks = {">=": value >= bound, "<=": value <= bound, "<": value < bound}
    ok = checks[comparison]
    return "met" if ok else "**missed**"


def target_for(leg: str, pair: str, metric: str) -> tuple[str, float] | None:
    for t_leg, t_pair, t_metric, comparison, bound in TARGETS:
        if (t_leg, t_pair, t_metric) == (leg, pair, metric):
            return comparison, bound
    return None


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float) and abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def comparisons_table(records: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| leg | size | ours/baseline | throughput ratio | p50 ratio | ours ops/s"
        " | ours p50 / p99 ms | baseline ops/s | baseline p50 / p99 ms | target |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for record in records:
        for pair, ratio in record["ratios"].items():
            ours = record["contenders"][pair.split("/")[0]]
            base = record["contenders"][pair.split("/")[1]]
            notes = []
            for metric in ("throughput", "p50_latency"):
                target = target_for(record["leg"], pair, metric)
                if target:
                    comparison, bound = target
                    label = "throughput" if metric == "throughput" else "p50"
                    notes.append(
                        f"{label} {comparison} {bound:g}: {_met(ratio[metric], comparison, bound)}"
                    )
            leg = record["leg"]
            if "servers" in record:  # the clients leg: on one shard server or two
                leg += f" ({record['servers']} server{'s' if record['servers'] > 1 else ''})"
            lines.append(
                f"| {leg} | {record['size']:,} | {pair} | {_f(ratio['throughput'])}x"
                f" | {_f(ratio['p50_latency'])}x | {_f(ours['throughput_per_s'])}"
                f" | {_f(ours['p50_ms'])} / {_f(ours['p99_ms'])}"
                f" | {_f(base['throughput_per_s'])} | {_f(base['p50_ms'])} / {_f(base['p99_ms'])}"
                f" | {'; '.join(notes)} |"
            )
    return lines


def scale_table(records: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    lines = [
        "| leg | size | ours p50 / p99 ms | raw p50 / p99 ms | json_column p50 / p99 ms"
        " | ours/raw throughput | ours/json_column p50 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for record in sorted(records, key=lambda r: (r["leg"], r["size"])):
        c = record["contenders"]
        json_col = c.get("json_column")
        lines.append(
            f"| {record['leg']} | {record['size']:,}"
            f" | {_f(c['ours']['p50_ms'])} / {_f(c['ours']['p99_ms'])}"
            f" | {_f(c['raw']['p50_ms'])} / {_f(c['raw']['p99_ms'])}"
            + (f" | {_f(json_col['p50_ms'])} / {_f(json_col['p99_ms'])}" if json_col else " | -")
            + f" | {_f(record['ratios']['ours/raw']['throughput'])}x"
            + (
                f" | {_f(record['ratios']['ours/json_column']['p50_latency'])}x"
                if "ours/json_column" in record["ratios"]
                else " | -"
            )
            + " |"
        )
    for leg, growth in summary.items():
        ours = growth["ours"]
        others = ", ".join(
            f"{name} {_f(g['p50_growth'])}x"
            for name, g in growth.items()
            if name not in ("ours", "from_size", "to_size")
        )
        lines.append("")
        lines.append(
            f"{leg}: ours p50 at {growth['to_size']:,} is {_f(ours['p50_growth'])}x its p50 at "
            f"{growth['from_size']:,} (p99 {_f(ours['p99_growth'])}x; same growth of the "
            f"baselines' p50: {others}); target <= {SCALE_BOUND}: "
            f"{_met(ours['p50_growth'], '<=', SCALE_BOUND)}"
        )
    return lines


WRITER_P99_BOUND = 1.5
STALL_BOUND_MS = 100.0


def index_add_table(records: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| contender | size | seconds | rows/s | writer before p50 / p99 / max ms"
        " | writer during p50 / p99 / max ms | writes > 100 ms before / during"
        " | p99 during/before | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for record in records:
        name = record["contender"]
        if "pending" in record:
            notes.append(f"- {name} at {record['size']:,}: PENDING: {record['pending']}")
            continue
        if "error" in record:
            notes.append(
                f"- {name} at {record['size']:,}: refused by the server: {record['error']}"
            )
            continue
        b, d = record["writer_before"], record["writer_during"]
        lines.append(
            f"| {name} | {record['size']:,} | {_f(record['seconds'])}"
            f" | {_f(record.get('rows_per_s'))}"
            f" | {_f(b['p50_ms'])} / {_f(b['p99_ms'])} / {_f(b['max_ms'])}"
            f" | {_f(d['p50_ms'])} / {_f(d['p99_ms'])} / {_f(d['max_ms'])}"
            f" | {b.get('over_100ms', 'n/a')} / {d.get('over_100ms', 'n/a')}"
            f" | {_f(record['writer_p99_growth'])}x"
            f" | {_f(record.get('cleaner_peak_rss_mib'))} |"
        )
    lines += ["", *index_add_targets(records)]
    return lines + (["", *notes] if notes else [])


def index_add_targets(records: list[dict[str, Any]]) -> list[str]:
    """Issue 3's targets for the live backfill, per size, against the same run's baselines."""
    out = []
    ours = [r for r in records if r["contender"] == "ours_backfill" and "pending" not in r]
    for record in ours:
        size = record["size"]
        copy = next(
            (
                r
                for r in records
                if r["contender"] == "chunked_insert_select"
                and r["size"] == size
                and "error" not in r
            ),
            None,
        )
        growth = record["writer_p99_growth"]
        stall = record["writer_during"]["max_ms"]
        out.append(
            f"- ours at {size:,}: writer p99 during/before {_f(growth)}x "
            f"(target <= {WRITER_P99_BOUND}: {_met(growth, '<=', WRITER_P99_BOUND)}); "
            f"max stall {_f(stall)} ms (target < {STALL_BOUND_MS:g}: "
            f"{_met(stall, '<=', STALL_BOUND_MS)}); backfill {_f(record['rows_per_s'])} "
            "entities/s"
            + (
                f" vs chunked copy {_f(copy['rows_per_s'])} rows/s = "
                f"{_f(record['rows_per_s'] / copy['rows_per_s'])}x (target >= 1: "
                f"{_met(record['rows_per_s'] / copy['rows_per_s'], '>=', 1.0)})"
                if copy
                else ""
            )
            + f"; index exact afterwards: {record.get('index_exact')}"
        )
        out += against_online_alters(record, records)
    if len(ours) >= 2:
        small, large = ours[0], ours[-1]
        out.append(
            f"- cleaner peak RSS: {_f(small['cleaner_peak_rss_mib'])} MiB at {small['size']:,}, "
            f"{_f(large['cleaner_peak_rss_mib'])} MiB at {large['size']:,} "
            f"({_f(large['cleaner_peak_rss_mib'] / small['cleaner_peak_rss_mib'])}x for "
            f"{large['size'] / small['size']:g}x the entities)"
        )
    return out


BACKFILL_TIME_BOUND = 3.0  # issue 45 item 3: the backfill within 3x of the online ALTERs
ONLINE_ALTERS = ("alter_default", "alter_inplace_lock_none")


def against_online_alters(ours: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    """Issue 45 item 3: the backfill's time and the writer's p99 growth against each online
    ``ALTER`` of the same run and size (on the peer's JSON column over the same rows)."""
    out = []
    for name in ONLINE_ALTERS:
        alter = next(
            (
                r
                for r in records
                if r["contender"] == name and r["size"] == ours["size"] and "error" not in r
            ),
            None,
        )
        if alter is None:
            continue
        ratio = ours["seconds"] / alter["seconds"]
        growth = ours["writer_p99_growth"]
        out.append(
            f"  - against {name}: backfill {_f(ours['seconds'])} s / {_f(alter['seconds'])} s ="
            f" {_f(ratio)}x (target <= {BACKFILL_TIME_BOUND:g}:"
            f" {_met(ratio, '<=', BACKFILL_TIME_BOUND)}); writer p99 growth ours"
            f" {_f(growth)}x, its {_f(alter['writer_p99_growth'])}x"
            f" (target <= {WRITER_P99_BOUND}: {_met(growth, '<=', WRITER_P99_BOUND)})"
        )
    return out


def backup_memory_table(records: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    lines = [
        "| size | exportentities peak RSS MiB | entities/s | importentities peak RSS MiB"
        " | entities/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['size']:,} | {_f(r['export_peak_rss_mib'])} | {_f(r['export_entities_per_s'])}"
            f" | {_f(r['import_peak_rss_mib'])} | {_f(r['import_entities_per_s'])} |"
        )
    if summary:
        lines += [
            "",
            f"Peak RSS at {summary['to_size']:,} over {summary['from_size']:,}: export "
            f"{_f(summary['export_growth'])}x ({_met(summary['export_growth'], '<=', MEMORY_BOUND)}"
            f"), import {_f(summary['import_growth'])}x "
            f"({_met(summary['import_growth'], '<=', MEMORY_BOUND)}); flat means <= "
            f"{MEMORY_BOUND}x. The commands run as processes of their own (with Django loaded).",
        ]
    return lines


def netem_lines(record: dict[str, Any]) -> list[str]:
    """The netem leg: what the delay did to a statement, statements per op, or the refusal."""
    lines = []
    if "refused" in record:
        lines += [
            f"The machine refused the delayed network ({_f(record['round_trip_ms'])} ms round "
            f"trip): {record['refused'].rstrip('.')}. No comparison ran with a delay.",
            "",
        ]
    else:
        lines += [
            f"Round trip added by netem: {_f(record['round_trip_ms'])} ms (half on each end of "
            "the veth pair). `SELECT 1` p50 on a raw connection: "
            f"{_f(record['select_1_p50_ms_without'], 3)} ms without, "
            f"{_f(record['select_1_p50_ms_with'], 3)} ms with. The comparisons are the "
            "`*_netem` rows above; they have no target.",
            "",
        ]
    lines += [
        f"Round trips per operation at {record['size']:,} (statements, commits and autocommit "
        "switches, counted in the client):",
        "",
        "| operation | ours | raw |",
        "|---|---:|---:|",
    ]
    for kind, counts in record["statements_per_op"].items():
        lines.append(f"| {kind} | {_f(counts['ours'])} | {_f(counts['raw'])} |")
    return lines


def markdown(run: dict[str, Any]) -> str:
    machine = run["machine"]
    out = [
        f"# Benchmark run {run['started']}",
        "",
        f"Command: `{run['command']}` ({run['mode']} mode, {run['seconds']:.0f} s).",
        "",
        f"Machine: {machine['nproc']} cores, {machine['memory_gib']:.1f} GiB RAM, "
        f"MariaDB {machine['mariadb']}, Python {machine['python']}, Django {machine['django']}, "
        f"mysqlclient {machine['mysqlclient']}; load average {machine['loadavg_start']} at start, "
        f"{machine['loadavg_end']} at end; code at {machine['git']}.",
        "",
        "Ratios are ours/baseline, computed per round inside this run and reported as the median "
        "over rounds: a throughput ratio above 1 and a p50 ratio below 1 mean ours is faster.",
        "",
    ]
    if run["loads"]:
        out += [
            "## Loading",
            "",
            "| size | store (bulk_put) entities/s | peer (server-side) rows/s |",
        ]
        out += ["|---:|---:|---:|"]
        out += [
            f"| {r['size']:,} | {_f(r['store_entities_per_s'])} | {_f(r['peer_rows_per_s'])} |"
            for r in run["loads"]
        ]
        out.append("")
    if run["comparisons"]:
        out += ["## Comparisons", "", *comparisons_table(run["comparisons"]), ""]
    if run.get("netem"):
        out += ["## Network delay (netem)", "", *netem_lines(run["netem"]), ""]
    if run["scale"]:
        out += ["## Scale", "", *scale_table(run["scale"], run["scale_summary"]), ""]
    if run["index_add"]:
        out += ["## Index add on a live store", "", *index_add_table(run["index_add"]), ""]
    if run.get("index_move"):
        out += [
            "## Index add while the writer moves entities between users (indexed values change)",
            "",
            *index_add_table(run["index_move"]),
            "",
        ]
    if run.get("backup_memory"):
        summary = run.get("backup_memory_summary", {})
        out += ["## Backups: memory", "", *backup_memory_table(run["backup_memory"], summary), ""]
    return "\n".join(out) + "\n"


def write(run: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{run['mode']}-{run['started'].replace(':', '').replace('-', '')}"
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(run, indent=2, default=str) + "\n")
    md_path.write_text(markdown(run))
    return json_path, md_path


def publish(text: str, out_dir: Path, name: str, who: str) -> Path:
    """Print a plain-text report and keep it as ``out_dir/name``."""
    print(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(text + "\n")
    print(f"{who}: wrote {path}")
    return path
