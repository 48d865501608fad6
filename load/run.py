"""Run the load test (docs/deployment.md): throwaway MariaDB servers (two shards, and a third
server a move can use), Redis with the near cache on, the demo served by gunicorn, locust's
users for ``--seconds``, and at most one fault while they run. Then: every post acknowledged
with a redirect is looked up on the site, and the report gives requests/s and p50/p95/p99 per
page, and every response that was not 2xx/3xx.

    .venv/bin/python -m load.run --seconds 40 --fault move --out load-results/move

Exit status 1 when a 5xx was answered (a 503 only during ``kill-shard``, for the pages that
need the dead shard) or an acknowledged post is missing. Talks to 127.0.0.1 only; everything
it starts it stops.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from datetime import UTC
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FAULTS = ("none", "move", "backfill", "kill-shard", "redis", "galera-node")
LAYOUT = {"shard_0": "0-2047", "shard_1": "2048-4095", "shard_2": []}
QUARTER = "0-1023"  # a quarter of the 4096 buckets, from shard_0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Site:
    """The servers, the environment of every process of the site, and gunicorn."""

    def __init__(
        self,
        out: Path,
        workers: int,
        conn_max_age: int,
        live_index: bool,
        server: str = "wsgi",
        galera: bool = False,
    ) -> None:
        from schemaless_store.testing.mariadb import start_servers
        from schemaless_store.testing.redis import start_redis

        self.out = out
        self.servers = start_servers(3)
        self.redis = start_redis()
        self.galera: Any = None
        # (Not named ``server``: that is the argument, read below. The name once hid it, and
        # every --server asgi run served WSGI.)
        for mariadb, names in zip(
            self.servers, (("meta", "shard0"), ("shard1",), ("shard2",)), strict=True
        ):
            for name in names:
                mariadb.query(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        first, second, third = self.servers
        shard1 = second.url("shard1")
        if galera:  # shard_1 on a three-node Galera cluster instead
            from schemaless_store.testing.galera import start_galera_cluster

            self.galera = start_galera_cluster(3)
            self.galera.nodes[0].query(
                "CREATE DATABASE shard1 CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
            nodes = ",".join(f"127.0.0.1:{node.port}" for node in self.galera.nodes)
            shard1 = f"galera://root@{nodes}/shard1"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "project.production",
            "DATABASE_URL": first.url("meta"),
            "SHARD_DATABASE_URLS": ";".join([first.url("shard0"), shard1, third.url("shard2")]),
            "SHARD_LAYOUT": json.dumps(LAYOUT),
            "ENTITY_CACHE_URL": self.redis.url,
            "ENTITY_NEAR_CACHE": "1",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1",
            "DJANGO_PLAIN_HTTP": "1",
            "CONN_MAX_AGE": str(conn_max_age),
            "STATIC_ROOT": str(out / "static"),
            "WEB_CONCURRENCY": str(workers),
            "ACCESS_LOG": "",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self.env.pop("FEED_LIVE_INDEXES", None)
        self.live_index = live_index
        self.server = server
        self.port = free_port()
        self.gunicorn: subprocess.Popen[bytes] | None = None

    def manage(
        self, *args: str, timeout: float = 300, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "manage.py", *args],
            cwd=ROOT,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def prepare(self, users: int, entries: int) -> None:
        for args in (
            ("migrateall",),
            ("seed", "--users", str(users), "--entries", str(entries)),
            ("collectstatic", "--noinput", "-v", "0"),
        ):
            done = self.manage(*args)
            if done.returncode:
                raise SystemExit(f"load: manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        if self.live_index:  # declared after the seed: its backfill has the seeded entries to do
            self.env["FEED_LIVE_INDEXES"] = "link"
            done = self.manage("migrateall")
            if done.returncode:
                raise SystemExit(
                    f"load: migrateall with the live index failed:\n{done.stderr[-3000:]}"
                )

    def serve(self) -> str:
        log = open(self.out / "gunicorn.log", "wb")  # noqa: SIM115 (closed with the process)
        self.gunicorn = subprocess.Popen(
            [
                PY,
                "-m",
                "gunicorn",
                "-c",
                "project/gunicorn.conf.py",
                "--bind",
                f"127.0.0.1:{self.port}",
                *self._app(),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/", timeout=5) as answer:
                    if answer.status == 200:
                        return url
            except OSError:
                pass
            if time.monotonic() > deadline or self.gunicorn.poll() is not None:
                raise SystemExit("load: gunicorn did not answer within 60 s (see gunicorn.log)")
            time.sleep(0.3)

    def _app(self) -> list[str]:
        if self.server == "asgi":  # uvicorn's workers, the async views on the event loop
            return ["-k", "uvicorn.workers.UvicornWorker", "project.asgi:application"]
        return ["project.wsgi:application"]

    def stop(self) -> None:
        if self.gunicorn is not None and self.gunicorn.poll() is None:
            os.killpg(self.gunicorn.pid, signal.SIGTERM)
            try:
                self.gunicorn.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.gunicorn.pid, signal.SIGKILL)
                self.gunicorn.wait(timeout=30)
        for server in self.servers:
            server.stop()
        if self.galera is not None:
            self.galera.stop()
        self.redis.stop()


class Fault(threading.Thread):
    """One fault, started ``at`` seconds into the load; what happened, with times, in ``log``."""

    def __init__(self, site: Site, kind: str, at: float) -> None:
        super().__init__(daemon=True)
        self.site, self.kind, self.at = site, kind, at
        self.log: list[str] = []
        self.marks: list[float] = []  # wall clock of each note: the first and last bound the fault
        self.failed = ""
        self._t0 = time.monotonic()

    def note(self, text: str) -> None:
        self.log.append(f"{time.monotonic() - self._t0:6.1f}s {text}")
        self.marks.append(time.time())

    def run(self) -> None:
        time.sleep(self.at)
        try:
            getattr(self, "_" + self.kind.replace("-", "_"))()
        except Exception as exc:  # reported, and fails the run
            self.failed = f"{type(exc).__name__}: {exc}"
            self.note(f"fault failed: {self.failed}")

    def _manage(self, *args: str) -> None:
        self.note("manage.py " + " ".join(args))
        done = self.site.manage(*args, timeout=600)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        self.note(f"  -> exit {done.returncode}: {last}")
        if done.returncode:
            raise RuntimeError(
                done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
            )

    def _none(self) -> None:
        pass

    def _move(self) -> None:
        self._manage("movebuckets", "--to", "shard_2", "--buckets", QUARTER)
        self._manage("movebuckets", "--to", "shard_0", "--buckets", QUARTER)

    def _backfill(self) -> None:
        self._manage("runcleaner", "--index", "index_feed_link", "--once")

    def _kill_shard(self) -> None:
        server = self.site.servers[1]
        self.note("SIGKILL shard_1's server")
        server.kill()
        time.sleep(3)
        server.start()
        self.note("shard_1's server restarted")

    def _galera_node(self) -> None:
        node = self.site.galera.nodes[0]  # the node the store reaches first
        self.note(f"SIGKILL Galera node {node.name} of shard_1")
        node.kill()
        time.sleep(3)
        node.start(timeout=180)
        self.site.galera.wait_synced(180)
        self.note(f"Galera node {node.name} rejoined, synced")

    def _redis(self) -> None:
        redis = self.site.redis
        self.note("Redis stopped (SIGKILL)")
        assert redis.process is not None
        redis.process.kill()
        redis.process.wait(timeout=30)
        redis.process = None
        time.sleep(1)
        redis.start()
        self.note("Redis restarted")


def run_locust(url: str, out: Path, users: int, seconds: int) -> None:
    env = {
        **os.environ,
        "LOAD_TIMES_FILE": str(out / "times.jsonl"),
        "LOAD_ACK_FILE": str(out / "acks.jsonl"),
        "LOAD_BAD_FILE": str(out / "bad.jsonl"),
    }
    done = subprocess.run(
        [
            PY,
            "-m",
            "locust",
            "-f",
            str(ROOT / "load" / "locustfile.py"),
            "--headless",
            "--host",
            url,
            "-u",
            str(users),
            "-r",
            str(users),
            "-t",
            f"{seconds}s",
            "--csv",
            str(out / "locust"),
            "--only-summary",
            "--loglevel",
            "WARNING",
            "--exit-code-on-error",
            "0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=seconds + 120,
    )
    (out / "locust.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"load: locust failed ({done.returncode}):\n{done.stderr[-2000:]}")


def lost_posts(url: str, out: Path) -> tuple[int, list[str]]:
    """How many posts were acknowledged, and those the site does not show (each looked up on
    its entry page, a few tries: a shard just restarted may need a moment)."""
    path = out / "acks.jsonl"
    acked = (
        [json.loads(line)["id"] for line in path.read_text().splitlines()] if path.exists() else []
    )
    missing = []
    for entry in acked:
        for attempt in range(5):
            try:
                with urllib.request.urlopen(f"{url}/e/{entry}/", timeout=10) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5 * (attempt + 1))
        else:
            missing.append(entry)
    return len(acked), missing


def stats(out: Path) -> list[dict[str, Any]]:
    rows = []
    with open(out / "locust_stats.csv") as found:
        for row in csv.DictReader(found):
            rows.append(
                {
                    "name": row["Name"]
                    if row["Type"] in ("", "None") or row["Name"] == "Aggregated"
                    else f"{row['Type']} {row['Name']}".replace("POST POST", "POST"),
                    "requests": int(row["Request Count"]),
                    "rps": round(float(row["Requests/s"]), 1),
                    "p50": row["50%"],
                    "p95": row["95%"],
                    "p99": row["99%"],
                    "max": round(float(row["Max Response Time"])),
                }
            )
    return rows


def percentile(values: list[int], share: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def by_phase(out: Path, marks: list[float], page: str = "GET /") -> dict[str, Any]:
    """``page``'s p50/p99 before the fault, while it ran (first to last note) and after."""
    path = out / "times.jsonl"
    if not path.exists() or not marks:
        return {}
    start, end = marks[0], marks[-1]
    phases: dict[str, list[int]] = {"before": [], "during": [], "after": []}
    for line in path.read_text().splitlines():
        at, name, ms, _status = json.loads(line)
        if name != page:
            continue
        phase = "before" if at < start else "during" if at <= end else "after"
        phases[phase].append(ms)
    return {
        phase: {"requests": len(v), "p50": percentile(v, 0.5), "p99": percentile(v, 0.99)}
        for phase, v in phases.items()
    }


