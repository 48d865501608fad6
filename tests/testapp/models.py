"""An ordinary Django model on ``default``, as a team keeps data before it moves to the store:
``importentities --from-model testapp.LegacyPost`` is tested on it."""

from __future__ import annotations

import uuid

from django.db import models


class LegacyPost(models.Model):
    uuid = models.UUIDField(default=uuid.uuid4, unique=True)
    data = models.JSONField(default=dict, null=True, blank=True)
    title = models.CharField(max_length=100, blank=True)
    score = models.IntegerField(null=True, blank=True)
    price = models.DecimalField(max_digits=8, decimal_places=2, null=True, blank=True)
    published = models.DateTimeField(null=True, blank=True)
    # No database constraint: the app has no migrations, so its table is created before
    # auth_user exists (MariaDB refuses a foreign key to a table not yet there).
    author = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False
    )

    def __str__(self) -> str:
        return self.title
