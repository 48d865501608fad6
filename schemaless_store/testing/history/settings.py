"""Django settings of a history run's processes (the runner, its clients, its movers): the
databases and the bucket layout come from the environment, which :mod:`.servers` fills in
after starting the throwaway servers, so every process works on the very same store.

- ``SCHEMALESS_HISTORY_DATABASES``: a JSON ``DATABASES`` dict (``default`` and the shards);
- ``SCHEMALESS_HISTORY_SHARDS``: a JSON ``SCHEMALESS["SHARDS"]`` layout;
- ``SCHEMALESS_HISTORY_REDIS``: the Redis URL of the entity cache, with the near cache in front
  (left out: no cache).

Every write keeps its version (``HISTORY``): the clients read an entity's versions
(``history`` operations), which the checker holds to every acknowledged write.
"""

from __future__ import annotations

import json
import os

from schemaless_store.testing.history import variant

DATABASES = json.loads(os.environ["SCHEMALESS_HISTORY_DATABASES"])
for _database in DATABASES.values():
    # Persistent connections, as a deployment keeps them: a fault finds sessions mid-use and
    # idle; the clients close a broken one after each operation, as a request's end does.
    _database["CONN_MAX_AGE"] = 600
DATABASE_ROUTERS = ["schemaless_store.router.ShardRouter"]
SCHEMALESS = {
    "BUCKETS": 4096,
    "SHARDS": json.loads(os.environ["SCHEMALESS_HISTORY_SHARDS"]),
    # Maps read again often: a move waits for every process to see its mark (7 x this).
    "MAP_MAX_AGE": 0.1,
    # The registers' value is indexed, unless the run says --no-value-index, and the claims'
    # claim (``schemaless_store.testing.history.indexes``).
    "INDEX_MODULE": "testing.history.indexes",
    "HISTORY": True,
    "CODEC": variant.codec(),
}
if os.environ.get("SCHEMALESS_HISTORY_REDIS"):
    from schemaless_store.cache.backend import cache_from_url

    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "entities": cache_from_url(os.environ["SCHEMALESS_HISTORY_REDIS"]),
    }
    SCHEMALESS["CACHE"] = "entities"
    SCHEMALESS["NEAR_CACHE"] = {}
INSTALLED_APPS = ["schemaless_store"]
SECRET_KEY = "history-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING_CONFIG = None