# The flip's window: from this long before a move's fence to this long after its flip (s).
FLIP_MARGIN = 1.0
# The target for the feed page at the flip (ms).
FLIP_P99_TARGET = 1000


def flips(site: Site) -> list[tuple[float, float]]:
    """Each flipped move's fence and flip, wall clock: writes to its buckets were held from
    ``flipped - longest_pause`` (the fence) to ``flipped`` (the new map published), as the
    mover records them in its ``BucketMove`` on ``default``."""
    rows = site.servers[0].query(
        "SELECT flipped, longest_pause FROM meta.schemaless_store_bucketmove "
        "WHERE flipped IS NOT NULL ORDER BY id"
    )
    found = []
    for row in rows:  # Django stores UTC (USE_TZ) in a naive DATETIME
        flipped = row["flipped"].replace(tzinfo=UTC).timestamp()
        found.append((flipped - float(row["longest_pause"] or 0.0), flipped))
    return found


def at_flip(
    times: list[list[Any]],
    moves: list[tuple[float, float]],
    margin: float = FLIP_MARGIN,
    page: str = "GET /",
) -> dict[str, Any]:
    """``page``'s latency at the flips: the requests (``[end wall clock, page, ms, status]``,
    as the locustfile writes them) that were under way at any time from ``margin`` seconds
    before a move's fence to ``margin`` seconds after its flip, so a request held by the fence
    counts however long it waited."""
    windows = [(fence - margin, flip + margin) for fence, flip in moves]
    taken = []
    for end, name, ms, _status in times:
        start = end - ms / 1000
        if name == page and any(start <= high and end >= low for low, high in windows):
            taken.append(ms)
    p99 = percentile(taken, 0.99)
    return {
        "page": page,
        "margin_s": margin,
        "windows": [[round(low, 3), round(high, 3)] for low, high in windows],
        "requests": len(taken),
        "p50": percentile(taken, 0.5),
        "p99": p99,
        "max": max(taken) if taken else None,
        "target_p99_ms": FLIP_P99_TARGET,
        "met": None if p99 is None else p99 <= FLIP_P99_TARGET,
    }


