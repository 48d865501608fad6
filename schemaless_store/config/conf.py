"""The ``SCHEMALESS`` settings dict, merged with defaults and read through one cached object.

The cache is cleared on Django's ``setting_changed`` signal, so ``override_settings`` works.
Each setting that holds a flag or a number is validated by its line of :data:`RULES` (and
:data:`NEAR_RULES`); the others by the code that resolves them. A bad value raises
:class:`ConfigurationError` naming the key and what it may hold, which the system check
``schemaless.E001`` (:mod:`schemaless_store.checks`) reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from ..exceptions import ConfigurationError
from ..values.codec import Codec

# The most a body column holds (MariaDB's MEDIUMBLOB): the ceiling of MAX_BODY_BYTES.
MEDIUMBLOB_BYTES = 2**24 - 1

DEFAULTS: dict[str, Any] = {
    # Database aliases that hold entities and index tables. A list spreads the buckets evenly in
    # contiguous ranges; a dict maps each alias to bucket ranges ("0-2047" or [0, 2047]).
    # None: every alias in DATABASES except "default".
    "SHARDS": None,
    # Logical buckets. Changing it rehashes everything: pick it once, large (moving buckets
    # between servers later only edits SHARDS).
    "BUCKETS": 4096,
    "CODEC": "schemaless_store.values.codec.MsgpackCodec",
    # Submodule of each installed app that declares Index instances.
    "INDEX_MODULE": "indexes",
    # MEDIUMBLOB holds 16 MiB - 1 bytes; the server's max_allowed_packet must exceed this.
    "MAX_BODY_BYTES": MEDIUMBLOB_BYTES,
    # How often a write is retried after a deadlock or lock wait timeout before it raises.
    "WRITE_RETRIES": 5,
    # Seconds a write's receipt is kept on its shard (docs/design.md#receipts): longer than any
    # retry of the write can come after its commit. Writers remove older ones in batches.
    "RECEIPT_RETENTION": 600.0,
    # Seconds a write whose commit answer was lost keeps asking its unreachable shard for the
    # receipt before it raises OutcomeUnknown.
    "RECEIPT_WAIT": 10.0,
    # Entities fetched per IN (...) query when reading many ids from one shard.
    "FETCH_BATCH": 500,
    # Keep every version of every entity as a cell (entity.history(), the change feed).
    "HISTORY": False,
    # The change feed stops before a hole in the cell sequence until the cell after it is this
    # many seconds old: a transaction that inserted a cell commits within it (docs/cells.md).
    "FEED_GAP_GRACE": 10.0,
    # Seconds a process keeps its copy of the stored bucket -> shard map before reading it again
    # (docs/resharding.md). A shard refuses writes for buckets it does not own whatever the copy
    # says; this bounds how long a process keeps asking the old owner first.
    "MAP_MAX_AGE": 1.0,
    # Seconds a write refused by a shard whose buckets are being flipped waits for the move to
    # finish before it fails with NotOwner.
    "MOVE_WAIT": 10.0,
    # The alias in CACHES that get() and get_many() read entities through (docs/cache.md), or
    # None: no entity cache.
    "CACHE": None,
    # Seconds an entry of the entity cache lives: the longest another process can read a
    # value whose invalidation failed (a write's own process never does).
    "CACHE_TIMEOUT": 300,
    # The near cache (docs/cache.md#the-near-cache): the entity cache's hits kept in process
    # memory, invalidated by Redis's client-side tracking. None: off; a dict of NEAR_DEFAULTS'
    # keys (those left out take their defaults) turns it on. It needs a Redis entity cache.
    "NEAR_CACHE": None,
    # Read replicas per shard (docs/replicas.md): {"shard_0": ["shard_0_replica_0", ...]},
    # aliases in DATABASES that replicate the shard's server (MariaDB GTID replication).
    "REPLICAS": {},
    # Whether get(), get_many() and index queries read replicas (with read-your-writes);
    # replicas.from_replicas() / from_primary() choose per block of code.
    "READ_FROM_REPLICAS": False,
    # Seconds a replica may lag (Seconds_Behind_Master) and still be read.
    "REPLICA_MAX_LAG": 5.0,
    # Seconds a read waits for a replica to apply the thread's own last write on that shard
    # (MASTER_GTID_WAIT) before it reads the primary instead; 0: no wait.
    "REPLICA_WAIT": 0.0,
    # Seconds between two checks of a replica's state by one process.
    "REPLICA_CHECK_INTERVAL": 1.0,
}

NEAR_DEFAULTS: dict[str, Any] = {
    # Ids whose copies one process keeps; the least recently used go first.
    "MAX_ENTRIES": 10_000,
    # Seconds the tracking connection may go unheard before this process stops serving copies
    # (and flushes them once the connection is found dropped): the longest another process's
    # write can go unseen here when that connection drops silently.
    "DROP_TIMEOUT": 1.0,
}


@dataclass(frozen=True)
class Rule:
    """What a setting may hold: True or False (``flag``), or a number (an ``int`` with
    ``whole``; never a bool) from ``low`` to ``high``, both included (no ``high``: no ceiling),
    counted in ``unit``. :meth:`check` refuses anything else, naming the setting and the range."""

    low: float = 0
    high: float | None = None
    whole: bool = False
    unit: str = ""
    flag: bool = False

    def wanted(self) -> str:
        if self.flag:
            return "True or False"
        kind = ("a whole number" if self.whole else "a number") + (
            f" of {self.unit}" if self.unit else ""
        )
        if self.high is None:
            return f"{kind} >= {self.low}"
        return f"{kind} from {self.low} to {self.high}"

    def check(self, name: str, value: Any) -> None:
        if self.flag:
            fits = isinstance(value, bool)
        else:
            fits = (
                not isinstance(value, bool)
                and isinstance(value, int if self.whole else int | float)
                and self.low <= value  # a NaN fails every bound
                and (self.high is None or value <= self.high)
            )
        if not fits:
            raise ConfigurationError(f"{name} must be {self.wanted()}, not {value!r}")


FLAG = Rule(flag=True)
SECONDS = Rule(low=0, unit="seconds")

# Every setting that holds a flag or a number, and what it may hold: get() refuses anything
# else (check schemaless.E001). A new setting of that kind adds its line here.
RULES: dict[str, Rule] = {
    "BUCKETS": Rule(low=1, whole=True),
    "MAX_BODY_BYTES": Rule(low=1, high=MEDIUMBLOB_BYTES, whole=True, unit="bytes"),
    # Retries back off exponentially from 5 ms: the tenth waits ~2.5 s, ten ~5 s in all.
    "WRITE_RETRIES": Rule(low=0, high=10, whole=True),
    # One IN (...) of this many ids: SQLite takes at most 32,766 parameters a statement.
    "FETCH_BATCH": Rule(low=1, high=32_766, whole=True),
    "HISTORY": FLAG,
    "FEED_GAP_GRACE": SECONDS,
    "MAP_MAX_AGE": SECONDS,
    "MOVE_WAIT": SECONDS,
    # A retry of a write asks for its receipt after its commit: never less than a minute.
    "RECEIPT_RETENTION": Rule(low=60, unit="seconds"),
    "RECEIPT_WAIT": SECONDS,
    "CACHE_TIMEOUT": Rule(low=1, whole=True, unit="seconds"),
    "READ_FROM_REPLICAS": FLAG,
    "REPLICA_MAX_LAG": SECONDS,
    "REPLICA_WAIT": SECONDS,
    "REPLICA_CHECK_INTERVAL": SECONDS,
}
NEAR_RULES: dict[str, Rule] = {
    "MAX_ENTRIES": Rule(low=1, whole=True),
    "DROP_TIMEOUT": Rule(low=0.01, unit="seconds"),
}

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")

# Seconds of slack between the receipts' clocks (a Galera node's against another's, a clock
# stepped back): a retry whose receipt is this close to the retention takes "absent" for
# "unknown" (docs/design.md#receipts), and the startup check adds it to the horizon.
RECEIPT_MARGIN = 10.0
# InnoDB's innodb_lock_wait_timeout unless a shard's init_command sets it.
LOCK_WAIT = 50.0
_LOCK_WAIT_SET = re.compile(r"innodb_lock_wait_timeout\s*=\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def receipt_horizon_parts(
    resolved: StoreSettings, databases: dict[str, Any], lock_waits: dict[str, float] | None = None
) -> list[tuple[str, float]]:
    """What the longest retry can take, from its receipt's time to reading it, by part: its
    commit's lost answer (the client waits up to 3 x ``read_timeout``), ``RECEIPT_WAIT``, the
    last ask's own connection and answer (``connect_timeout`` + 3 x ``read_timeout``) and the
    receipt row's lock wait, on the MySQL shard where they are longest, and the clocks'
    margin. The lock wait is the server's where ``lock_waits`` gives it, else the one the
    shard's ``init_command`` sets, else InnoDB's default. A MySQL shard without
    ``read_timeout`` waits without end: not counted here (check ``schemaless.W007``)."""
    worst: list[tuple[str, float]] = []
    for alias in resolved.shards:
        db = databases.get(alias, {})
        options = db.get("OPTIONS", {})
        if not speaks_mysql(db) or not options.get("read_timeout"):
            continue
        read = 3 * float(options["read_timeout"])
        found = _LOCK_WAIT_SET.search(str(options.get("init_command", "")))
        lock = (lock_waits or {}).get(alias, float(found.group(1)) if found else LOCK_WAIT)
        here = [
            (f"3 x read_timeout of {alias!r} (a lost answer)", read),
            (f"connect_timeout + 3 x read_timeout of {alias!r} (the last ask)",
             float(options.get("connect_timeout") or 0) + read),
            (f"the lock wait of {alias!r} (innodb_lock_wait_timeout)", lock),
        ]  # fmt: skip
        if sum(s for _p, s in here) > sum(s for _p, s in worst):
            worst = here
    return [("RECEIPT_WAIT", resolved.receipt_wait), *worst, ("clock margin", RECEIPT_MARGIN)]


def speaks_mysql(db: dict[str, Any]) -> bool:
    """Whether a ``DATABASES`` entry is MySQL's backend or one built on it (the Galera one)."""
    engine = str(db.get("ENGINE", ""))
    return engine.endswith(("mysql", ".galera"))


