"""Leg: backups (issue 21). ``exportentities`` against a raw mysqlclient dump of the same rows,
``importentities`` against ``bulk_put`` of the same entities, and the peak memory of each
command at every size it runs at.

- **export**: ours is :class:`~schemaless_store.backup.export.Exporter` (what the command runs)
  writing the store to a file; raw is mysqlclient on its own connection per shard, the same
  consistent snapshot and keyset ``SELECT`` in chunks of the same size, the bodies decoded
  and the same JSON Lines written by hand (``json`` and the format's value encoding,
  ``jsonview.properties_to_json``). One op is the whole store; rounds alternate the order.
- **import**: two empty target stores of two shards each (``import_a_*`` for ours,
  ``import_b_*`` for bulk_put: databases beside the store's on the same two servers). The
  export is cut into chunks of 20,000 lines; for each chunk, in alternating order, ours imports
  the chunk's file (:class:`~schemaless_store.backup.importer.Importer`, batches of 1,000) and
  bulk_put writes the same entities (already parsed, not timed) 1,000 per call, the same
  per-shard transactions. The targets grow together; the ratio is the median over chunks.
- **memory**: ``python -m django exportentities`` and ``importentities`` run as child
  processes over the whole store; their peak RSS (``VmHWM``, :mod:`bench.peak`) at each size.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..context import Bench
from ..stats import Contender, Timings, compare, result

CHUNK_LINES = 20_000
BATCH = 1000
READ_CHUNK = 2000
TARGETS = {"ours": ["import_a_0", "import_a_1"], "bulk_put": ["import_b_0", "import_b_1"]}


def run(bench: Bench) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The export and import comparisons at the store's size, and the memory record."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    try:
        dump = workdir / "store.jsonl"
        bench.log(f"backup: export vs raw dump at {bench.size:,}")
        exported = run_export(bench, dump)
        bench.log(f"backup: import vs bulk_put at {bench.size:,}")
        imported = run_import(bench, dump, workdir)
        bench.log(f"backup: peak memory of the commands at {bench.size:,}")
        memory = run_memory(bench, dump)
    finally:
        for path in workdir.iterdir():
            path.unlink()
        workdir.rmdir()
    return [exported, imported], memory


# --- export ------------------------------------------------------------------------------------


def raw_export(bench: Bench, path: Path) -> None:
    """What a careful user writes by hand: mysqlclient, a snapshot per shard, keyset chunks."""
    from schemaless_store.config import conf
    from schemaless_store.values.codec import decode_body
    from schemaless_store.values.jsonview import properties_to_json

    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        for alias in conf.get().shards:
            cursor = bench.raw.entity_conns[alias].cursor()
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            after = 0
            while True:
                cursor.execute(
                    "SELECT added_id, id, updated, body FROM entities WHERE added_id > %s "
                    f"ORDER BY added_id LIMIT {READ_CHUNK}",
                    (after,),
                )
                rows = cursor.fetchall()
                if not rows:
                    break
                out.write(
                    "".join(
                        encode(
                            {
                                "id": str(uuid.UUID(bytes=key)),
                                "updated": updated.replace(tzinfo=dt.UTC).isoformat(),
                                "properties": properties_to_json(decode_body(body)),
                            }
                        )
                        + "\n"
                        for _added, key, updated, body in rows
                    )
                )
                after = rows[-1][0]
            cursor.execute("COMMIT")


def ours_export(path: Path) -> None:
    from schemaless_store.backup.export import Exporter

    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        Exporter(chunk_size=READ_CHUNK).run(out)


def run_export(bench: Bench, dump: Path) -> dict[str, Any]:
    scratch = dump.with_name("raw.jsonl")
    timings = compare(
        [
            Contender("ours", lambda _n: ours_export(dump), 1, units_per_op=bench.size),
            Contender("raw", lambda _n: raw_export(bench, scratch), 1, units_per_op=bench.size),
        ],
        lambda _round, n: list(range(n)),
        bench.plan.backup_rounds,
        warmup=0,
    )
    ours_lines = count_lines(dump) - 2  # the first and last lines
    raw_lines = count_lines(scratch)
    scratch.unlink()
    if not ours_lines == raw_lines == bench.size:
        raise AssertionError(f"export wrote {ours_lines} lines, raw {raw_lines}, of {bench.size}")
    return result(
        timings,
        [("ours", "raw")],
        leg="export",
        size=bench.size,
        what="exportentities (Exporter) of the whole store vs a raw mysqlclient dump of the same "
        "rows in the same JSON Lines (entities/s; one op = the whole store)",
    )


def count_lines(path: Path) -> int:
    with open(path, "rb") as stream:
        return sum(1 for _ in stream)


# --- import ------------------------------------------------------------------------------------


def run_import(bench: Bench, dump: Path, workdir: Path) -> dict[str, Any]:
    from schemaless_store.backup import lines
    from schemaless_store.backup.importer import Importer
    from schemaless_store.backup.jsonfile import JsonLinesFile
    from schemaless_store.models import Entity

    for target in TARGETS.values():
        empty_target(target)
    chunks = split(dump, workdir)
    timings = {name: Timings(units_per_op=CHUNK_LINES) for name in TARGETS}

    def ours(path: Path) -> None:
        summary = Importer(Entity, batch_size=BATCH).run(JsonLinesFile(path))
        if summary.rejected or summary.written != summary.read:
            raise AssertionError(f"import of {path}: {summary.describe()}")

    def bulk_put(entities: list[dict[str, Any]]) -> None:
        for start in range(0, len(entities), BATCH):
            Entity.objects.bulk_put(entities[start : start + BATCH], batch_size=BATCH)

    for number, path in enumerate(chunks):
        parsed = [lines.read(text) for text in path.read_text(encoding="utf-8").splitlines()]
        entities = [{"id": line.key, **line.properties} for line in parsed]  # type: ignore[union-attr]
        order = [("ours", ours, path), ("bulk_put", bulk_put, entities)]
        if number % 2:
            order.reverse()
        for name, op, arg in order:
            with targeting(TARGETS[name]):  # not timed: the switch to that store's map
                start = time.perf_counter()
                op(arg)  # type: ignore[operator]
                timings[name].rounds.append([time.perf_counter() - start])
        timings["ours"].units_per_op = timings["bulk_put"].units_per_op = len(entities)
        path.unlink()
    for name, target in TARGETS.items():
        found = count_entities(target)
        if found != bench.size:
            raise AssertionError(f"{name} imported {found} of {bench.size}")
    return result(
        timings,
        [("ours", "bulk_put")],
        leg="import",
        size=bench.size,
        what=f"importentities (Importer, batches of {BATCH}) of the export, chunk by chunk "
        f"({CHUNK_LINES:,} lines), vs bulk_put of the same entities {BATCH} at a time, each into "
        "an empty two-shard store (entities/s; median of per-chunk ratios)",
    )


def split(dump: Path, workdir: Path) -> list[Path]:
    """The export's entity lines in files of CHUNK_LINES (not timed)."""
    paths: list[Path] = []
    out = None
    with open(dump, encoding="utf-8") as source:
        for n, text in enumerate(line for line in source if line.startswith('{"id"')):
            if n % CHUNK_LINES == 0:
                if out is not None:
                    out.close()
                paths.append(workdir / f"chunk-{len(paths):04d}.jsonl")
                out = open(paths[-1], "w", encoding="utf-8")  # noqa: SIM115
            out.write(text)  # type: ignore[union-attr]
    if out is not None:
        out.close()
    return paths


