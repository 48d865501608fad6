"""The benchmark harness still runs: ``python -m bench.run --quick`` end to end.

It starts its own two MariaDB servers, so it does not depend on the suite's backend: it runs once
per suite run, in the SQLite pass (``SCHEMALESS_TEST_DB=sqlite``, the default) under the Django
that ``requirements.txt`` pins, and the MariaDB pass and the other Django's passes skip it.

It checks that every leg reported numbers, never what the numbers are: benchmarks measure, tests
do not time.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import django
import pytest

from tests.support.bench import need_mariadbd, run_quick

ROOT = Path(__file__).resolve().parents[2]


def _pinned_django() -> tuple[int, int] | None:
    match = re.search(r"^Django>=(\d+)\.(\d+)", (ROOT / "requirements.txt").read_text(), re.M)
    return (int(match.group(1)), int(match.group(2))) if match else None


PINNED_DJANGO = _pinned_django()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("SCHEMALESS_TEST_DB", "sqlite") != "sqlite",
        reason="the bench smoke run brings its own MariaDB servers; it runs once, in the SQLite "
        "pass, and the MariaDB pass does not repeat it",
    ),
    pytest.mark.skipif(
        PINNED_DJANGO is not None and django.VERSION[:2] != PINNED_DJANGO,
        reason=f"the bench smoke run runs once per suite run, under requirements.txt's Django "
        f"{PINNED_DJANGO}; this Django's pass does not repeat it",
    ),
]

COMPARISONS = {
    "put": {"ours/raw"},
    "bulk_put": {"ours/raw", "ours/raw_same_sql"},
    "get": {"ours/raw"},
    "get_many": {"ours/raw"},
    "query_page": {"ours/raw", "ours/json_column"},
    "query_all": {"ours/raw", "ours/json_column", "ours/json_unindexed"},
    "query_scatter": {"ours/pinned", "ours/raw"},
    "cache_get": {"ours/raw", "ours/ours_uncached", "ours_near/raw", "ours_near/ours"},
    "cache_get_many": {"ours/raw", "ours/ours_uncached", "ours_near/raw", "ours_near/ours"},
    "cache_invalidate": {"ours/ours_uncached", "ours_near/ours_uncached"},
    "clients_mixed": {"ours/raw"},
    "export": {"ours/raw"},
    "import": {"ours/bulk_put"},
    "save_if_unchanged": {"if_unchanged/plain"},
    "aget": {"aget/get", "aget_gather/get"},
    "orm_aget": {"orm_aget/orm_get"},
    "mapentities_noop": {"mapentities/bulk_put"},
}
INDEX_ADD_BASELINES = {
    "alter_default",
    "alter_inplace_lock_none",
    "alter_copy",
    "chunked_insert_select",
}


def _number(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    need_mariadbd(fail_in_ci=True)
    out = tmp_path_factory.mktemp("bench")
    found = run_quick(out)
    assert list(out.glob("quick-*.md")), "the Markdown table was not written"
    return found


def test_every_comparison_has_numbers(quick_run: dict) -> None:
    found = {record["leg"]: record for record in quick_run["comparisons"]}
    assert set(found) == set(COMPARISONS)
    for leg, pairs in COMPARISONS.items():
        record = found[leg]
        assert set(record["ratios"]) == pairs, leg
        for pair, ratio in record["ratios"].items():
            assert _number(ratio["throughput"]) and _number(ratio["p50_latency"]), (leg, pair)
        for name, stats in record["contenders"].items():
            for key in ("throughput_per_s", "p50_ms", "p99_ms", "max_ms"):
                assert _number(stats[key]), (leg, name, key)
            assert stats["ops"] > 0


def test_cache_leg_reports_its_hit_rate(quick_run: dict) -> None:
    found = {record["leg"]: record for record in quick_run["comparisons"]}
    for leg in ("cache_get", "cache_get_many"):
        cache = found[leg]["cache"]
        assert cache["warmed"] == quick_run["plan"]["main_size"], leg
        assert cache["hits"] > 0 and 0 < cache["hit_rate"] <= 1, leg
        assert cache["near_hits"] > 0, leg  # ours_near's reads: from process memory


def test_clients_leg_runs_four_processes_on_two_servers(quick_run: dict) -> None:
    (record,) = [r for r in quick_run["comparisons"] if r["leg"] == "clients_mixed"]
    assert quick_run["servers"] == record["servers"] == 2
    assert record["clients"] == 4 and record["size"] == quick_run["plan"]["main_size"]
    assert all(count > 0 for count in record["entities_per_shard"].values())
    assert record["ratios"]["ours/raw"]["rounds"] == quick_run["plan"]["clients_rounds"]


def test_scale_leg_measures_every_size(quick_run: dict) -> None:
    sizes = set(quick_run["plan"]["sizes"])
    for leg in ("scale_get", "scale_query_page"):
        measured = {r["size"] for r in quick_run["scale"] if r["leg"] == leg}
        assert measured == sizes, leg
        assert _number(quick_run["scale_summary"][leg]["ours"]["p50_growth"])


def test_index_add_leg(quick_run: dict) -> None:
    by_name = {record["contender"]: record for record in quick_run["index_add"]}
    assert set(by_name) >= INDEX_ADD_BASELINES
    for name in INDEX_ADD_BASELINES:
        record = by_name[name]
        if "error" in record:  # an ALTER algorithm the server refuses is reported, not hidden
            continue
        assert _number(record["seconds"]), name
        for phase in ("writer_before", "writer_during"):
            assert record[phase]["writes"] > 0 and _number(record[phase]["p99_ms"]), (name, phase)
    assert _number(by_name["chunked_insert_select"]["rows_per_s"])
    ours = by_name["ours_backfill"]
    if importlib.util.find_spec("schemaless_store.cleaner") is None:
        assert "pending" in ours, "without the cleaner the leg must say pending, not invent numbers"
    else:
        assert "pending" not in ours
        assert _number(ours["rows_per_s"]) and _number(ours["writer_during"]["p99_ms"])


def test_index_move_leg_moves_entities_while_an_index_is_added(quick_run: dict) -> None:
    by_name = {record["contender"]: record for record in quick_run["index_move"]}
    assert set(by_name) == {"alter_inplace_lock_none", "alter_default", "ours_backfill"}
    for name, record in by_name.items():
        if "error" in record:  # an ALTER the server refuses is reported, not hidden
            assert name != "ours_backfill", record["error"]
            continue
        assert record["size"] == quick_run["plan"]["main_size"] and record["movers"] > 0
        for phase in ("writer_before", "writer_during"):
            assert record[phase]["writes"] > 0 and _number(record[phase]["p99_ms"]), (name, phase)
    assert by_name["ours_backfill"]["index_exact"]


def test_backup_leg_measures_memory_at_two_sizes(quick_run: dict) -> None:
    records = quick_run["backup_memory"]
    assert [r["size"] for r in records] == sorted(quick_run["plan"]["sizes"])
    for record in records:
        for key in ("export_peak_rss_mib", "import_peak_rss_mib", "export_entities_per_s"):
            assert _number(record[key]), key
    summary = quick_run["backup_memory_summary"]
    assert _number(summary["export_growth"]) and _number(summary["import_growth"])


NETEM_LEGS = {"put_netem", "bulk_put_netem", "get_netem", "get_many_netem", "query_page_netem"}
ROUND_TRIP_KINDS = {"put", "bulk_put", "get", "get_many", "query_page"}


def _netem_run(tmp_path: Path, round_trip_ms: str) -> tuple[dict, str]:
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("tc")):
        pytest.skip("the netem leg needs root and iproute2 (ip, tc)")
    need_mariadbd()
    found = run_quick(tmp_path, "--legs", "netem", "--netem-ms", round_trip_ms)
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return found, namespaces


def _round_trips_counted(record: dict) -> None:
    counts = record["statements_per_op"]
    assert set(counts) == ROUND_TRIP_KINDS
    for kind, sides in counts.items():
        assert sides["ours"] >= 1 and sides["raw"] >= 1, kind


def test_netem_leg_runs_over_its_own_veth_pair_and_removes_it(tmp_path: Path) -> None:
    """``--netem-ms 0``: the namespaces, the veth pair and the servers behind it, without a
    qdisc (a kernel without sch_netem can run this much)."""
    run, namespaces = _netem_run(tmp_path, "0")
    record = run["netem"]
    assert "refused" not in record
    _round_trips_counted(record)
    found = {r["leg"] for r in run["comparisons"]}
    assert found == NETEM_LEGS
    assert _number(record["select_1_p50_ms_without"]) and _number(record["select_1_p50_ms_with"])
    assert "slb" not in namespaces, "the run left its network namespaces behind"


def test_netem_leg_delays_or_says_why_not(tmp_path: Path) -> None:
    run, namespaces = _netem_run(tmp_path, "0.25")
    record = run["netem"]
    _round_trips_counted(record)
    found = {r["leg"] for r in run["comparisons"]}
    if "refused" in record:  # e.g. a kernel without sch_netem: reported, no comparison
        assert "netem" in record["refused"] and found == set()
    else:
        assert found == NETEM_LEGS
        # Each statement crosses the pair both ways: the round trip is in every SELECT 1.
        added = record["select_1_p50_ms_with"] - record["select_1_p50_ms_without"]
        assert added >= 0.2, record
    assert "slb" not in namespaces, "the run left its network namespaces behind"
