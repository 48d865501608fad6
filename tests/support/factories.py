"""factory-boy factories for what the tests store when its values are incidental.

A bag factory builds a property bag (a dict) when called, for ``bulk_put``, a child process or
a parametrization; ``.create(**overrides)`` writes one entity (``Entity.objects.create``) and
returns it; ``.create_batch(n, **overrides)`` writes ``n`` in one ``bulk_put``.

- :class:`PostFactory`: an entry as in the article (a user id in bytes, a title, a link, a
  publish time, a creation time): a row in each of the test app's post indexes.
- :class:`NumberedFactory`: an entity that holds a number ``n`` and nothing indexed.
- :class:`StaffFactory`: a Django user for the admin, with the permissions named in ``perms``.
- :class:`LegacyPostFactory`: a row of the test app's ordinary model ``LegacyPost``.

Tests whose point is an exact value (a claimed username, a stored type, a date shown) spell
their data out instead.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import factory
from django.contrib.auth.models import Permission, User

from schemaless_store.models import Entity
from tests.testapp.models import LegacyPost


class BagFactory(factory.DictFactory):
    """A property bag when called; an entity written through the store with ``create``."""

    class Meta:
        strategy = factory.BUILD_STRATEGY

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Entity:
        return Entity.objects.create(**kwargs)

    @classmethod
    def create_batch(cls, size: int, **kwargs: Any) -> list[Entity]:  # type: ignore[override]
        """``size`` entities written in one ``bulk_put``, in order."""
        return Entity.objects.bulk_put(cls.build_batch(size, **kwargs))


class PostFactory(BagFactory):
    """An entry as in the article: a user id in bytes, a title, a link, a publish time."""

    user_id = factory.LazyFunction(lambda: uuid.uuid4().bytes)
    title = factory.Faker("sentence", nb_words=5)
    link = factory.Sequence(lambda n: f"https://example.com/post/{n}")
    published = factory.Sequence(lambda n: 1_700_000_000 + n)
    created = factory.LazyFunction(lambda: dt.datetime.now(dt.UTC))


class NumberedFactory(BagFactory):
    """An entity that holds a number ``n`` and, unless told, no indexed property. In a batch
    ``n`` counts from ``start`` (0): ``create_batch(40)`` holds 0..39."""

    n = factory.Sequence(lambda n: n)

    @classmethod
    def build_batch(cls, size: int, **kwargs: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        start = kwargs.pop("start", 0)
        return [cls.build(n=start + k, **kwargs) for k in range(size)]


class StaffFactory(factory.django.DjangoModelFactory):
    """A Django user (staff unless ``is_staff=False``), password ``pw``, with the store's admin
    permissions named by codename in ``perms``."""

    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"op{n}")
    is_staff = True
    password = factory.django.Password("pw")

    @factory.post_generation
    def perms(self, create: bool, codenames: tuple[str, ...] | None, **kwargs: Any) -> None:
        for codename in codenames or ():
            self.user_permissions.add(Permission.objects.get(codename=codename))


class LegacyPostFactory(factory.django.DjangoModelFactory):
    """A row of ``LegacyPost`` (``default``): JSON data, a title, a score, a publish time (now).
    ``k`` (a sequence) numbers it: owner ``user{k % 3}``, link ``https://x/{k}``."""

    class Meta:
        model = LegacyPost

    class Params:
        k = factory.Sequence(lambda n: n)

    data = factory.LazyAttribute(
        lambda o: {"owner": f"user{o.k % 3}", "link": f"https://x/{o.k}", "tags": ["a", o.k]}
    )
    title = factory.LazyAttribute(lambda o: f"post {o.k}")
    score = factory.LazyAttribute(lambda o: o.k)
    published = factory.LazyFunction(lambda: dt.datetime.now(dt.UTC))
