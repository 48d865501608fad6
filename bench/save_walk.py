"""``python -m bench.save_walk``: the route one operation takes through the package's layers,
traced as it runs (issue 45, item 5: "the save's walk ... climbs up and back").

For each operation of a YCSB record on the bench's MariaDB servers (a ``create``, a partial
``update()``, a ``get`` then ``save(update_fields=...)``, a ``get``), after a warm-up, one
run is traced with :func:`sys.setprofile` and every Python call into ``schemaless_store`` is
counted:

- **calls**: the package's function calls;
- **crossings**: calls whose caller (the nearest frame of the package) is another module;
- **climbs**: calls from a module into one of a higher layer (docs/architecture.md's table):
  a lower layer running code of a higher one it was handed (a callback, a step function,
  a signal's receiver), which a reader must follow up and back down. Each is listed.

Nothing is timed: the counts depend only on the code.

    .venv/bin/python -m bench.save_walk [--out bench/results]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "schemaless_store"
LAYER_ROW = re.compile(r"^\|\s*(\d+)\.\s*(\w+)\s*\|([^|]*)\|", re.MULTILINE)


def layers() -> dict[str, int]:
    """Folder or root module -> its layer's number, from docs/architecture.md's table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    return {
        place.removesuffix("/").removesuffix(".py"): int(number)
        for number, _name, cells in LAYER_ROW.findall(text)
        for place in re.findall(r"`([^`]+)`", cells)
    }


class Walk:
    """The package's calls while :meth:`trace` runs a function."""

    def __init__(self) -> None:
        self.layer_of_place = layers()
        self.calls = 0
        self.crossings = 0
        self.climbs: collections.Counter[str] = collections.Counter()

    def module(self, frame: FrameType) -> str | None:
        path = frame.f_code.co_filename
        if not path.startswith(str(PACKAGE) + os.sep):
            return None
        return Path(path).relative_to(PACKAGE).as_posix()

    def layer(self, module: str) -> int:
        place = module.split("/")[0].removesuffix(".py")
        return self.layer_of_place.get(place, 0)

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = self.module(frame)
        if callee is None:
            return
        self.calls += 1
        back = frame.f_back
        while back is not None and self.module(back) is None:
            back = back.f_back
        if back is None:
            return
        caller = self.module(back)
        assert caller is not None
        if caller != callee:
            self.crossings += 1
            if self.layer(callee) > self.layer(caller):
                self.climbs[
                    f"{caller}:{back.f_code.co_name} -> {callee}:{frame.f_code.co_name}"
                ] += 1

    def trace(self, run: Any) -> None:
        sys.setprofile(self.profile)
        try:
            run()
        finally:
            sys.setprofile(None)


def operations(client: Any) -> dict[str, Any]:
    """One YCSB record's operations, by name (each run once per key it is given)."""

    def rmw(key: str) -> None:
        client.rmw(key, "field3", client.value())

    return {
        "create": lambda key: client.insert(key, client.record()),
        "update (filter(id=...).update)": lambda key: client.update(key, "field3", client.value()),
        "get + save(update_fields=...)": rmw,
        "get": client.read,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.save_walk", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    from .report import publish
    from .ycsb.run import prepare
    from .ycsb.worker import make

    started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    servers = prepare("128M")
    try:
        client = make("store")
        lines = [
            f"# The route of one operation through the layers ({started}, "
            f"git {os.popen('git describe --always --dirty').read().strip()})",
            "",
            "| operation | calls | crossings | climbs |",
            "|---|---:|---:|---:|",
        ]
        listed: list[str] = []
        for number, (name, run) in enumerate(operations(client).items()):
            for warm in range(20):
                key = f"walk{number}-{warm}"
                if name != "create":
                    client.insert(key, client.record())
                run(key)
            key = f"walk{number}-traced"
            if name != "create":
                client.insert(key, client.record())
            walk = Walk()
            walk.trace(lambda run=run, key=key: run(key))
            climbs = sum(walk.climbs.values())
            lines.append(f"| {name} | {walk.calls} | {walk.crossings} | {climbs} |")
            listed += ["", f"{name}: climbs", *(f"- {c} (x{n})" for c, n in walk.climbs.items())]
    finally:
        for server in servers:
            server.stop()
    publish("\n".join([*lines, *listed]), args.out, f"save-walk-{started}.md", "save_walk")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