@contextlib.contextmanager
def targeting(aliases: list[str]) -> Iterator[None]:
    """The store made of ``aliases`` (on the same metadata database as the others): its
    setting, and its shard map as the stored one (the stored map is the store's truth, so
    switching stores switches it), put back as it was afterwards."""
    from django.test import override_settings

    from schemaless_store.config.metadata import ShardMap
    from schemaless_store.topology import bucket_map

    saved = list(ShardMap.objects.all())
    with override_settings(SCHEMALESS={"BUCKETS": 4096, "SHARDS": aliases}):
        ShardMap.objects.all().delete()
        bucket_map.store_seed()
        try:
            yield
        finally:
            ShardMap.objects.all().delete()
            ShardMap.objects.bulk_create(saved)
    bucket_map.forget()


def empty_target(aliases: list[str]) -> None:
    """Migrated (first time), then emptied: entities and every index table."""
    from django.core.management import call_command
    from django.db import connections

    from schemaless_store.config.indexes import registry

    with targeting(aliases):
        call_command("migrateall", verbosity=0)
        for alias in aliases:
            with connections[alias].cursor() as cursor:
                cursor.execute("TRUNCATE TABLE entities")
                for index in registry.valid():
                    cursor.execute(f"TRUNCATE TABLE `{index.name}`")


def count_entities(aliases: list[str]) -> int:
    from django.db import connections

    total = 0
    for alias in aliases:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM entities")
            total += cursor.fetchone()[0]
    return total


# --- memory ------------------------------------------------------------------------------------


def run_memory(bench: Bench, dump: Path) -> dict[str, Any]:
    """Peak RSS of the two commands as processes of their own, over the whole store."""
    export_path = dump.with_name("memory.jsonl")
    exported = command(["exportentities", "--output", str(export_path)], {})
    export_path.unlink()
    empty_target(TARGETS["ours"])
    imported = command(
        ["importentities", str(dump), "--rejects", str(dump.with_name("rejects.jsonl"))],
        {"BENCH_SHARDS": ",".join(TARGETS["ours"])},
    )
    return {
        "size": bench.size,
        "export_peak_rss_mib": exported["peak_rss_mib"],
        "export_seconds": exported["seconds"],
        "export_entities_per_s": bench.size / exported["seconds"],
        "import_peak_rss_mib": imported["peak_rss_mib"],
        "import_seconds": imported["seconds"],
        "import_entities_per_s": bench.size / imported["seconds"],
    }


def command(args: list[str], extra_env: dict[str, str]) -> dict[str, float]:
    """Run ``python -m django <args>`` and return its peak RSS (its own image's, see
    :mod:`bench.peak`) and wall time."""
    env = {**os.environ, **extra_env, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "bench.peak", peak.name, "django", *args, "-v", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
        peak_kib = int(peak.read())
    return {"peak_rss_mib": peak_kib / 1024, "seconds": seconds}


def memory_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak RSS at the largest size over the smallest, per command."""
    if len(records) < 2:
        return {}
    small, large = records[0], records[-1]
    return {
        "from_size": small["size"],
        "to_size": large["size"],
        "export_growth": large["export_peak_rss_mib"] / small["export_peak_rss_mib"],
        "import_growth": large["import_peak_rss_mib"] / small["import_peak_rss_mib"],
    }
