"""Signal receivers, connected in ``AppConfig.ready()``.

``pre_save``/``post_save`` and ``pre_delete``/``post_delete`` of ``Entity`` run the index steps
of the write protocol (:mod:`.writes`); ``post_migrate`` creates index tables on shards.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_migrate, post_save, pre_save


def _before_save(sender: Any, instance: Any, using: str, raw: bool = False, **kwargs: Any) -> None:
    if not raw:
        from . import writes

        writes.before_save(instance, using)


def _after_save(sender: Any, instance: Any, using: str, raw: bool = False, **kwargs: Any) -> None:
    if not raw:
        from . import writes

        writes.after_save(instance, using)


def _after_delete(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    from . import writes

    writes.after_delete(instance, using)


def _after_migrate(sender: Any, using: str, **kwargs: Any) -> None:
    from . import conf, indexes, lifecycle

    if using in conf.get().shards:
        indexes.create_tables(using)
        lifecycle.promote_if_empty()
    else:
        lifecycle.sync_states(using)


# (pre_save receivers, post_save receivers, answer) when only_store_receivers() last computed.
_last_answer: tuple[list[Any], list[Any], bool] | None = None


def only_store_receivers() -> bool:
    """True when nothing but the store listens to ``pre_save``/``post_save`` of ``Entity``
    (then a write may do what the store's receivers do without sending the signals).

    Remembered while the signals' receiver lists stay the same (``connect``/``disconnect``
    change them): asking Django which receivers are live is the costly part of a ``create``.
    """
    global _last_answer
    last = _last_answer
    if last is not None and last[0] == pre_save.receivers and last[1] == post_save.receivers:
        return last[2]
    pre, post = list(pre_save.receivers), list(post_save.receivers)
    answer = _only_store_receivers()
    _last_answer = (pre, post, answer)
    return answer


def _only_store_receivers() -> bool:
    from .models import Entity

    try:
        for signal, ours in ((pre_save, _before_save), (post_save, _after_save)):
            sync, asynchronous = signal._live_receivers(Entity)  # the set Django would call
            if asynchronous or list(sync) != [ours]:
                return False
    except (AttributeError, TypeError, ValueError):  # another Django's internals: be safe
        return False
    return True


def connect() -> None:
    """Connect the receivers (idempotent: each has a dispatch_uid)."""
    from django.apps import apps

    from .models import Entity

    pre_save.connect(_before_save, sender=Entity, dispatch_uid="schemaless_before_save")
    post_save.connect(_after_save, sender=Entity, dispatch_uid="schemaless_after_save")
    post_delete.connect(_after_delete, sender=Entity, dispatch_uid="schemaless_after_delete")
    post_migrate.connect(
        _after_migrate,
        sender=apps.get_app_config("schemaless_store"),
        dispatch_uid="schemaless_after_migrate",
    )
