"""Test settings: the same suite runs on SQLite files or on two real MariaDB servers.

``SCHEMALESS_TEST_DB=sqlite`` (default): metadata and two shards as SQLite files in a temporary
directory. ``SCHEMALESS_TEST_DB=mariadb``: two throwaway ``mariadbd`` processes are started on
free ports (metadata and shard_0 on the first, shard_1 on the second) and stopped at exit. If
they cannot start, importing these settings fails, and so does the run.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from schemaless_store.config.dburls import database_from_url, databases_from_urls, embedded_urls

BACKEND = os.environ.get("SCHEMALESS_TEST_DB", "sqlite")
MARIADB_SERVERS: list = []
# SCHEMALESS_TEST_REPLICAS=1 (with mariadb): the shard servers write GTID binary logs and each
# has a replica, shard_N_replica_0 (tests/replicas/test_replicas.py; scripts/test.sh runs that
# group once).
REPLICATED = os.environ.get("SCHEMALESS_TEST_REPLICAS") == "1" and BACKEND == "mariadb"
REPLICA_SERVERS: list = []
# Set by tests that spawn processes (tests/support/child.py): the parent's DATABASES, test NAMEs
# included, so a child works on the same test databases instead of starting its own servers.
_PARENT_DATABASES = os.environ.get("SCHEMALESS_TEST_DATABASES")

if _PARENT_DATABASES:
    DATABASES = json.loads(_PARENT_DATABASES)
elif BACKEND == "mariadb":
    from schemaless_store.testing.mariadb import start_servers
    from schemaless_store.testing.replication import start_replica

    MARIADB_SERVERS = start_servers(2, binlog=REPLICATED)
    _first, _second = MARIADB_SERVERS
    _timeouts = {"connect_timeout": "5", "read_timeout": "60", "write_timeout": "60"}
    DATABASES = databases_from_urls(
        _first.url("meta", **_timeouts),
        [_first.url("shard0", **_timeouts), _second.url("shard1", **_timeouts)],
    )
    if REPLICATED:  # a GTID replica of each shard's server (tests/replicas/test_replicas.py)
        REPLICA_SERVERS = [start_replica(server) for server in MARIADB_SERVERS]
        for _number, _replica in enumerate(REPLICA_SERVERS):
            _alias = f"shard_{_number}_replica_0"
            # connect_timeout=1: a killed replica costs a read one second, then the primary.
            DATABASES[_alias] = database_from_url(
                _replica.url(f"shard{_number}", connect_timeout="1", read_timeout="10")
            )
            # The test database is made on the primary and replicated: the alias follows it.
            DATABASES[_alias]["TEST"] = {"MIRROR": f"shard_{_number}"}
elif BACKEND == "sqlite":
    _data = Path(tempfile.mkdtemp(prefix="schemaless-test-sqlite-"))
    DATABASES = databases_from_urls(*embedded_urls(_data, shards=2))
else:
    raise RuntimeError(f"SCHEMALESS_TEST_DB must be 'sqlite' or 'mariadb', not {BACKEND!r}")

DATABASE_ROUTERS = ["schemaless_store.router.ShardRouter"]
SCHEMALESS: dict = {"BUCKETS": 4096}
if REPLICATED or (_PARENT_DATABASES and "shard_0_replica_0" in DATABASES):
    SCHEMALESS["REPLICAS"] = {
        alias: [f"{alias}_replica_0"]
        for alias in ("shard_0", "shard_1")
        if f"{alias}_replica_0" in DATABASES
    }
if os.environ.get("SCHEMALESS_TEST_SHARDS"):  # a child of another layout (tests/support/grown.py)
    SCHEMALESS["SHARDS"] = json.loads(os.environ["SCHEMALESS_TEST_SHARDS"])
if os.environ.get("SCHEMALESS_TEST_CODEC") == "json":  # the store writes JSON bodies (issue 45)
    SCHEMALESS["CODEC"] = "schemaless_store.values.codec.JsonCodec"
if os.environ.get("SCHEMALESS_TEST_HISTORY"):  # every write keeps its version
    SCHEMALESS["HISTORY"] = True
if os.environ.get("SCHEMALESS_TEST_MAP_MAX_AGE"):  # its maps read again sooner: quicker moves
    SCHEMALESS["MAP_MAX_AGE"] = float(os.environ["SCHEMALESS_TEST_MAP_MAX_AGE"])

if os.environ.get("SCHEMALESS_TEST_CACHE"):  # a child of a test with the entity cache on
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "entities": json.loads(os.environ["SCHEMALESS_TEST_CACHE"]),
    }
    SCHEMALESS["CACHE"] = "entities"
if os.environ.get("SCHEMALESS_TEST_NEAR_CACHE"):  # ... and its near cache
    SCHEMALESS["NEAR_CACHE"] = json.loads(os.environ["SCHEMALESS_TEST_NEAR_CACHE"])

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "schemaless_store",
    "tests.testapp",
    "tests.kindsapp",
    "tests.facesapp",
    "rest_framework",
    "project.feed",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
