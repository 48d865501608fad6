"""Metadata in the ``default`` database: index states, cleaner checkpoints and pass records."""

from __future__ import annotations

from django.db import models


class IndexState(models.Model):
    """Lifecycle of an index, kept in the metadata database (``default``)."""

    BUILDING = "building"
    READY = "ready"
    RETIRED = "retired"
    STATES = [(BUILDING, "building"), (READY, "ready"), (RETIRED, "retired")]

    name = models.CharField(max_length=64, primary_key=True)
    state = models.CharField(max_length=16, choices=STATES)
    properties = models.JSONField(default=list)
    shard_on = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)
    changed = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "index state"

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class CleanerCheckpoint(models.Model):
    """How far a backfill got on one (index, shard): resumes from ``last_added_id``."""

    index_name = models.CharField(max_length=64)
    shard = models.CharField(max_length=64)
    last_added_id = models.BigIntegerField(default=0)
    # The highest added_id when the backfill started: rows above it are maintained by writers.
    target_added_id = models.BigIntegerField(null=True)
    entities_done = models.BigIntegerField(default=0)
    entities_total = models.BigIntegerField(null=True)
    done = models.BooleanField(default=False)
    changed = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["index_name", "shard"], name="one_checkpoint_per_shard")
        ]

    def __str__(self) -> str:
        return f"{self.index_name}@{self.shard}: {self.last_added_id}"


class CleanerPass(models.Model):
    """One cleaner pass over one (index, shard), for the admin's index-health page."""

    KINDS = [("backfill", "backfill"), ("repair", "repair"), ("sweep", "sweep")]
    STATUSES = [
        ("running", "running"),
        ("done", "done"),
        ("interrupted", "interrupted"),
        ("failed", "failed"),
    ]

    index_name = models.CharField(max_length=64, db_index=True)
    shard = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=KINDS)
    status = models.CharField(max_length=16, choices=STATUSES, default="running")
    started = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)
    entities_scanned = models.BigIntegerField(default=0)
    rows_inserted = models.BigIntegerField(default=0)
    stale_removed = models.BigIntegerField(default=0)
    orphans_removed = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-started"]
        verbose_name_plural = "cleaner passes"

    def __str__(self) -> str:
        return f"{self.kind} of {self.index_name}@{self.shard} ({self.status})"


class ShardMap(models.Model):
    """One version of the bucket -> shard map; the highest version is the map in force.

    The first version is written by the first ``migrate`` from ``SCHEMALESS["SHARDS"]``; from
    then on the stored map is the truth (:mod:`schemaless_store.topology.bucket_map`) and each
    shard's own bucket table decides what it accepts (docs/resharding.md).
    """

    version = models.PositiveIntegerField(primary_key=True)
    buckets = models.PositiveIntegerField()
    # {alias: "0-1364,2000"}: every alias that is a shard, its buckets as ranges ("" for none).
    owners = models.JSONField()
    # [[low, high], ...]: buckets a move is copying; reads of them are confirmed by the shard.
    moving = models.JSONField(default=list)
    created = models.DateTimeField(auto_now_add=True)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-version"]
        verbose_name = "shard map version"

    def __str__(self) -> str:
        return f"shard map v{self.version}"


class BucketMove(models.Model):
    """One move of buckets to a shard (``manage.py movebuckets``): its phase and checkpoints,
    so a killed mover resumes, and its counts and times, for the operators."""

    PHASES = [
        ("copying", "copying"),
        ("catching up", "catching up"),
        ("fenced", "fenced"),
        ("flipped", "flipped"),
        ("held", "held"),  # writes escaped the fence: the sources' copies kept (--release)
        ("cleaning", "cleaning"),
        ("done", "done"),
        ("aborted", "aborted"),
        ("failed", "failed"),
    ]
    FINISHED = ("done", "aborted")

    target = models.CharField(max_length=64)
    buckets = models.JSONField()  # [[low, high], ...]
    sources = models.JSONField(default=dict)  # {alias: [[low, high], ...]}
    phase = models.CharField(max_length=16, choices=PHASES, default="copying")
    checkpoints = models.JSONField(default=dict)  # {"alias/table": last walk key}
    counts = models.JSONField(default=dict)  # rows copied, replayed, deleted, per table
    message = models.TextField(blank=True)
    started = models.DateTimeField(auto_now_add=True)
    changed = models.DateTimeField(auto_now=True)
    flipped = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    longest_pause = models.FloatField(null=True, blank=True)  # seconds fenced

    class Meta:
        ordering = ["-started"]
        verbose_name = "bucket move"
        verbose_name_plural = "shards and buckets"

    def __str__(self) -> str:
        return f"move #{self.pk} to {self.target} ({self.phase})"
