"""Template filters of the feed."""

from __future__ import annotations

import datetime as dt

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

register = template.Library()


@register.filter
def ago(value: dt.datetime) -> str:
    """ "just now" under a minute (``timesince`` would say "0 minutes"), else "3 hours ago"."""
    if timezone.now() - value < dt.timedelta(minutes=1):
        return "just now"
    return f"{timesince(value)} ago"
