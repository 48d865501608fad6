"""System checks for the store's configuration; IDs are documented in ``docs/checks.md``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections
from django.utils.module_loading import import_string

from .cache import backend as cache_backend
from .config import conf, server_support
from .config.indexes import registry
from .exceptions import ConfigurationError
from .guards import fence
from .sql import sessions
from .tables import clustering
from .topology import bucket_map

DOCS = "see docs/checks.md"


@register(Tags.database, Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    errors: list[Any] = []
    try:
        resolved = conf.get()
    except ConfigurationError as exc:
        return [Error(str(exc), hint=DOCS, id="schemaless.E001")]
    for alias in resolved.shards:
        if alias not in settings.DATABASES:
            errors.append(
                Error(
                    f"shard alias {alias!r} is not in DATABASES",
                    hint="define it (SHARD_DATABASE_URLS) or remove it from "
                    f"SCHEMALESS['SHARDS']; {DOCS}",
                    id="schemaless.E002",
                )
            )
        elif alias == "default":
            errors.append(
                Error(
                    "'default' cannot be a shard: it holds only metadata",
                    hint=DOCS,
                    id="schemaless.E003",
                )
            )
        else:
            db = settings.DATABASES[alias]
            if db.get("ENGINE", "").endswith("mysql"):
                charset = db.get("OPTIONS", {}).get("charset")
                if charset != "utf8mb4":
                    errors.append(
                        Warning(
                            f"shard {alias!r} connects with charset {charset!r}, not utf8mb4",
                            hint=f"4-byte characters would be mangled; {DOCS}",
                            id="schemaless.W001",
                        )
                    )
    errors.extend(_cache_problems(resolved.cache, near=resolved.near_cache is not None))
    routers = [
        r if isinstance(r, str) else type(r).__module__ + "." + type(r).__name__
        for r in settings.DATABASE_ROUTERS
    ]
    if "schemaless_store.router.ShardRouter" not in routers:
        errors.append(
            Error(
                "schemaless_store.router.ShardRouter is not in DATABASE_ROUTERS",
                hint=f"without it, migrate puts entities on 'default'; {DOCS}",
                id="schemaless.E004",
            )
        )
    return errors


PER_PROCESS_CACHES = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)


def _backend_class(path: str) -> type | None:
    """The class a ``CACHES`` ``BACKEND`` names, or None when it cannot be imported (Django's
    cache handler then refuses it with its own error)."""
    try:
        found = import_string(path)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


def _cache_problems(alias: str | None, near: bool = False) -> list[Any]:
    """What is wrong with the entity cache's alias in ``CACHES`` (docs/cache.md)."""
    if alias is None:
        return []
    config = settings.CACHES[alias]
    backend = config.get("BACKEND", "")
    problems: list[Any] = []
    if near and not cache_backend.carries_near_cache(_backend_class(backend)):
        problems.append(
            Error(
                f"SCHEMALESS['NEAR_CACHE'] is on but the entity cache {alias!r} is a "
                f"{backend.rsplit('.', 1)[-1]}: the near cache tracks the entity cache's "
                "Redis keys through an EntityRedisCache",
                hint=f"configure the entity cache with cache.backend.cache_from_url(); {DOCS}",
                id="schemaless.E009",
            )
        )
    if backend in PER_PROCESS_CACHES:
        problems.append(
            Warning(
                f"the entity cache {alias!r} is a {backend.rsplit('.', 1)[-1]}: each process "
                "has its own, which other processes' writes do not invalidate",
                hint=f"use a shared cache (RedisCache) when more than one process writes; {DOCS}",
                id="schemaless.W003",
            )
        )
    if backend.endswith("RedisCache"):
        location = config.get("LOCATION", "")
        servers = location.split(",") if isinstance(location, str) else list(location)
        if len(servers) > 1:
            problems.append(
                Error(
                    f"the entity cache {alias!r} lists {len(servers)} Redis servers: Django "
                    "reads from the others, which may not have applied an invalidation yet",
                    hint=f"give the entity cache one Redis server (a primary); {DOCS}",
                    id="schemaless.E006",
                )
            )
        serializer = config.get("OPTIONS", {}).get("serializer")
        if serializer != "schemaless_store.cache.backend.EntityCacheSerializer":
            problems.append(
                Warning(
                    f"the entity cache {alias!r} uses Django's default serializer, which "
                    "rebuilds any Python object it reads: whoever can write to that Redis could "
                    "make a process run code",
                    hint='set OPTIONS["serializer"] to '
                    f'"schemaless_store.cache.backend.EntityCacheSerializer"; {DOCS}',
                    id="schemaless.W004",
                )
            )
    return problems


