"""The JSON API of the test kinds (tests/kinds/test_rest.py)."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from schemaless_store.kinds.rest import KindSerializer, KindViewSet

from .models import Note, Tag


class NoteSerializer(KindSerializer):
    class Meta:
        model = Note
        fields = ["id", "title", "body", "stars", "link", "color", "user_id", "data"]


class NoteViewSet(KindViewSet):
    serializer_class = NoteSerializer


class TagSerializer(KindSerializer):
    class Meta:
        model = Tag
        fields = "__all__"


class TagViewSet(KindViewSet):
    serializer_class = TagSerializer


router = DefaultRouter()
router.register("notes", NoteViewSet, basename="note")
router.register("tags", TagViewSet, basename="tag")
urlpatterns = router.urls
