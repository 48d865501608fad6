"""The demo project's error pages (``handler403``/``handler404`` in ``project/urls.py``).

Under ``/admin/`` they look like the admin (its header, breadcrumbs and styles); elsewhere like
the feed site (``templates/403.html``, ``templates/404.html``, extending ``feed/base.html``).
Neither shows what Django's DEBUG pages do (URL patterns, exception details); the demo runs
with ``DEBUG`` off unless ``DJANGO_DEBUG=1`` (``project/settings.py``).
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import requires_csrf_token

from project.feed.views import render_page


@requires_csrf_token
def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return _error_page(request, 403)


@requires_csrf_token
def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return _error_page(request, 404)


def _error_page(request: HttpRequest, status: int) -> HttpResponse:
    # The path as the visitor sent it; the templates escape it. The exception's text is not
    # shown: for an unmatched URL it lists the URL patterns that were tried.
    context = {"request_path": request.path, "status": status}
    if request.path.startswith(reverse("admin:index")):
        # admin/404.html is Django's own; admin/403.html is the project's (templates/admin/).
        context = {**admin.site.each_context(request), **context}
        return render(request, f"admin/{status}.html", context, status=status)
    return render_page(request, f"{status}.html", context, status=status)
