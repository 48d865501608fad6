from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("project.feed.urls")),
]

# Styled pages instead of Django's bare ones (DEBUG is off unless DJANGO_DEBUG=1).
handler403 = "project.errors.permission_denied"
handler404 = "project.errors.page_not_found"
