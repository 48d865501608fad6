"""``python -m bench.peak OUT MODULE [ARGS...]``: run ``MODULE`` as ``__main__`` (as ``python -m``
does), then write this process's peak resident memory (``VmHWM``, KiB) to the file ``OUT``.

Why not ``ru_maxrss`` from ``wait4``: Linux carries a child's memory high-water mark over
``exec`` from the image it replaces, which is a copy of the parent's (``fork``): a child of a
benchmark process holding 120 MiB reports at least 120 MiB whatever it does. ``VmHWM`` is the
high-water mark of the process's own image since ``exec``.
"""

from __future__ import annotations

import atexit
import runpy
import sys


def _write_peak(path: str) -> None:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(peak)


if __name__ == "__main__":
    out, module, *args = sys.argv[1:]
    atexit.register(_write_peak, out)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
