"""Instructions counted by callgrind: ``python -m MODULE --child ARGS...`` under ``valgrind
--tool=callgrind``, collecting only inside ``functools.reduce`` (the child runs what it
measures there, the garbage collector off), so that setup and teardown are not counted.
A loaded machine changes wall times, not these counts. Used by the benches that count
instructions (``bench.server_recheck``, ``bench.invalidation_cost``, ``bench.near_miss``,
``bench.ycsb.instructions``)."""

from __future__ import annotations

import re
import subprocess
import sys


def collected(module: str, *args: str) -> int:
    """The instructions the child ``python -m module --child *args`` ran in ``reduce``."""
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=functools_reduce",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            module,
            "--child",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode or not found:
        raise RuntimeError(f"callgrind {module} {' '.join(args)}: {run.stderr[-3000:]}")
    return int(found.group(1))
