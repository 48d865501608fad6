"""Settings of the demo project.

Configuration comes from the environment (django-environ):

- ``DATABASE_URL``: the metadata database (``default``).
- ``SHARD_DATABASE_URLS``: comma-separated URLs, one per shard (``shard_0``, ``shard_1``...);
  semicolon-separated when one is a ``galera://`` URL listing its nodes.
- With neither set: the embedded default, SQLite files in ``SCHEMALESS_DATA_DIR`` (``./var``),
  two shards.
- ``SHARD_REPLICA_URLS``: comma-separated ``shard_0=mysql://...`` entries, one per read replica
  of a shard (docs/replicas.md); ``READ_FROM_REPLICAS=1`` reads them by default.
- ``ENTITY_CACHE_URL``: a Redis URL (``redis://host:6379/0``): ``get`` and ``get_many`` read
  entities through it (docs/cache.md). Unset: no entity cache (the embedded default).
- ``ENTITY_NEAR_CACHE=1`` (with ``ENTITY_CACHE_URL``): its hits served from process memory
  too (docs/cache.md#the-near-cache). Off by default.
- ``SCHEMALESS_HISTORY=0``: no entity history (on by default here: see its cost below).
- ``SHARD_LAYOUT``: ``SCHEMALESS["SHARDS"]`` as JSON, e.g. a third shard with no buckets yet,
  ``{"shard_0": "0-2047", "shard_1": "2048-4095", "shard_2": []}`` (the load test's).
- ``DJANGO_DEBUG=1``: Django's ``DEBUG`` (off by default).
"""

from __future__ import annotations

import json
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from schemaless_store.cache.backend import cache_from_url
from schemaless_store.config.dburls import databases_from_urls, embedded_urls, replicas_from_urls

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

DATA_DIR = Path(env("SCHEMALESS_DATA_DIR", default=str(BASE_DIR / "var")))
SECRET_KEY = env("SECRET_KEY", default="insecure-demo-key-change-me-for-any-real-deployment")
# Off unless asked for (DJANGO_DEBUG=1): Django's debug pages list the URL patterns and show
# settings and tracebacks. The demo's runserver serves static files anyway (--insecure).
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

_has_meta = "DATABASE_URL" in env.ENVIRON
_has_shards = "SHARD_DATABASE_URLS" in env.ENVIRON
if _has_meta != _has_shards:
    raise ImproperlyConfigured(
        "set both DATABASE_URL and SHARD_DATABASE_URLS (real servers), or neither (embedded SQLite)"
    )
if _has_meta:
    # Separated by semicolons instead when a URL holds commas (a galera:// URL's nodes).
    _shard_urls = env("SHARD_DATABASE_URLS")
    _shard_list = _shard_urls.split(";") if ";" in _shard_urls else env.list("SHARD_DATABASE_URLS")
    DATABASES = databases_from_urls(env("DATABASE_URL"), _shard_list)
else:
    _meta, _shards = embedded_urls(DATA_DIR, shards=2)
    DATABASES = databases_from_urls(_meta, _shards)
DATABASE_ROUTERS = ["schemaless_store.router.ShardRouter"]

SCHEMALESS = {
    "BUCKETS": 4096,
    # Every version of every entity is kept as a cell: entity.history(), the admin's Versions
    # page, entity changes in manage.py tailchanges (docs/cells.md). Its cost: every write
    # appends the version in its transaction. YCSB measured writes 1.6-2.1x slower when that
    # took two more round trips; on MariaDB it now travels with the COMMIT, no extra round
    # trip, a row and its read remain (docs/performance.md#ycsb, docs/design.md#round-trips).
    # The library's default is off; a site that needs no versions sets SCHEMALESS_HISTORY=0.
    "HISTORY": env.bool("SCHEMALESS_HISTORY", default=True),
}
if env("SHARD_LAYOUT", default=""):
    SCHEMALESS["SHARDS"] = json.loads(env("SHARD_LAYOUT"))
if env.list("SHARD_REPLICA_URLS", default=[]):
    _replica_databases, SCHEMALESS["REPLICAS"] = replicas_from_urls(env.list("SHARD_REPLICA_URLS"))
    DATABASES.update(_replica_databases)
    SCHEMALESS["READ_FROM_REPLICAS"] = env.bool("READ_FROM_REPLICAS", default=False)
if env("ENTITY_CACHE_URL", default=""):
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "entities": cache_from_url(env("ENTITY_CACHE_URL")),
    }
    SCHEMALESS["CACHE"] = "entities"
    if env.bool("ENTITY_NEAR_CACHE", default=False):
        SCHEMALESS["NEAR_CACHE"] = {}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "schemaless_store",
    "project.feed",
    "rest_framework",  # the feed's JSON API (project/feed/rest.py): the REST extra
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files from the app servers themselves, compressed and cached (docs/deployment.md).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # A page that needs a shard that is down answers a 503 page, not a 500 (docs/deployment.md).
    "schemaless_store.middleware.ShardUnavailablePage",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Reads from replicas see the user's own writes of earlier requests (docs/replicas.md);
    # without replicas it only passes the request on.
    "schemaless_store.middleware.ReadYourWrites",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# collectstatic gathers the admin's CSS and JavaScript here; WhiteNoise serves them from the
# app servers (project/production.py adds compressed, fingerprinted names).
STATIC_ROOT = env("STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "schemaless_store": {"handlers": ["console"], "level": "INFO"},
        # Tracebacks of server errors: Django prints them to the console only with DEBUG on.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
