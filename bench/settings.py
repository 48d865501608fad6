"""Django settings for a benchmark run.

``bench.run`` starts two throwaway MariaDB servers and exports their URLs before Django is set
up; these settings read them back from the environment so that child processes (the cleaner,
``manage.py``-style commands) see the very same databases:

- ``BENCH_META_URL``: the metadata database (``default``), on the first server;
- ``BENCH_SHARD_URLS``: comma-separated, one per shard (``shard_0`` on the first server,
  ``shard_1`` on the second), exactly as ``tests/settings.py`` lays them out;
- ``BENCH_PEER_URL``: the single-server peer (a table with a JSON column), on the first server;
- ``BENCH_IMPORT_URLS``: comma-separated, the backup leg's two empty target stores of two shards
  each (``import_a_0``, ``import_a_1``, ``import_b_0``, ``import_b_1``), not shards of the
  store: the leg points ``SCHEMALESS["SHARDS"]`` at them;
- ``BENCH_SHARD_MAP``: a JSON ``SHARDS`` dict (``bench.move``: shard_2 with no buckets;
  ``bench.run --servers 1``: every bucket on shard_0, none on shard_1's server);
- ``BENCH_CACHE_URL``: a throwaway Redis server, the ``entities`` cache of the cache leg (which
  turns ``SCHEMALESS["CACHE"]`` on around its own contenders; every other leg runs uncached);
- ``BENCH_REPLICA_URLS``: ``shard_0=mysql://...`` entries, read replicas (``bench.replicas``);
- ``BENCH_CODEC``: ``json`` to store JSON bodies (``JsonCodec``; ``bench.run --codec json``),
  else MessagePack (the default codec);
- ``BENCH_SHARDS``: comma-separated aliases to use as the shards instead of ``shard_0`` and
  ``shard_1`` (the backup leg's ``importentities`` child process).
"""

from __future__ import annotations

import json
import os

from schemaless_store.config.dburls import database_from_url, databases_from_urls

_TIMEOUTS = "connect_timeout=5&read_timeout=600&write_timeout=600"


def _with_timeouts(url: str) -> str:
    # ALTER TABLE ... ALGORITHM=COPY and the unindexed JSON scans at 1M rows outlast the
    # store's default 30 s read timeout.
    return url if "?" in url else f"{url}?{_TIMEOUTS}"


DATABASES = databases_from_urls(
    _with_timeouts(os.environ["BENCH_META_URL"]),
    [_with_timeouts(url) for url in os.environ["BENCH_SHARD_URLS"].split(",")],
)
DATABASES["peer"] = database_from_url(_with_timeouts(os.environ["BENCH_PEER_URL"]))
for _alias, _url in zip(
    ("import_a_0", "import_a_1", "import_b_0", "import_b_1"),
    [url for url in os.environ.get("BENCH_IMPORT_URLS", "").split(",") if url],
    strict=False,
):
    DATABASES[_alias] = database_from_url(_with_timeouts(_url))
# The benchmark is a warm worker: its connections persist, as a production site's do
# (docs/deployment.md: CONN_MAX_AGE=60). Its main thread serves no request, so Django keeps its
# connections whatever the setting; the scatter threads follow CONN_MAX_AGE (query/pool.py) and
# with 0 would reconnect on every scatter. BENCH_CONN_MAX_AGE=0 prices that.
_age = os.environ.get("BENCH_CONN_MAX_AGE", "none")
for _database in DATABASES.values():
    _database["CONN_MAX_AGE"] = None if _age == "none" else int(_age)

DATABASE_ROUTERS = [
    "schemaless_store.router.ShardRouter",
    "bench.benchapp.router.PeerRouter",
]
# Shards are named explicitly: "peer" is a database of its own, not a shard.
SCHEMALESS = {
    "BUCKETS": 4096,
    # BENCH_SHARDS first: the backup leg's import child names other databases as the shards,
    # also in a run with BENCH_SHARD_MAP (bench.run --servers 1).
    "SHARDS": (
        os.environ["BENCH_SHARDS"].split(",")
        if os.environ.get("BENCH_SHARDS")
        else json.loads(os.environ["BENCH_SHARD_MAP"])
        if os.environ.get("BENCH_SHARD_MAP")
        else ["shard_0", "shard_1"]
    ),
    # Receipts outlive every retry (check schemaless.E010): with the long read timeout above a
    # retry may ask for its receipt up to ~1 h after its commit.
    "RECEIPT_RETENTION": 7200,
}

if os.environ.get("BENCH_CODEC") == "json":
    SCHEMALESS["CODEC"] = "schemaless_store.values.codec.JsonCodec"

if os.environ.get("BENCH_CACHE_URL"):
    from schemaless_store.cache.backend import cache_from_url

    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "entities": cache_from_url(os.environ["BENCH_CACHE_URL"]),
    }

if os.environ.get("BENCH_REPLICA_URLS"):  # bench.replicas: a GTID replica of each shard
    from schemaless_store.config.dburls import replicas_from_urls

    _replicas, SCHEMALESS["REPLICAS"] = replicas_from_urls(
        os.environ["BENCH_REPLICA_URLS"].split(",")
    )
    DATABASES.update(_replicas)

INSTALLED_APPS = ["schemaless_store", "bench.benchapp"]
SECRET_KEY = "bench-only"
DEBUG = False  # DEBUG=True would record every query and skew the numbers
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING_CONFIG = None
