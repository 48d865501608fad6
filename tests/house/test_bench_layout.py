"""The benchmark's ``layout`` leg runs (``python -m bench.run --quick --placed --legs layout``):
the query legs on both layouts of ``entities``, each with the join's plan and the page reads
the servers counted (docs/performance.md). Like the bench smoke test, it brings its own MariaDB
servers and runs once, in the SQLite pass; it checks plans and counts, never times."""

from __future__ import annotations

import os

import pytest

from tests.support.bench import need_mariadbd, run_quick

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("SCHEMALESS_TEST_DB", "sqlite") != "sqlite",
        reason="the bench brings its own MariaDB servers; it runs once, in the SQLite pass",
    ),
]


def test_the_layout_leg_measures_both_layouts_and_the_id_layout_reads_fewer_pages(tmp_path):
    need_mariadbd()
    result = run_quick(tmp_path, "--placed", "--legs", "layout")
    found = {r["leg"]: r for r in result["comparisons"]}
    assert set(found) == {
        f"query_{kind}_placed_layout_{layout}"
        for kind in ("page", "all")
        for layout in ("id", "seed")
    }
    by_id = found["query_page_placed_layout_id"]["layout"]
    seed = found["query_page_placed_layout_seed"]["layout"]
    assert (by_id["clustered_by"], seed["clustered_by"]) == ("id", "added_id")
    assert by_id["join"] == {"access_type": "eq_ref", "key": "PRIMARY"}
    assert seed["join"] == {"access_type": "eq_ref", "key": "id"}
    # A page of 30 placed entities: one descent per entity fewer (each at least one page).
    reads, seed_reads = by_id["page_reads_per_page"], seed["page_reads_per_page"]
    assert reads["ours"] + 30 <= seed_reads["ours"]
    assert reads["ours"] <= 1.2 * reads["json_column"]