def receipt_horizon(resolved: StoreSettings, databases: dict[str, Any]) -> float:
    """The least ``RECEIPT_RETENTION`` that outlives every retry: :func:`receipt_horizon_parts`."""
    return sum(seconds for _part, seconds in receipt_horizon_parts(resolved, databases))


@dataclass(frozen=True)
class NearCacheSettings:
    max_entries: int
    drop_timeout: float


@dataclass(frozen=True)
class StoreSettings:
    shards: tuple[str, ...]
    buckets: int
    bucket_aliases: tuple[str, ...]  # bucket number -> alias
    codec: Codec
    index_module: str
    max_body_bytes: int
    write_retries: int
    receipt_retention: float
    receipt_wait: float
    fetch_batch: int
    history: bool
    feed_gap_grace: float
    map_max_age: float
    move_wait: float
    cache: str | None
    cache_timeout: int
    near_cache: NearCacheSettings | None
    replicas: dict[str, tuple[str, ...]]
    read_from_replicas: bool
    replica_max_lag: float
    replica_wait: float
    replica_check_interval: float
    raw: dict[str, Any]


def _user_settings() -> dict[str, Any]:
    user = getattr(settings, "SCHEMALESS", {}) or {}
    if not isinstance(user, dict):
        raise ConfigurationError("settings.SCHEMALESS must be a dict")
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        raise ConfigurationError(
            f"unknown SCHEMALESS keys {unknown}; known keys: {sorted(DEFAULTS)}"
        )
    return {**DEFAULTS, **user}


