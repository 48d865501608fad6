"""Factories for the property bags the tests store."""

from __future__ import annotations

import datetime as dt
import uuid

import factory


class PostFactory(factory.DictFactory):
    """An entry as in the article: a user id in bytes, a title, a link, a publish time."""

    user_id = factory.LazyFunction(lambda: uuid.uuid4().bytes)
    title = factory.Faker("sentence", nb_words=5)
    link = factory.Sequence(lambda n: f"https://example.com/post/{n}")
    published = factory.Sequence(lambda n: 1_700_000_000 + n)
    created = factory.LazyFunction(lambda: dt.datetime.now(dt.UTC))
