"""The feed's small JSON API, through the REST extra (``schemaless_store.kinds.rest``):
``/api/entries/`` lists everyone's entries, newest first, by the store's signed cursors
(``?user=<id>`` for one user's, through the kind's index; ``?published=2026-11-27`` for a day's,
``?published__gte=...``; ``?ordering=published`` oldest first), ``/api/entries/<id>/`` reads one.
Read only, and open to anyone, as the site's pages are: the app says so here, since a kind's
viewset otherwise asks for the kind's model permissions."""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.routers import DefaultRouter

from schemaless_store.kinds.rest import KindSerializer, KindViewSet

from .models import Entry


class EntrySerializer(KindSerializer):
    class Meta:
        model = Entry
        fields = ["id", "user", "title", "link", "published"]


class EntryViewSet(KindViewSet):
    serializer_class = EntrySerializer
    ordering = "-published"
    permission_classes = [permissions.AllowAny]
    http_method_names = ["get", "head", "options"]


router = DefaultRouter()
router.register("entries", EntryViewSet, basename="entry")
urlpatterns = router.urls
