"""The JSON API of the Novel kind (tests/kinds/test_rest_*.py)."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from schemaless_store.kinds.rest import KindSerializer, KindViewSet

from .models import Novel


class NovelSerializer(KindSerializer):
    class Meta:
        model = Novel
        fields = "__all__"


class NovelViewSet(KindViewSet):
    serializer_class = NovelSerializer
    ordering = "-published"


router = DefaultRouter()
router.register("novels", NovelViewSet, basename="novel")
urlpatterns = router.urls
