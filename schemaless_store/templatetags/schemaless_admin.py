"""Template filters of the store's admin pages: ``{% load schemaless_admin %}``."""

from __future__ import annotations

import datetime as dt

from django import template
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

register = template.Library()

JUST_NOW = dt.timedelta(minutes=1)


@register.filter
def ago(value: dt.datetime | None) -> str:
    """How long ago, in words: "just now" within a minute either way (``timesince`` would say
    "0 minutes", and clocks differ a little), else "3 hours ago"; "in 5 minutes" for a time
    further in the future."""
    if not value:
        return ""
    now = timezone.now()
    if abs(now - value) < JUST_NOW:
        return "just now"
    if value > now:
        return f"in {timeuntil(value, now)}"
    return f"{timesince(value, now)} ago"
