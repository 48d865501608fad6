from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("tests.kindsapp.api")),  # tests/kinds/test_rest.py
]
