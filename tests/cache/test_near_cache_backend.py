"""Which entity cache can carry the near cache: the system check (``schemaless.E009``) and the
near cache as it is built ask one predicate, ``cache.backend.carries_near_cache``, so they
agree on every backend (the check compared the ``BACKEND`` string, and refused a subclass of
``EntityRedisCache`` that the near cache runs on). A real ``redis-server`` on both backends."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from schemaless_store import checks
from schemaless_store.cache import entity_cache, near_cache
from schemaless_store.cache.backend import EntityRedisCache
from schemaless_store.exceptions import ConfigurationError
from tests.cache.test_near_cache import redis_server


class SiteEntityCache(EntityRedisCache):
    """A project's own subclass of the entity cache's backend (e.g. to add metrics)."""


@pytest.mark.parametrize(
    ("backend", "carries"),
    [
        ("schemaless_store.cache.backend.EntityRedisCache", True),
        (f"{__name__}.SiteEntityCache", True),
        ("django.core.cache.backends.redis.RedisCache", False),
        ("django.core.cache.backends.locmem.LocMemCache", False),
    ],
)
def test_the_check_and_the_near_cache_agree_on_the_backend(backend, carries):
    config = {**redis_server().cache_config(), "BACKEND": backend}
    with override_settings(
        CACHES={**settings.CACHES, "entities": config},
        SCHEMALESS={**settings.SCHEMALESS, "CACHE": "entities", "NEAR_CACHE": {}},
    ):
        entity_cache.resume()
        flagged = "schemaless.E009" in [m.id for m in checks.check_settings()]
        try:
            through = entity_cache.lookup()
            built = through is not None and through.near is not None
        except ConfigurationError as exc:
            assert "needs the entity cache to be an EntityRedisCache" in str(exc)
            built = False
        finally:
            near_cache.shut()
    assert (flagged, built) == (not carries, carries)


def test_a_backend_that_cannot_be_imported_is_flagged():
    config = {**redis_server().cache_config(), "BACKEND": "no.such.Backend"}
    with override_settings(
        CACHES={**settings.CACHES, "entities": config},
        SCHEMALESS={**settings.SCHEMALESS, "CACHE": "entities", "NEAR_CACHE": {}},
    ):
        assert "schemaless.E009" in [m.id for m in checks.check_settings()]
