"""The soak command: ``python -m schemaless_store.testing.history --minutes N --seed S
[--galera] [--nemesis kill,lose-commit,move,sigkill,galera-node] [--clients 4]``.

It starts its own throwaway store (:mod:`.servers`), migrates it, runs ``--clients`` client
processes (:mod:`.client`) and the chosen nemeses (:mod:`.nemesis`) for ``--minutes``, prints
progress every ten seconds, then stops the faults, heals the store, reads every key once more
and looks each register's value up (the final reads and finds, process ``final``), and prints
the checker's report (:mod:`.checker`): the operations by outcome, the faults injected, each
anomaly kind's count and examples. Exit status 1 on any anomaly. Every seed derives from
``--seed``, printed first, so a failing run replays with the same faults drawn (their timing
against the clients still varies).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .checker import check
from .nemesis import KINDS, LOCK_READ_TIMEOUT, NAMES, MoveBuckets, Nemesis
from .records import Recorder, load
from .servers import HistoryStore
from .summary import ENDS, summarize
from .variant import CODEC_ENV, CODECS, VALUE_INDEX_ENV

DEFAULT_NEMESES = (
    "kill",
    "lose-commit",
    "kill-commit",
    "move",
    "mover-kill",
    "lock-wait",
    "sigkill",
    "cleaner",
)
LOSE_COMMIT_SHARE = 0.03  # of each client's shard commits, with lose-commit on
KILL_COMMIT_SHARE = 0.02  # of each client's shard commits, with kill-commit on
PROGRESS_EVERY = 10.0
FINAL_READ_TIMEOUT = 120.0


def nemesis_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip() not in ("", "none")]
    unknown = [name for name in names if name not in NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown nemesis {', '.join(unknown)}; choose among {', '.join(NAMES)}"
        )
    return names


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m schemaless_store.testing.history",
        description="Run clients and faults against a throwaway store; check the history.",
    )
    parser.add_argument("--minutes", type=float, default=1.0, help="How long the clients run.")
    parser.add_argument("--seed", type=int, help="Replays a run (default: a new one, printed).")
    parser.add_argument("--galera", action="store_true", help="shard_1 is a Galera cluster.")
    parser.add_argument(
        "--nemesis",
        type=nemesis_list,
        help=f"Faults, comma-separated, among {','.join(NAMES)} (default: "
        f"{','.join(DEFAULT_NEMESES)}, and galera-node with --galera); 'none' for none.",
    )
    parser.add_argument("--clients", type=int, default=4, help="Client processes (default 4).")
    parser.add_argument(
        "--codec",
        choices=sorted(CODECS),
        default="msgpack",
        help="The bodies' format (default msgpack); json lets the server apply partial updates "
        "of unindexed properties itself.",
    )
    parser.add_argument(
        "--no-value-index",
        action="store_true",
        help="The registers' value is not indexed: with --codec json their partial updates "
        "(update) take the server's one-statement route; no find operations.",
    )
    parser.add_argument("--out", type=Path, help="Where the history goes (default: a temp dir).")
    return parser


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
        self.rng = random.Random(self.seed)
        if args.nemesis is None:
            args.nemesis = [*DEFAULT_NEMESES, *(["galera-node"] if args.galera else [])]
        if "galera-node" in args.nemesis and not args.galera:
            raise SystemExit("the galera-node nemesis needs --galera")
        if "mover-kill" in args.nemesis and "move" not in args.nemesis:
            raise SystemExit("the mover-kill nemesis needs the move nemesis")
        if args.clients < 1 or args.minutes <= 0:
            raise SystemExit("--clients and --minutes must be positive")
        self.out: Path = args.out or Path(tempfile.gettempdir())  # made by main()
        self.store = HistoryStore(galera=args.galera)
        if "lock-wait" in args.nemesis:
            self.store.client_read_timeout = LOCK_READ_TIMEOUT
        self.stopping = threading.Event()
        self.nemeses: list[Nemesis] = []
        self.failed_clients: list[int] = []

    def say(self, text: str) -> None:
        print(f"history: {text}", flush=True)

    def replay(self) -> str:
        flags = [f"--minutes {self.args.minutes:g}", f"--seed {self.seed}"]
        flags += ["--galera"] if self.args.galera else []
        flags += [f"--nemesis {','.join(self.args.nemesis) or 'none'}"]
        flags += [f"--clients {self.args.clients}"]
        flags += [f"--codec {self.args.codec}"] if self.args.codec != "msgpack" else []
        flags += ["--no-value-index"] if self.args.no_value_index else []
        return "python -m schemaless_store.testing.history " + " ".join(flags)

    def main(self) -> int:
        self.say(f"seed {self.seed}; replay: {self.replay()}")
        if self.args.out is None:
            self.out = Path(tempfile.mkdtemp(prefix="schemaless-history-"))
        self.out.mkdir(parents=True, exist_ok=True)
        self.say(f"history files in {self.out}")
        started = time.monotonic()
        # Read by .settings, .indexes and .workload in every process of the run.
        os.environ[CODEC_ENV] = CODECS[self.args.codec]
        os.environ[VALUE_INDEX_ENV] = "0" if self.args.no_value_index else "1"
        self.store.start()
        os.environ.update(self.store.env())
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrateall", verbosity=0)
        self.say(f"store ready in {time.monotonic() - started:.0f} s ({self.layout()})")
        try:
            self.run_clients()
            self.final_reads()
        finally:
            self.keep_moves()
            self.store.stop()
        return self.report()

    def layout(self) -> str:
        shard_1 = "a 3-node Galera cluster" if self.store.galera else "server1"
        return f"meta and shard_0 on server0, shard_1 on {shard_1}, shard_2 (moves) on the last"

    def run_clients(self) -> None:
        epoch = time.monotonic()
        until = epoch + self.args.minutes * 60
        share = LOSE_COMMIT_SHARE if "lose-commit" in self.args.nemesis else 0.0
        kill_share = KILL_COMMIT_SHARE if "kill-commit" in self.args.nemesis else 0.0
        # A client's warnings (the store logs each map read a fault broke) go to its log file.
        logs = [(self.out / f"p{number}.log").open("w") for number in range(self.args.clients)]
        clients = [
            self.store.spawn(
                "schemaless_store.testing.history.client",
                *("--process", f"p{number}", "--seed", str(self.rng.randrange(2**32))),
                *("--epoch", repr(epoch), "--until", repr(until)),
                *("--out", str(self.out / f"p{number}.jsonl"), "--lose-commit", str(share)),
                *("--kill-commit", str(kill_share)),
                user="mapper" if number == 0 else "app",
                stdout=log,
                stderr=log,
            )
            for number, log in enumerate(logs)
        ]
        recorder = Recorder(self.out / "nemesis.jsonl")
        for name in self.args.nemesis:
            if name in KINDS:
                nemesis = KINDS[name](
                    self.store, recorder, self.rng.randrange(2**32), self.stopping
                )
                if isinstance(nemesis, MoveBuckets):
                    nemesis.kill_movers = "mover-kill" in self.args.nemesis
                self.nemeses.append(nemesis)
                nemesis.start()
        tally = Tally(self.out)
        next_progress = epoch + PROGRESS_EVERY
        try:
            while any(client.poll() is None for client in clients):
                if time.monotonic() > until + 300:
                    for client in clients:
                        client.kill()  # stuck: its last operation stays unknown
                    break
                time.sleep(1.0)
                if time.monotonic() >= next_progress:
                    next_progress += PROGRESS_EVERY
                    self.say(tally.line(epoch, until))
        finally:
            self.stopping.set()
            for nemesis in self.nemeses:
                nemesis.join(timeout=600)
                nemesis.heal()
            recorder.close()
            for log in logs:
                log.close()
        self.failed_clients = [client.returncode for client in clients if client.returncode]
        if self.failed_clients:
            self.say(f"client(s) ended badly, exit codes {self.failed_clients}: see p*.log")

    def final_reads(self) -> None:
        """Every key read once more, retried until the healed store answers; a register's
        value found through the index, too (nothing else writes by then: the checker can
        decide every such find whose value's write was acknowledged)."""
        from django.db import connections

        from ...topology import bucket_map
        from .client import Client

        connections.close_all()  # the runner's own, perhaps broken by a nemesis
        bucket_map.forget()
        keys = sorted({op.key for op in load(sorted(self.out.glob("p*.jsonl"))).ops})
        reader = Client("final", 0, 0.0, self.out / "final.jsonl")
        deadline = time.monotonic() + FINAL_READ_TIMEOUT
        for key in keys:
            while reader.run("read", key, None) != "ok" and time.monotonic() < deadline:
                time.sleep(0.5)
            value = reader.last_result
            if not key.startswith("reg-"):
                continue
            while reader.run("history", key, None) != "ok" and time.monotonic() < deadline:
                time.sleep(0.5)
            if value is None or self.args.no_value_index:
                continue
            while reader.run("find", key, value) != "ok" and time.monotonic() < deadline:
                time.sleep(0.5)
        reader.recorder.close()
        self.say(f"final reads of {len(keys)} keys done")

    def keep_moves(self) -> None:
        """The moves' records, before the store is thrown away (:func:`keep_moves`)."""
        from django.db import connections

        path = self.out / "moves.json"
        try:
            connections.close_all()  # the runner's own, perhaps broken by a nemesis
            kept = keep_moves(path)
        except Exception as exc:  # the metadata server down: the history is checked all the same
            self.say(f"the moves' records were not kept ({type(exc).__name__}: {exc})"[:300])
            return
        self.say(f"{kept} moves' records in {path}")

    def report(self) -> int:
        history = load(sorted(self.out.glob("*.jsonl")))
        result = check(history)
        errors = sum(len(nemesis.errors) for nemesis in self.nemeses)
        summary = summarize(self.seed, history, result, errors, self.failed_clients)
        summary.value_unindexed = self.args.no_value_index
        (self.out / "summary.json").write_text(json.dumps(summary.as_dict(), indent=1))
        lines: list[Any] = [f"seed {self.seed}; replay: {self.replay()}", *summary.lines()]
        for nemesis in self.nemeses:
            if nemesis.errors:
                lines.append(f"nemesis {nemesis.name} could not inject {len(nemesis.errors)}:")
                lines += [f"    {error}" for error in nemesis.errors[:3]]
        lines += result.text().splitlines()
        for line in lines:
            self.say(str(line))
        self.say(f"summary in {self.out / 'summary.json'}")
        if self.failed_clients:
            # A client that died early proves nothing by finding nothing.
            self.say(f"the run is void: {len(self.failed_clients)} client(s) ended badly")
            return 2
        return 1 if result.anomalies else 0


class Tally:
    """The records written so far, counted from where the last count stopped (a soak's files
    grow large; a progress line must not read them whole)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.offsets: dict[Path, int] = {}
        self.records: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()

    def update(self) -> None:
        for path in sorted(self.out.glob("*.jsonl")):
            with path.open("rb") as records:
                records.seek(self.offsets.get(path, 0))
                data = records.read()
            whole = data.rfind(b"\n") + 1  # a line still being written waits for next time
            self.offsets[path] = self.offsets.get(path, 0) + whole
            for line in data[:whole].splitlines():
                record = json.loads(line)
                if record["type"] != "fault":
                    self.records[record["type"]] += 1
                elif record["detail"].get("phase") not in ENDS:
                    self.faults[record["nemesis"]] += 1

    def line(self, epoch: float, until: float) -> str:
        self.update()
        done = self.records
        faults = ", ".join(f"{name} {count}" for name, count in sorted(self.faults.items()))
        return (
            f"{time.monotonic() - epoch:.0f} s of {until - epoch:.0f}: {done['invoke']} ops "
            f"(ok {done['ok']}, fail {done['fail']}, info {done['info']}); "
            f"faults: {faults or 'none'}"
        )


def keep_moves(path: Path) -> int:
    """Write every move's record (its phase, message, counts, checkpoints and times) and every
    map version's note, moving mark and time to ``path`` (JSON), and return how many moves: the
    mover's own account of where a move was when an anomaly met it, which the metadata
    database held until the run threw it away. Each time is also given on the history's clock
    (``time.monotonic()``, the records' ``time``) under ``clock``: a wall time plus the two
    clocks' difference now."""
    from ...config.metadata import BucketMove, ShardMap

    offset = time.monotonic() - time.time()

    def clock(wall: Any) -> float | None:
        if wall is None:
            return None
        seconds = wall if isinstance(wall, (int, float)) else wall.timestamp()
        return round(float(seconds) + offset, 3)

    moves = []
    for move in BucketMove.objects.order_by("pk"):
        checkpoints = move.checkpoints or {}
        moves.append(
            {
                "move": move.pk,
                "target": move.target,
                "buckets": move.buckets,
                "sources": move.sources,
                "phase": move.phase,
                "message": move.message,
                "counts": move.counts,
                "checkpoints": checkpoints,
                "longest_pause": move.longest_pause,
                "clock": {
                    "started": clock(move.started),
                    "marked": clock(checkpoints.get("marked_at")),
                    "fenced": clock(checkpoints.get("fenced_at")),
                    "flipped": clock(move.flipped),
                    "finished": clock(move.finished),
                    "changed": clock(move.changed),
                },
            }
        )
    versions = [
        {"version": v.version, "note": v.note, "moving": v.moving, "clock": clock(v.created)}
        for v in ShardMap.objects.order_by("version")
    ]
    path.write_text(json.dumps({"moves": moves, "map_versions": versions}, indent=1, default=str))
    return len(moves)


def main(argv: list[str] | None = None) -> int:
    return Run(parser().parse_args(argv)).main()