@register(Tags.database)
def check_indexes(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    errors: list[Any] = []
    for index in registry.all():
        for problem in index.errors:
            errors.append(
                Error(
                    f"index {index.name!r} ({index.module or 'registered by hand'}): {problem}",
                    hint=DOCS,
                    obj=index,
                    id="schemaless.E101",
                )
            )
    for first, second in registry.duplicates:
        errors.append(
            Error(
                f"index table {first.name!r} is declared twice "
                f"({first.module or '?'} and {second.module or '?'})",
                hint=f"each index needs its own table name; {DOCS}",
                id="schemaless.E102",
            )
        )
    return errors


@register(Tags.database)
def check_shard_map(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """The stored shard map against ``SCHEMALESS["SHARDS"]`` (run with ``--database``, as
    ``migrate`` does): the stored one is in force; a different setting only misleads."""
    if not databases or "default" not in databases:
        return []
    try:
        stored = bucket_map.differs_from_settings()
    except ConfigurationError as exc:
        return [Error(str(exc), hint=DOCS, id="schemaless.E005")]
    except DatabaseError:
        return []  # not migrated yet: the setting seeds the map
    if stored is None:
        return []
    return [
        Warning(
            f"SCHEMALESS['SHARDS'] differs from the stored shard map (version {stored.version}), "
            "which is the one in force; the setting only seeds a new store",
            hint=f"see the map with manage.py shardmap; docs/resharding.md; {DOCS}",
            id="schemaless.W002",
        )
    ]


@register(Tags.database, Tags.compatibility)
def check_servers(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """Every MySQL-backed database of the store (the shards, ``default`` and the replicas) is a
    MariaDB server at least as new as the oldest tested,
    :data:`~.config.server_support.OLDEST_MARIADB` (``schemaless.E007``).

    As Django's own database checks, it runs only for the aliases named: ``manage.py check
    --database ALIAS``, ``migrate`` (the alias it migrates) and ``migrateall`` (every one, before
    it migrates any). Any other command that runs the checks (a plain ``check``,
    ``runcleaner``, ``movebuckets``, ``runserver``) connects to no database for it: a store
    connection refuses an unsupported server as it opens (:mod:`.config.server_support`). A named
    server that cannot be reached raises, as in Django's checks. SQLite aliases are not
    connected. The version is read on the alias's connection (Django's MySQL backend reads it
    once per connection object)."""
    if not databases:
        return []
    try:
        store = server_support.store_aliases()
    except ConfigurationError:
        return []  # schemaless.E001 says what is wrong
    errors: list[Any] = []
    for alias in sorted(store & set(databases)):
        connection = connections[alias]
        if connection.vendor != "mysql":
            continue
        try:
            mariadb = connection.mysql_is_mariadb  # type: ignore[attr-defined]
            version = tuple(connection.mysql_version)  # type: ignore[attr-defined]
            problem = server_support.refusal(alias, mariadb, version)
        except server_support.UnsupportedServer as refused:
            problem = refused.problem  # the connection refused it as it opened
        if problem is not None:
            errors.append(
                Error(problem, hint=f"{server_support.hint(alias)}; {DOCS}", id="schemaless.E007")
            )
    return errors


@register(Tags.database)
def check_fence_privileges(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Any]:
    """A MySQL shard's user must be able to see and end every other session on the shard's
    database, whatever user opened it: a move's fence does (docs/design.md#the-fence). Run
    with ``--database``, as ``migrate`` does."""
    errors = []
    for alias in conf.get().shards if databases else ():
        if alias not in databases or connections[alias].vendor != "mysql":
            continue
        try:
            refused = fence.kill_refused(alias)
        except DatabaseError:
            continue  # not reachable or not migrated: other checks and commands say so
        if refused is not None:
            errors.append(
                Error(
                    f"the database user of shard {alias!r} may not end the store's other "
                    f"connections, which a bucket move's fence must do, whatever user opened "
                    f"them ({refused})",
                    hint="GRANT PROCESS, CONNECTION ADMIN ON *.* TO the user (SUPER instead of "
                    "CONNECTION ADMIN before MariaDB 10.5.2), or run movebuckets as a user that "
                    "has them; docs/resharding.md#the-fence",
                    id="schemaless.E008",
                )
            )
    return errors


@register(Tags.database, deploy=True)
def check_debug(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """``manage.py check --deploy``: DEBUG costs the store on every statement (W005)."""
    if not settings.DEBUG:
        return []
    return [
        Warning(
            "DEBUG is True: Django records every statement the store sends (the store then "
            "uses Django's recording cursor), which costs client time on every operation, and "
            "keeps each connection's last 9,000 statements, bodies included, in memory",
            hint=f"set DEBUG = False in production (docs/performance.md); {DOCS}",
            id="schemaless.W005",
        )
    ]


@register(Tags.database)
def check_entities_layout(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Any]:
    """A MySQL shard whose ``entities`` is still clustered by ``added_id`` (W006): it serves,
    but a page costs one more B-tree descent per entity (docs/design.md#the-entities-table).
    Run with ``--database``, as ``migrate`` does."""
    if not databases:
        return []
    try:
        aliases = [a for a in conf.get().shards if a in databases and a in settings.DATABASES]
        seed = clustering.seed_layout_shards(aliases)
    except (ConfigurationError, DatabaseError):
        return []  # not configured or not reachable: other checks say so
    return [
        Warning(
            f"the entities table of shard {alias!r} is clustered by added_id (the seed layout): "
            "it serves, but reaching an entity from an index row costs one more B-tree descent "
            "than on a table clustered by id",
            hint=f"{clustering.COMMAND} --database {alias} converts it online; migrate does it "
            f"itself for a table of at most {clustering.AT_MIGRATE_MAX_ROWS:,} rows; "
            f"docs/upgrading.md#clustering-entities-by-id; {DOCS}",
            id="schemaless.W006",
        )
        for alias in seed
    ]


@register(Tags.database)
def check_receipt_retention(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Any]:
    """Receipts outlive every retry (docs/design.md#receipts): ``RECEIPT_RETENTION`` at least
    the longest a retry can take to read its receipt (E010); a MySQL shard without
    ``read_timeout`` waits for a lost answer without end (W007). With ``--database`` (as
    ``migrate`` runs it) the lock wait of each shard named is read from its server."""
    try:
        resolved = conf.get()
    except ConfigurationError:
        return []  # schemaless.E001 says what is wrong
    problems: list[Any] = []
    lock_waits: dict[str, float] = {}
    for alias in resolved.shards if databases else ():
        if alias not in databases or connections[alias].vendor != "mysql":
            continue
        try:
            with connections[alias].cursor() as cursor:
                lock_waits[alias] = sessions.lock_wait(cursor)
        except DatabaseError:
            continue  # not reachable: other checks and commands say so
    parts = conf.receipt_horizon_parts(resolved, settings.DATABASES, lock_waits)
    horizon = sum(seconds for _part, seconds in parts)
    if resolved.receipt_retention < horizon:
        spelled = " + ".join(f"{part} {seconds:g} s" for part, seconds in parts)
        problems.append(
            Error(
                f"SCHEMALESS['RECEIPT_RETENTION'] is {resolved.receipt_retention:g} s, but a "
                f"retry may ask for its receipt up to {horizon:g} s after its commit "
                f"({spelled}); a receipt removed before then turns that retry into "
                "OutcomeUnknown",
                hint=f"raise RECEIPT_RETENTION to at least {horizon:g}, or lower those "
                f"timeouts; {DOCS}",
                id="schemaless.E010",
            )
        )
    for alias in resolved.shards:
        db = settings.DATABASES.get(alias, {})
        if conf.speaks_mysql(db) and not db.get("OPTIONS", {}).get("read_timeout"):
            problems.append(
                Warning(
                    f"shard {alias!r} has no read_timeout: a write whose commit answer is "
                    "lost may wait for it without end, and a retry that comes after "
                    "RECEIPT_RETENTION raises OutcomeUnknown",
                    hint=f"set OPTIONS['read_timeout'] (dburls sets 30); {DOCS}",
                    id="schemaless.W007",
                )
            )
    return problems
