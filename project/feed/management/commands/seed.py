"""``manage.py seed``: realistic users, entries, likes and comments, written with ``bulk_put``.

By default 20 users and 300 entries with their likes and comments (about 1,400 entities);
``--entities N`` writes exactly N entities (N/50 users, the rest entries with their likes and
comments) for benchmarks, streamed in batches so a million never sits in memory. Re-running adds
more; ``--if-empty`` seeds only a store without feed users (what ``scripts/demo.sh`` runs).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Iterable, Iterator
from typing import Any

import factory.random
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from schemaless_store.exceptions import UniqueViolation
from schemaless_store.management.progress import progress_stream
from schemaless_store.models import Entity

from ...factories import CommentFactory, EntryFactory, LikeFactory, UserFactory
from ...models import User

# Averages per entry: most get a few likes and a comment, a few get many (exponential counts).
MEAN_LIKES = 2.5
MEAN_COMMENTS = 1.2
USERS_PER_ENTITY = 1 / 50
PLURALS = {"user": "users", "entry": "entries", "like": "likes", "comment": "comments"}


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number (0 or more), not {text!r}")
    return value


def positive(text: str) -> int:
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text!r}")
    return value


class Command(BaseCommand):
    help = (
        "Create realistic feed data (users, entries, likes, comments) with factory-boy and "
        "Entity.objects.bulk_put, with a progress bar. Default: 20 users and 300 entries with "
        "their likes and comments; --entities N for exactly N entities."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--users", type=count, default=20, help="Users (default 20).")
        parser.add_argument(
            "--entries",
            type=count,
            default=300,
            help="Entries (default 300), each with likes and comments.",
        )
        parser.add_argument(
            "--entities",
            type=positive,
            metavar="N",
            help="Exactly N entities in all, for benchmarks (overrides --users and --entries): "
            "N/50 users, the rest entries with their likes and comments.",
        )
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="Do nothing if the store already has feed users (so re-running a demo does not "
            "pile up data).",
        )
        parser.add_argument(
            "--batch-size", type=positive, default=1000, help="Entities per bulk_put (1000)."
        )
        parser.add_argument("--seed", type=int, help="Random seed, for the same data on every run.")

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        users = User.objects.filter_index().order_by("username")
        if options["if_empty"] and users.exists():
            if verbosity:
                self.stdout.write("The store already has feed users: nothing seeded (--if-empty).")
            return
        if options["seed"] is not None:
            factory.random.reseed_random(options["seed"])
        seeder = Seeder(batch_size=options["batch_size"])
        total = options["entities"]
        if total is not None:
            n_users = min(total, max(2, int(total * USERS_PER_ENTITY)))
            users = [UserFactory() for _ in range(n_users)]
            items: Iterable[dict[str, Any]] = itertools.islice(
                activity(users, entries=None), total - n_users
            )
        else:
            if options["entries"] and not options["users"]:
                raise CommandError("entries need authors: give --users 1 or more")
            users = [UserFactory() for _ in range(options["users"])]
            items = list(activity(users, entries=options["entries"]))
            total = len(users) + len(items)
        started = time.monotonic()
        with tqdm(
            total=total,
            unit=" entities",
            disable=verbosity == 0,
            file=progress_stream(self),
            desc="seed",
        ) as bar:
            seeder.put_users(users, bar)
            seeder.put(items, bar)
        if verbosity:
            elapsed = time.monotonic() - started
            counts = ", ".join(
                f"{n} {PLURALS[kind] if n != 1 else kind}" for kind, n in seeder.written.items()
            )
            self.stdout.write(
                self.style.SUCCESS(
                    f"Seeded {sum(seeder.written.values())} entities ({counts}) in {elapsed:.1f}s."
                )
            )


def activity(users: list[dict[str, Any]], entries: int | None) -> Iterator[dict[str, Any]]:
    """Entries by ``users``, each followed by its likes and comments; ``entries=None``: endless.

    A few users write most entries (weights 1/rank), as on any real site.
    """
    if not users:
        return
    rng = factory.random.randgen
    weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(users))))
    produced = 0
    while entries is None or produced < entries:
        (author,) = rng.choices(users, cum_weights=weights)
        entry = EntryFactory(user=author)
        produced += 1
        yield entry
        likes = min(len(users), int(rng.expovariate(1 / MEAN_LIKES)))
        for liker in rng.sample(users, likes):
            yield LikeFactory(entry=entry, user=liker)
        for _ in range(int(rng.expovariate(1 / MEAN_COMMENTS))):
            yield CommentFactory(entry=entry, user=rng.choice(users))


class Seeder:
    """Writes dicts with ``bulk_put`` in batches and counts them by kind."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.written: dict[str, int] = dict.fromkeys(PLURALS, 0)  # by kind, in PLURALS' order

    def put(self, items: Iterable[dict[str, Any]], bar: tqdm) -> None:
        iterator = iter(items)
        while batch := list(itertools.islice(iterator, self.batch_size)):
            Entity.objects.bulk_put(batch, batch_size=self.batch_size)
            self._count(batch, bar)

    def put_users(self, users: list[dict[str, Any]], bar: tqdm) -> None:
        """Users in batches; a batch that hits a taken username or email (an earlier run, a
        sign-up) is redone one by one, renaming only the users that collide."""
        for start in range(0, len(users), self.batch_size):
            batch = users[start : start + self.batch_size]
            try:
                Entity.objects.bulk_put(batch, batch_size=self.batch_size)
            except UniqueViolation:
                for user in batch:
                    self._put_renaming(user)
            self._count(batch, bar)

    def _put_renaming(self, user: dict[str, Any]) -> None:
        rng = factory.random.randgen
        base = user["username"][:22]
        for _attempt in range(20):
            try:
                # bulk_put inserts or replaces: a user the failed batch did write is fine too.
                Entity.objects.bulk_put([user])
                return
            except UniqueViolation:
                user["username"] = f"{base}_{rng.randrange(10**6)}"
                user["email"] = f"{user['username']}@example.com"
        raise CommandError(f"could not find a free username for {base!r}")

    def _count(self, batch: list[dict[str, Any]], bar: tqdm) -> None:
        for item in batch:
            self.written[item["kind"]] += 1
        bar.update(len(batch))
