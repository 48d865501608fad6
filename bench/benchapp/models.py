"""The single-server peer: one table with a JSON body (created by :mod:`bench.peer`)."""

from __future__ import annotations

from django.db import models


class JsonEntity(models.Model):
    """What a user would pick instead of the store: a JSONField, queried with Django's ORM."""

    added_id = models.BigAutoField(primary_key=True)
    row_id = models.BinaryField(db_column="id", max_length=16)
    updated = models.DateTimeField()
    body = models.JSONField()

    class Meta:
        managed = False  # created by bench.peer, with generated columns the ORM cannot declare
        db_table = "json_entities"

    def __str__(self) -> str:
        return bytes(self.row_id).hex()
