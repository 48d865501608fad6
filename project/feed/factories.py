"""factory-boy factories for the feed's entities, as property bags (dicts).

They build dicts, never write: ``manage.py seed`` hands them to ``Entity.objects.bulk_put`` in
batches. Pass the related dicts in (``EntryFactory(user=user_dict)``) so ids line up; a like's id
is derived from its entry and user (:meth:`project.feed.models.Like.id_for`), as the site does.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid

import factory
import factory.random

from .models import Like, now

# Seeded data spans the last 30 days, so the pages read like a feed that has been running a while.
SPAN_US = 30 * 24 * 3600 * 1_000_000


def _ago() -> dt.datetime:
    """A time in the last 30 days (to the microsecond)."""
    return now() - dt.timedelta(microseconds=factory.random.randgen.randrange(SPAN_US))


# A few links that many people share: the "who else shared this?" page has something to show.
POPULAR_LINKS = [
    "https://friendfeed.com/",
    "https://backchannel.org/blog/friendfeed-schemaless-mysql",
    "https://www.djangoproject.com/",
    "https://mariadb.org/",
    "https://en.wikipedia.org/wiki/Shard_(database_architecture)",
    "https://news.ycombinator.com/",
    "https://github.com/",
    "https://xkcd.com/327/",
]


def _uuid() -> uuid.UUID:
    # factory-boy's random, so `seed --seed N` (factory.random.reseed_random) is reproducible.
    return uuid.UUID(int=factory.random.randgen.getrandbits(128), version=4)


def _link(domain: str, path: str, n: int) -> str:
    rng = factory.random.randgen
    if rng.random() < 0.2:
        return rng.choice(POPULAR_LINKS)
    return f"https://{domain}/{path}/{n}"


def _username(first: str, last: str, n: int) -> str:
    return re.sub(r"[^a-z0-9_]", "", f"{first[:12]}{last[:1]}".lower()) + str(n)


class UserFactory(factory.DictFactory):
    """A user: a unique username (a sequence number keeps Faker's names apart), matching email."""

    class Params:
        first = factory.Faker("first_name")
        last = factory.Faker("last_name")

    id = factory.LazyFunction(_uuid)
    kind = "user"
    username = factory.LazyAttributeSequence(lambda o, n: _username(o.first, o.last, n))
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.com")
    name = factory.LazyAttribute(lambda o: f"{o.first} {o.last}")
    joined = factory.LazyFunction(_ago)


class EntryFactory(factory.DictFactory):
    """An entry by ``user`` (a user dict), published some time in the last 30 days."""

    class Meta:
        rename = {"user_ref": "user"}

    class Params:
        user = factory.SubFactory(UserFactory)
        domain = factory.Faker("domain_name")
        path = factory.Faker("uri_path", deep=2)

    id = factory.LazyFunction(_uuid)
    kind = "entry"
    # The reference, stored as the user's id under "user" (the name of the Params above).
    user_ref = factory.LazyAttribute(lambda o: o.user["id"])
    title = factory.Faker("sentence", nb_words=6)
    link = factory.LazyAttributeSequence(lambda o, n: _link(o.domain, o.path, n))
    published = factory.LazyFunction(_ago)


def _after(published: dt.datetime) -> dt.datetime:
    """A time after ``published`` and not in the future."""
    span = max(1, (now() - published) // dt.timedelta(microseconds=1))
    return published + dt.timedelta(microseconds=factory.random.randgen.randrange(span))


class LikeFactory(factory.DictFactory):
    """``user`` likes ``entry`` (both dicts); one like per (entry, user), like the site."""

    class Params:
        entry = factory.SubFactory(EntryFactory)
        user = factory.SubFactory(UserFactory)

    id = factory.LazyAttribute(lambda o: Like.id_for(o.entry["id"], o.user["id"]))
    kind = "like"
    entry_id = factory.LazyAttribute(lambda o: o.entry["id"])
    user_id = factory.LazyAttribute(lambda o: o.user["id"])
    created = factory.LazyAttribute(lambda o: _after(o.entry["published"]))


class CommentFactory(factory.DictFactory):
    """``user`` comments on ``entry`` (both dicts)."""

    class Params:
        entry = factory.SubFactory(EntryFactory)
        user = factory.SubFactory(UserFactory)

    id = factory.LazyFunction(_uuid)
    kind = "comment"
    entry_id = factory.LazyAttribute(lambda o: o.entry["id"])
    user_id = factory.LazyAttribute(lambda o: o.user["id"])
    body = factory.Faker("sentence", nb_words=12)
    created = factory.LazyAttribute(lambda o: _after(o.entry["published"]))
