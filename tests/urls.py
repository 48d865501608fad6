from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def novel_page(request: HttpRequest, novel_id: object) -> HttpResponse:
    """A novel's page on the site, for the admin's "View on site" (tests/kinds)."""
    return HttpResponse(f"novel {novel_id}")


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("tests.kindsapp.api")),  # tests/kinds/test_rest.py
    path("faces-api/", include("tests.facesapp.api")),  # tests/kinds/test_rest_*.py
    path("novels/<uuid:novel_id>/", novel_page),  # "View on site"
]
