"""The throwaway MariaDB servers keep all their files under their own temporary root."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from tests.support import STORE

pytestmark = [STORE, pytest.mark.mariadb_only]


def test_servers_use_their_own_tmpdir() -> None:
    for server, alias in zip(settings.MARIADB_SERVERS, ("shard_0", "shard_1"), strict=True):
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT @@tmpdir")
            tmpdir = Path(cursor.fetchone()[0])
        assert tmpdir == server.tmpdir
        assert tmpdir.is_dir()
        assert server.root in tmpdir.parents
        assert Path("/tmp") != tmpdir
