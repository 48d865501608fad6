from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("project.feed.urls")),
]

# Styled pages instead of Django's bare ones (DEBUG is off unless DJANGO_DEBUG=1).
handler403 = "project.errors.permission_denied"
handler404 = "project.errors.page_not_found"
# A database found down outside a view (the session's save, a later render) is a 503 page too,
# as ShardUnavailablePage answers for a view; any other error, templates/500.html.
handler500 = "schemaless_store.middleware.server_error"