def _parse_ranges(alias: str, spec: Any, buckets: int) -> list[int]:
    items = spec if isinstance(spec, list | tuple) and not _is_pair(spec) else [spec]
    numbers: list[int] = []
    for item in items:
        if _is_pair(item):
            low, high = int(item[0]), int(item[1])
        elif isinstance(item, int):
            low = high = item
        else:
            match = _RANGE.match(str(item))
            if not match:
                raise ConfigurationError(
                    f"SCHEMALESS['SHARDS'][{alias!r}]: {item!r} is not a bucket number "
                    "or a range like '0-2047'"
                )
            low = int(match.group(1))
            high = int(match.group(2) or low)
        if not 0 <= low <= high < buckets:
            raise ConfigurationError(
                f"SCHEMALESS['SHARDS'][{alias!r}]: range {low}-{high} is outside 0-{buckets - 1}"
            )
        numbers.extend(range(low, high + 1))
    return numbers


def _replica_aliases(replicas: Any) -> list[str]:
    if not isinstance(replicas, dict):
        return []
    return [
        name for names in replicas.values() if isinstance(names, list | tuple) for name in names
    ]


def _replicas(raw: Any, shards: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, dict):
        raise ConfigurationError(
            "SCHEMALESS['REPLICAS'] must be a dict: {shard alias: [replica aliases]}"
        )
    found: dict[str, tuple[str, ...]] = {}
    seen: set[str] = set()
    for alias, names in raw.items():
        if alias not in shards:
            raise ConfigurationError(
                f"SCHEMALESS['REPLICAS'] names {alias!r}, which is not a shard ({list(shards)})"
            )
        if isinstance(names, str) or not isinstance(names, list | tuple):
            raise ConfigurationError(
                f"SCHEMALESS['REPLICAS'][{alias!r}] must be a list of aliases, not {names!r}"
            )
        for name in names:
            if name not in settings.DATABASES:
                raise ConfigurationError(
                    f"SCHEMALESS['REPLICAS'][{alias!r}] names {name!r}, which is not in DATABASES"
                )
            if name in shards or name == "default" or name in seen:
                raise ConfigurationError(
                    f"SCHEMALESS['REPLICAS'][{alias!r}]: {name!r} is a shard, 'default' or "
                    "another shard's replica; a replica serves one shard"
                )
            seen.add(name)
        if names:
            found[alias] = tuple(names)
    return found


