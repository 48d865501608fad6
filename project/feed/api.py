"""The feed's one async view: an entry as JSON, read with the store's async API (``aget_many``,
``filter_index(...).acount()``), as an ASGI deployment would serve it. Under WSGI Django runs
it in an event loop of its own; it works either way."""

from __future__ import annotations

import asyncio
import uuid

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from .models import Comment, Entry, Like, User


@require_GET
async def entry_json(request: HttpRequest, entry_id: uuid.UUID) -> JsonResponse:
    """``GET /e/<id>/json``: the entry, its author's username, and its like and comment
    counts (gathered; like every store call they run in Django's one database thread)."""
    found = await Entry.objects.aget_many([entry_id])
    entry = found.get(entry_id)
    if entry is None:
        raise Http404("no such entry")
    likes, comments, users = await asyncio.gather(
        Like.objects.filter(entry_id=entry.id).order_by("created").acount(),
        Comment.objects.filter(entry_id=entry.id).order_by("created").acount(),
        User.objects.aget_many([entry.user_id]),
    )
    author = users.get(entry.user_id)
    return JsonResponse(
        {
            "id": str(entry.id),
            "title": entry.title,
            "link": entry.link,
            "published": entry.published.isoformat(),
            "author": None if author is None else author.username,
            "likes": likes,
            "comments": comments,
        }
    )
