"""A kind's admin actions (:class:`~.admin.KindAdmin`): Django's action form over the list,
given the selected entities, and ``delete_selected`` deleting them through the store.

An action is called as Django calls it, ``action(modeladmin, request, queryset)``. The
queryset is the kind's, ``Entry.objects.filter(pk__in=selected)`` (read by id, one read per
shard; ids that are not the kind's are left out), so ``queryset.update(...)``,
``queryset.delete()``, ``count()`` and iteration work as in Django.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.decorators import action
from django.contrib.admin.utils import model_ngettext
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import capfirst

from .changelist import selected_ids


@action(permissions=["delete"], description="Delete selected %(verbose_name_plural)s")
def delete_selected(modeladmin: Any, request: HttpRequest, selection: Any) -> Any:
    """Django's "Delete selected" for a kind: the confirmation page, then each entity deleted
    through the store, logged and counted in a message."""
    opts = modeladmin.model._meta
    if not modeladmin.has_delete_permission(request):
        raise PermissionDenied
    if request.POST.get("post"):
        count = len(selection)
        if count:
            modeladmin.log_deletions(request, selection)
            modeladmin.delete_queryset(request, selection)
            modeladmin.message_user(
                request,
                f"Successfully deleted {count} {model_ngettext(opts, count)}.",
                messages.SUCCESS,
            )
        return None
    name = f"admin:{opts.app_label}_{opts.model_name}_change"
    listed = [
        format_html(
            '{}: <a href="{}">{}</a>',
            capfirst(opts.verbose_name),
            reverse(name, args=[entity.id]),
            entity,
        )
        for entity in selection
    ]
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Delete multiple objects",
        "subtitle": None,
        "objects_name": str(model_ngettext(opts, len(selection))),
        "deletable_objects": [listed],
        "model_count": {capfirst(opts.verbose_name_plural): len(selection)}.items(),
        "queryset": selection,
        "perms_lacking": set(),
        "protected": [],
        "opts": opts,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
        # Django 6.1's template shows at most this many (5.2 has no such setting).
        "delete_confirmation_max_display": getattr(
            modeladmin, "delete_confirmation_max_display", None
        ),
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/delete_selected_confirmation.html", context)


def run_action(modeladmin: Any, request: HttpRequest) -> HttpResponse | None:
    """Run the action the list's form posted on the selected entities: its response, or a
    redirect back to the list (with a message when nothing was selected or no action named)."""
    actions = modeladmin.get_actions(request)
    name = request.POST.get("action", "")
    back = HttpResponseRedirect(request.get_full_path())
    if name not in actions:
        modeladmin.message_user(request, "No action selected.", messages.WARNING)
        return back
    ids = selected_ids(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
    if not ids:
        modeladmin.message_user(
            request,
            "Items must be selected in order to perform actions on them. No items have been "
            "changed.",
            messages.WARNING,
        )
        return back
    action = actions[name]
    # Django 6.1 gives an Action with .func (indexing it is deprecated); 5.2 a tuple.
    func = action.func if hasattr(action, "func") else action[0]
    selection = modeladmin.model.objects.filter(pk__in=ids)
    response = func(modeladmin, request, selection)
    if isinstance(response, HttpResponse):
        return response
    return back
