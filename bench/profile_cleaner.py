"""``python -m bench.profile_cleaner``: where ``runcleaner``'s backfill spends its CPU.

    .venv/bin/python -m bench.profile_cleaner --entities 200000 --out var/cleaner.txt

Loads the store like ``bench.run`` (one size, its own MariaDB servers), declares a new index on
``link``, and runs ``manage.py runcleaner --index=... --once`` under ``py-spy record`` (``pip
install py-spy``; not a dependency). Prints the backfill's entities/s as recorded by the cleaner
and the functions with the most samples inside the backfill (inclusive and own), from py-spy's
raw output written to ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path


def summary(raw: Path, top: int = 25) -> None:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "_backfill" not in stack:
            continue
        samples = int(count)
        total += samples
        names = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        own[names[-1]] += samples
        for name in set(names):
            inclusive[name] += samples
    print(f"\n{total} samples inside the backfill\n\ninclusive:")
    for name, samples in inclusive.most_common(top + 14)[14:]:  # skip the command's frames
        print(f"  {samples / total:6.1%}  {name}")
    print("own:")
    for name, samples in own.most_common(top):
        print(f"  {samples / total:6.1%}  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_cleaner")
    parser.add_argument("--entities", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=Path("var/cleaner-py-spy.txt"))
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))

    from . import plan as plans
    from .data import stages
    from .load import load_stage, settle
    from .run import setup

    bench = setup(plans.choose(quick=args.entities < 10_000, sizes=[args.entities]))
    for stage in stages([args.entities]):
        load_stage(bench, stage)

    from django.core.management import call_command

    from schemaless_store.config.indexes import Index, registry
    from schemaless_store.models import CleanerPass
    from schemaless_store.tables import lifecycle

    name = f"index_link_profile_{int(time.time())}"
    registry.register(Index(table=name, properties=["link"], shard_on="link"))
    call_command("migrateall", verbosity=0)
    registry.unregister(name)  # declared in the child only (bench/benchapp/indexes.py)
    settle(bench)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "django", "runcleaner", f"--index={name}", "--once"]
    subprocess.run(
        [py_spy, "record", "-r", "250", "-f", "raw", "-o", str(args.out), "--", *command],
        env={**os.environ, "BENCH_LINK_INDEX": name},
        check=True,
    )
    if lifecycle.states(refresh=True).get(name) != lifecycle.READY:
        raise RuntimeError(f"{name} did not become ready")
    passes = list(CleanerPass.objects.filter(index_name=name, kind="backfill"))
    seconds = sum((p.finished - p.started).total_seconds() for p in passes)
    print(f"backfill: {sum(p.entities_scanned for p in passes) / seconds:,.0f} entities/s")
    summary(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
