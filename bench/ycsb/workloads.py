"""YCSB's core workloads and key choosers, written from the public definitions (Cooper et al.,
"Benchmarking Cloud Serving Systems with YCSB", SoCC 2010, and the ``workloads/workload[a-f]``
files and ``site.ycsb.generator`` classes of the YCSB repository):

- keys are ``"user" + str(fnvhash64(keynum))`` (``insertorder=hashed``, the default), so a scan
  in key order visits records in no order of their insertion;
- ``zipfian`` is YCSB's *scrambled* zipfian: a zipfian (constant 0.99) over 10^10 items with the
  precomputed zeta, hashed with FNV-64 and taken modulo the record count, so the popular keys
  are spread over the key space;
- ``latest`` is YCSB's skewed-latest: ``last - zipfian(last)``, the most recently inserted
  records the most popular (the zipfian's item count grows with the inserts);
- an update writes one field (``writeallfields=false``), a read reads all of them, a scan reads
  a uniform 1..100 records from a zipfian start key, a read-modify-write reads a record and
  updates one field of it, an insert adds the next record in insertion order.

The operation sequence of a round is made here, once, from a seed, and every contender runs the
very same one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FIELDS = 10
FIELD_LENGTH = 100
ZIPF_CONSTANT = 0.99
MAX_SCAN = 100

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1


def fnvhash64(value: int) -> int:
    """YCSB's ``Utils.fnvhash64``: FNV-1a over the 8 bytes of a long, as a non-negative long."""
    value &= _MASK
    h = _FNV_OFFSET
    for _ in range(8):
        h ^= value & 0xFF
        value >>= 8
        h = (h * _FNV_PRIME) & _MASK
    if h >= 1 << 63:  # Java's Math.abs of a signed long
        h = (1 << 64) - h
    return h & ((1 << 63) - 1)


def key_name(keynum: int) -> str:
    return f"user{fnvhash64(keynum)}"


def _zeta(start: int, count: int, theta: float, initial: float) -> float:
    total = initial
    for i in range(start, count):
        total += 1 / (i + 1) ** theta
    return total


class Zipfian:
    """YCSB's ``ZipfianGenerator`` (Gray et al., "Quickly generating billion-record synthetic
    databases"): items ``0..items-1``, item 0 the most popular. ``next(items)`` with a larger
    count extends zeta incrementally, as YCSB's does for the latest distribution."""

    def __init__(self, items: int, theta: float = ZIPF_CONSTANT, zetan: float | None = None):
        self.theta = theta
        self.alpha = 1 / (1 - theta)
        self.zeta2 = _zeta(0, 2, theta, 0.0)
        self.items = items
        self.zetan = zetan if zetan is not None else _zeta(0, items, theta, 0.0)
        self._eta()

    def _eta(self) -> None:
        self.eta = (1 - (2 / self.items) ** (1 - self.theta)) / (1 - self.zeta2 / self.zetan)

    def next(self, rng: random.Random, items: int | None = None) -> int:
        if items is not None and items != self.items:
            if items > self.items:
                self.zetan = _zeta(self.items, items, self.theta, self.zetan)
            else:
                self.zetan = _zeta(0, items, self.theta, 0.0)
            self.items = items
            self._eta()
        u = rng.random()
        uz = u * self.zetan
        if uz < 1:
            return 0
        if uz < 1 + 0.5**self.theta:
            return 1
        return int(self.items * (self.eta * u - self.eta + 1) ** self.alpha)


class ScrambledZipfian:
    """YCSB's ``ScrambledZipfianGenerator``: a zipfian over 10^10 items (zeta precomputed by
    YCSB), hashed, modulo ``items``."""

    ITEM_COUNT = 10_000_000_000
    ZETAN = 26.46902820178302

    def __init__(self, items: int) -> None:
        self.items = items
        self.zipf = Zipfian(self.ITEM_COUNT, zetan=self.ZETAN)

    def next(self, rng: random.Random) -> int:
        return fnvhash64(self.zipf.next(rng)) % self.items


class SkewedLatest:
    """YCSB's ``SkewedLatestGenerator``: ``last - zipfian(last)`` over the inserted records."""

    def __init__(self, last: int) -> None:
        self.zipf = Zipfian(max(last, 2))

    def next(self, rng: random.Random, last: int) -> int:
        return last - self.zipf.next(rng, max(last, 2)) if last > 0 else 0


@dataclass(frozen=True)
class Workload:
    name: str
    read: float = 0.0
    update: float = 0.0
    insert: float = 0.0
    scan: float = 0.0
    rmw: float = 0.0
    distribution: str = "zipfian"
    what: str = ""


WORKLOADS = {
    "A": Workload("A", read=0.5, update=0.5, what="update heavy: 50% read, 50% update"),
    "B": Workload("B", read=0.95, update=0.05, what="read mostly: 95% read, 5% update"),
    "C": Workload("C", read=1.0, what="read only"),
    "D": Workload(
        "D", read=0.95, insert=0.05, distribution="latest", what="read latest: 95% read, 5% insert"
    ),
    "E": Workload("E", scan=0.95, insert=0.05, what="short ranges: 95% scan (1-100), 5% insert"),
    "F": Workload("F", read=0.5, rmw=0.5, what="read-modify-write: 50% read, 50% RMW"),
}

# One operation: (kind, keynum, field number, scan length); kind is read, update, insert, scan
# or rmw.
Op = tuple[str, int, int, int]


class Sequence:
    """The operations of one workload, round after round, from one seed. ``records`` is the
    count of records that exist (loaded, then inserted by earlier rounds, the same for every
    contender)."""

    def __init__(self, workload: Workload, records: int, seed: int, operations: int) -> None:
        self.workload = workload
        self.records = records
        self.rng = random.Random(seed)
        # YCSB sizes the key chooser for the records and twice the inserts it expects.
        inserts_expected = int(operations * workload.insert * 2)
        if workload.distribution == "latest":
            self.latest = SkewedLatest(records - 1)
        else:
            self.zipf = ScrambledZipfian(records + inserts_expected)
        kinds = [("read", workload.read), ("update", workload.update)]
        kinds += [("insert", workload.insert), ("scan", workload.scan), ("rmw", workload.rmw)]
        self.kinds = [k for k, p in kinds if p > 0]
        self.weights = [p for _k, p in kinds if p > 0]

    def _key(self) -> int:
        last = self.records - 1  # the acknowledged counter's last value (single client)
        if self.workload.distribution == "latest":
            return self.latest.next(self.rng, last)
        while True:  # YCSB draws again past the last inserted record
            keynum = self.zipf.next(self.rng)
            if keynum <= last:
                return keynum

    def ops(self, count: int) -> list[Op]:
        out: list[Op] = []
        rng = self.rng
        for _ in range(count):
            kind = rng.choices(self.kinds, self.weights)[0]
            if kind == "insert":
                out.append((kind, self.records, 0, 0))
                self.records += 1
                continue
            length = rng.randint(1, MAX_SCAN) if kind == "scan" else 0
            out.append((kind, self._key(), rng.randrange(FIELDS), length))
        return out


def field_value(rng: random.Random) -> str:
    """A field's 100 bytes (printable ASCII, as YCSB's ``RandomByteIterator`` makes)."""
    return "".join(chr(rng.randrange(32, 127)) for _ in range(FIELD_LENGTH))
