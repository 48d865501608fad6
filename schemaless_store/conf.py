"""The ``SCHEMALESS`` settings dict, merged with defaults and read through one cached object.

The cache is cleared on Django's ``setting_changed`` signal, so ``override_settings`` works.
Validation with readable messages lives in :mod:`schemaless_store.checks`; this module only
resolves values and raises :class:`ConfigurationError` when it cannot.
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

from .codec import Codec
from .exceptions import ConfigurationError

DEFAULTS: dict[str, Any] = {
    # Database aliases that hold entities and index tables. A list spreads the buckets evenly in
    # contiguous ranges; a dict maps each alias to bucket ranges ("0-2047" or [0, 2047]).
    # None: every alias in DATABASES except "default".
    "SHARDS": None,
    # Logical buckets. Changing it rehashes everything: pick it once, large (moving buckets
    # between servers later only edits SHARDS).
    "BUCKETS": 4096,
    "CODEC": "schemaless_store.codec.MsgpackCodec",
    # Submodule of each installed app that declares Index instances.
    "INDEX_MODULE": "indexes",
    # MEDIUMBLOB holds 16 MiB - 1 bytes; the server's max_allowed_packet must exceed this.
    "MAX_BODY_BYTES": 16 * 1024 * 1024 - 1,
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

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


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
    entries, drop = near["MAX_ENTRIES"], near["DROP_TIMEOUT"]
    if isinstance(entries, bool) or not isinstance(entries, int) or entries < 1:
        raise ConfigurationError(
            f"SCHEMALESS['NEAR_CACHE']['MAX_ENTRIES'] must be a whole number >= 1, not {entries!r}"
        )
    if isinstance(drop, bool) or not isinstance(drop, int | float) or not drop >= 0.01:
        raise ConfigurationError(
            "SCHEMALESS['NEAR_CACHE']['DROP_TIMEOUT'] must be a number of seconds >= 0.01, "
            f"not {drop!r}"
        )
    return NearCacheSettings(max_entries=entries, drop_timeout=float(drop))


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
    )


def bucket_aliases(shards: Any, buckets: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Resolve the SHARDS setting to (aliases, alias of each bucket)."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise ConfigurationError(f"SCHEMALESS['BUCKETS'] must be a positive int, not {buckets!r}")
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


def _seconds(raw: dict[str, Any], key: str) -> float:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigurationError(
            f"SCHEMALESS[{key!r}] must be a number of seconds >= 0, not {value!r}"
        )
    return float(value)


@cache
def get() -> StoreSettings:
    """The resolved settings (cached until a setting changes)."""
    raw = _user_settings()
    aliases, owners = bucket_aliases(raw["SHARDS"], raw["BUCKETS"])
    codec = raw["CODEC"]
    if isinstance(codec, str):
        try:
            codec = import_string(codec)()
        except ImportError as exc:
            raise ConfigurationError(f"SCHEMALESS['CODEC']: cannot import {codec!r}") from exc
    if not isinstance(raw["HISTORY"], bool):
        raise ConfigurationError(
            f"SCHEMALESS['HISTORY'] must be True or False, not {raw['HISTORY']!r}"
        )
    grace = raw["FEED_GAP_GRACE"]
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise ConfigurationError(
            f"SCHEMALESS['FEED_GAP_GRACE'] must be a number of seconds >= 0, not {grace!r}"
        )
    seconds = {key: _seconds(raw, key) for key in ("MAP_MAX_AGE", "MOVE_WAIT")}
    retention = raw["RECEIPT_RETENTION"]
    if isinstance(retention, bool) or not isinstance(retention, int | float) or not retention >= 60:
        raise ConfigurationError(
            "SCHEMALESS['RECEIPT_RETENTION'] must be a number of seconds >= 60 (a retry of a "
            f"write asks for its receipt after its commit), not {retention!r}"
        )
    seconds["RECEIPT_WAIT"] = _seconds(raw, "RECEIPT_WAIT")
    cache_alias = raw["CACHE"]
    if cache_alias is not None and cache_alias not in settings.CACHES:
        raise ConfigurationError(
            f"SCHEMALESS['CACHE'] names {cache_alias!r}, which is not in CACHES "
            f"({sorted(settings.CACHES)}); or set it to None for no entity cache"
        )
    cache_timeout = raw["CACHE_TIMEOUT"]
    if isinstance(cache_timeout, bool) or not isinstance(cache_timeout, int) or cache_timeout < 1:
        raise ConfigurationError(
            f"SCHEMALESS['CACHE_TIMEOUT'] must be a whole number of seconds >= 1, "
            f"not {cache_timeout!r}"
        )
    if not isinstance(raw["READ_FROM_REPLICAS"], bool):
        raise ConfigurationError(
            "SCHEMALESS['READ_FROM_REPLICAS'] must be True or False, "
            f"not {raw['READ_FROM_REPLICAS']!r}"
        )
    for key in ("REPLICA_MAX_LAG", "REPLICA_WAIT", "REPLICA_CHECK_INTERVAL"):
        seconds[key] = _seconds(raw, key)
    return StoreSettings(
        shards=aliases,
        buckets=raw["BUCKETS"],
        bucket_aliases=owners,
        codec=codec,
        index_module=raw["INDEX_MODULE"],
        max_body_bytes=int(raw["MAX_BODY_BYTES"]),
        write_retries=int(raw["WRITE_RETRIES"]),
        receipt_retention=float(retention),
        receipt_wait=seconds["RECEIPT_WAIT"],
        fetch_batch=int(raw["FETCH_BATCH"]),
        history=bool(raw["HISTORY"]),
        feed_gap_grace=float(raw["FEED_GAP_GRACE"]),
        map_max_age=seconds["MAP_MAX_AGE"],
        move_wait=seconds["MOVE_WAIT"],
        cache=cache_alias,
        cache_timeout=cache_timeout,
        near_cache=_near_cache(raw["NEAR_CACHE"], cache_alias),
        replicas=_replicas(raw["REPLICAS"], aliases),
        read_from_replicas=raw["READ_FROM_REPLICAS"],
        replica_max_lag=seconds["REPLICA_MAX_LAG"],
        replica_wait=seconds["REPLICA_WAIT"],
        replica_check_interval=seconds["REPLICA_CHECK_INTERVAL"],
        raw=raw,
    )


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("SCHEMALESS", "DATABASES", "CACHES"):
        get.cache_clear()