def _near_cache(raw: Any, cache_alias: str | None) -> NearCacheSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigurationError(
            f"SCHEMALESS['NEAR_CACHE'] must be None or a dict, not {raw!r}; keys: "
            f"{sorted(NEAR_DEFAULTS)}"
        )
    unknown = sorted(set(raw) - set(NEAR_DEFAULTS))
    if unknown:
        raise ConfigurationError(
            f"unknown SCHEMALESS['NEAR_CACHE'] keys {unknown}; known keys: {sorted(NEAR_DEFAULTS)}"
        )
    if cache_alias is None:
        raise ConfigurationError(
            "SCHEMALESS['NEAR_CACHE'] is set but SCHEMALESS['CACHE'] is None: the near cache "
            "keeps the entity cache's hits, so it needs one"
        )
    near = {**NEAR_DEFAULTS, **raw}
    for key, rule in NEAR_RULES.items():
        rule.check(f"SCHEMALESS['NEAR_CACHE'][{key!r}]", near[key])
    entries, drop = near["MAX_ENTRIES"], near["DROP_TIMEOUT"]
    return NearCacheSettings(max_entries=entries, drop_timeout=float(drop))


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
    )


def bucket_aliases(shards: Any, buckets: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Resolve the SHARDS setting to (aliases, alias of each bucket)."""
    RULES["BUCKETS"].check("SCHEMALESS['BUCKETS']", buckets)
    if shards is None:
        replicas = _replica_aliases(_user_settings().get("REPLICAS"))
        shards = [alias for alias in settings.DATABASES if alias not in ("default", *replicas)]
    if isinstance(shards, str):
        raise ConfigurationError("SCHEMALESS['SHARDS'] must be a list or dict of aliases")
    if not shards:
        raise ConfigurationError(
            "no shard databases: add aliases besides 'default' to DATABASES "
            "(SHARD_DATABASE_URLS) or list them in SCHEMALESS['SHARDS']"
        )
    if isinstance(shards, dict):
        owner: list[str | None] = [None] * buckets
        for alias, spec in shards.items():
            for number in _parse_ranges(alias, spec, buckets):
                if owner[number] is not None:
                    raise ConfigurationError(
                        f"bucket {number} is given to both {owner[number]!r} and {alias!r}"
                    )
                owner[number] = alias
        missing = [n for n, alias in enumerate(owner) if alias is None]
        if missing:
            raise ConfigurationError(
                f"{len(missing)} buckets have no shard (first: {missing[0]}); "
                f"SCHEMALESS['SHARDS'] must cover 0-{buckets - 1}"
            )
        return tuple(shards), tuple(owner)  # type: ignore[arg-type]
    aliases = tuple(shards)
    if len(set(aliases)) != len(aliases):
        raise ConfigurationError(f"SCHEMALESS['SHARDS'] lists an alias twice: {list(aliases)}")
    if len(aliases) > buckets:
        raise ConfigurationError("more shards than buckets")
    return aliases, tuple(aliases[n * len(aliases) // buckets] for n in range(buckets))


@cache
def get() -> StoreSettings:
    """The resolved settings (cached until a setting changes)."""
    raw = _user_settings()
    for key, rule in RULES.items():
        rule.check(f"SCHEMALESS[{key!r}]", raw[key])
    aliases, owners = bucket_aliases(raw["SHARDS"], raw["BUCKETS"])
    codec = raw["CODEC"]
    if isinstance(codec, str):
        try:
            codec = import_string(codec)()
        except ImportError as exc:
            raise ConfigurationError(f"SCHEMALESS['CODEC']: cannot import {codec!r}") from exc
    cache_alias = raw["CACHE"]
    if cache_alias is not None and cache_alias not in settings.CACHES:
        raise ConfigurationError(
            f"SCHEMALESS['CACHE'] names {cache_alias!r}, which is not in CACHES "
            f"({sorted(settings.CACHES)}); or set it to None for no entity cache"
        )
    return StoreSettings(
        shards=aliases,
        buckets=raw["BUCKETS"],
        bucket_aliases=owners,
        codec=codec,
        index_module=raw["INDEX_MODULE"],
        max_body_bytes=raw["MAX_BODY_BYTES"],
        write_retries=raw["WRITE_RETRIES"],
        receipt_retention=float(raw["RECEIPT_RETENTION"]),
        receipt_wait=float(raw["RECEIPT_WAIT"]),
        fetch_batch=raw["FETCH_BATCH"],
        history=raw["HISTORY"],
        feed_gap_grace=float(raw["FEED_GAP_GRACE"]),
        map_max_age=float(raw["MAP_MAX_AGE"]),
        move_wait=float(raw["MOVE_WAIT"]),
        cache=cache_alias,
        cache_timeout=raw["CACHE_TIMEOUT"],
        near_cache=_near_cache(raw["NEAR_CACHE"], cache_alias),
        replicas=_replicas(raw["REPLICAS"], aliases),
        read_from_replicas=raw["READ_FROM_REPLICAS"],
        replica_max_lag=float(raw["REPLICA_MAX_LAG"]),
        replica_wait=float(raw["REPLICA_WAIT"]),
        replica_check_interval=float(raw["REPLICA_CHECK_INTERVAL"]),
        raw=raw,
    )


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("SCHEMALESS", "DATABASES", "CACHES"):
        get.cache_clear()