def read_times(out: Path) -> list[list[Any]]:
    path = out / "times.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn's sync workers")
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--fault-at", type=float, default=0.25, help="share of --seconds")
    parser.add_argument("--conn-max-age", type=int, default=60)
    parser.add_argument(
        "--flip-margin",
        type=float,
        default=FLIP_MARGIN,
        help="seconds before each move's fence and after its flip that count as at the flip",
    )
    parser.add_argument("--server", choices=("wsgi", "asgi"), default="wsgi")
    parser.add_argument("--seed-users", type=int, default=20)
    parser.add_argument("--seed-entries", type=int, default=400)
    parser.add_argument("--out", type=Path, default=ROOT / "load-results")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("acks.jsonl", "bad.jsonl", "times.jsonl"):
        (out / name).unlink(missing_ok=True)
    started = time.monotonic()
    site = Site(
        out,
        args.workers,
        args.conn_max_age,
        live_index=args.fault == "backfill",
        galera=args.fault == "galera-node",
        server=args.server,
    )
    try:
        site.prepare(args.seed_users, args.seed_entries)
        url = site.serve()
        print(
            f"load: {args.workers} gunicorn {args.server} workers at {url}, {args.users} users for "
            f"{args.seconds} s, fault: {args.fault}",
            flush=True,
        )
        fault = Fault(site, args.fault, args.seconds * args.fault_at)
        fault.start()
        run_locust(url, out, args.users, args.seconds)
        fault.join(timeout=600)
        acked, missing = lost_posts(url, out)
        moves = flips(site) if args.fault == "move" else []
    finally:
        site.stop()
    bad = (
        [json.loads(line) for line in (out / "bad.jsonl").read_text().splitlines()]
        if (out / "bad.jsonl").exists()
        else []
    )
    by_status = Counter((b["name"], b["status"], b.get("unavailable", "")) for b in bad)
    allowed_503 = args.fault == "kill-shard"
    server_errors = [b for b in bad if b["status"] >= 500 or b["status"] == 0]
    failing = [b for b in server_errors if not (allowed_503 and b["status"] == 503)]
    report = {
        "fault": args.fault,
        "workers": args.workers,
        "users": args.users,
        "seconds": args.seconds,
        "conn_max_age": args.conn_max_age,
        "server": args.server,
        "pages": stats(out),
        "not_2xx_3xx": [
            {"name": n, "status": s, "unavailable": u, "count": c}
            for (n, s, u), c in sorted(by_status.items())
        ],
        "acknowledged_posts": acked,
        "lost_posts": missing,
        "fault_log": fault.log,
        "feed_by_phase": by_phase(out, fault.marks),
        "feed_at_flip": at_flip(read_times(out), moves, args.flip_margin) if moves else {},
        "fault_failed": fault.failed,
        "took": round(time.monotonic() - started, 1),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    columns = ("requests", "rps", "p50", "p95", "p99", "max")
    print(f"{'page':<24} " + " ".join(f"{c:>8}" for c in columns) + "  (ms)")
    for row in report["pages"]:
        print(f"{row['name']:<24} " + " ".join(f"{row[c]:>8}" for c in columns))
    for item in report["not_2xx_3xx"]:
        where = f" ({item['unavailable']} unavailable)" if item["unavailable"] else ""
        print(f"not 2xx/3xx: {item['count']} x {item['status']} {item['name']}{where}")
    for line in fault.log:
        print(f"fault: {line}")
    for phase, figures in report["feed_by_phase"].items():
        print(f"GET / {phase} the fault: {figures}")
    flip = report["feed_at_flip"]
    if flip:
        verdict = {True: "met", False: "missed", None: "no request"}[flip["met"]]
        print(
            f"GET / at the flip ({flip['requests']} requests under way from {args.flip_margin} s "
            f"before each of {len(flip['windows'])} fences to {args.flip_margin} s after its "
            f"flip): p50 {flip['p50']}, p99 {flip['p99']}, max {flip['max']} ms; target p99 "
            f"<= {FLIP_P99_TARGET} ms: {verdict}"
        )
    print(f"posts acknowledged: {acked}, missing from the site: {len(missing)}")
    ok = not failing and not missing and not fault.failed
    verdict = "OK" if ok else "FAILED"
    print(f"load: {verdict} ({len(failing)} server errors counted, {len(missing)} posts lost)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
