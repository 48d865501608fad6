"""A kind's JSON API with Django REST framework, the optional extra (``pip install ".[rest]"``;
docs/kinds.md#a-json-api)::

    class NoteSerializer(KindSerializer):
        class Meta:
            model = Note
            fields = ["id", "title", "stars"]      # default: the id and every declared field

    class NoteViewSet(KindViewSet):
        serializer_class = NoteSerializer

    router.register("notes", NoteViewSet, basename="note")

- list (``?cursor=`` pages: the store's signed cursors; ``?field=value`` filters through the
  kind's indexes), retrieve, create, update, partial update, delete;
- validation is the kind's own (``full_clean()``); a body the kind or the store refuses (wrong
  types, undeclared fields on a ``forbid`` kind, values an index or the body cannot hold, a
  taken unique value) is a 400 and nothing is written;
- secure by default: :class:`KindPermissions`, the kind's model permissions (``view_`` to read,
  ``add_``/``change_``/``delete_`` to write), not DRF's own default (anyone may write).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import pagination, permissions, serializers, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from ..exceptions import InvalidCursor, InvalidEntityId, InvalidQuery, SchemalessError
from .options import FORBID


def _refusal(exc: Exception) -> ValidationError:
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return ValidationError(
                {
                    "non_field_errors" if name == "__all__" else name: messages
                    for name, messages in exc.message_dict.items()
                }
            )
        return ValidationError(exc.messages)
    return ValidationError({"non_field_errors": [str(exc)]})


class KindSerializer(serializers.ModelSerializer):
    """A ``ModelSerializer`` of a kind: the id (read only) and the declared fields, validated
    by the kind's ``full_clean()``; undeclared fields in a body are refused on a ``forbid``
    kind and ignored on an ``allow`` one."""

    id = serializers.UUIDField(read_only=True)

    def get_field_names(self, declared_fields: Any, info: Any) -> list[str]:
        fields = getattr(self.Meta, "fields", None)
        if fields is None or fields == serializers.ALL_FIELDS:
            return ["id", *self.Meta.model._kind.fields]
        return list(super().get_field_names(declared_fields, info))

    def build_field(
        self, field_name: str, info: Any, model_class: Any, nested_depth: int
    ) -> tuple[Any, dict[str, Any]]:
        # A kind's fields are private fields, which DRF's field info leaves out.
        declared = model_class._kind.fields.get(field_name)
        if declared is not None:
            built: tuple[Any, dict[str, Any]] = self.build_standard_field(field_name, declared)
            return built
        return super().build_field(field_name, info, model_class, nested_depth)

    def get_validators(self) -> list[Any]:
        return []  # uniqueness is the unique indexes' (a 400 from the write)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        model = self.Meta.model
        unknown = sorted(set(getattr(self, "initial_data", {}) or {}) - set(self.fields))
        if unknown and model._kind.extra == FORBID:
            raise ValidationError(
                {"non_field_errors": [f"{model.__name__} has no field {', '.join(unknown)}"]}
            )
        candidate = self.instance if self.instance is not None else model()
        for name, value in attrs.items():
            setattr(candidate, name, value)
        try:
            candidate.full_clean()
        except DjangoValidationError as exc:
            raise _refusal(exc) from None
        self.candidate = candidate
        return attrs

    def create(self, validated_data: dict[str, Any]) -> Any:
        return self._write(self.candidate, force_insert=True)

    def update(self, instance: Any, validated_data: dict[str, Any]) -> Any:
        return self._write(self.candidate)

    def _write(self, instance: Any, force_insert: bool = False) -> Any:
        try:
            instance.save(force_insert=force_insert, validate=False)
        except SchemalessError as exc:  # a value an index or the body cannot hold, a taken one
            raise _refusal(exc) from None
        return instance


class KindPermissions(permissions.DjangoModelPermissions):
    """The kind's model permissions, reads included (``view_``): anonymous clients and users
    without them get 401/403 for every method."""

    perms_map = {
        **permissions.DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
    }

    def has_permission(self, request: Any, view: Any) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        perms = self.get_required_permissions(request.method, view.kind_model())
        return bool(request.user.has_perms(perms))


class StoreCursorPagination(pagination.BasePagination):
    """Pages of ``size`` by the store's signed cursors (``?cursor=``; ``?size=`` up to
    ``max_page_size``): keyset pages that neither skip nor repeat while entities are added."""

    page_size = 30
    max_page_size = 200

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> list[Any]:
        self.request = request
        size = self.page_size
        raw = request.query_params.get("size")
        if raw is not None:
            if not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
                raise ValidationError({"size": [f"a whole number from 1 to {self.max_page_size}"]})
            size = int(raw)
        try:
            self.page = queryset.page(after=request.query_params.get("cursor") or None, size=size)
        except InvalidCursor as exc:
            raise ValidationError({"cursor": [str(exc)]}) from None
        return list(self.page.entities)

    def get_paginated_response(self, data: Any) -> Response:
        next_url = None
        if self.page.next_cursor is not None:
            params = self.request.query_params.copy()
            params["cursor"] = self.page.next_cursor
            next_url = self.request.build_absolute_uri("?" + params.urlencode())
        return Response({"next": next_url, "results": data})


class KindViewSet(viewsets.ModelViewSet):
    """List, retrieve, create, update and delete the entities of the serializer's kind."""

    permission_classes = [KindPermissions]
    pagination_class = StoreCursorPagination
    # An indexed property to list by (``"-published"``: newest first), through the kind's
    # indexes; None: ``all()``'s order, and filters only on an index of exactly their fields.
    ordering: str | None = None
    # Query parameters that are never filters.
    reserved_params = frozenset({"cursor", "size", "format"})

    def kind_model(self) -> Any:
        return self.get_serializer_class().Meta.model

    def get_queryset(self) -> Any:
        """``all()`` of the kind, or ``filter_index(...)`` of the query's ``field=value``
        parameters (each converted by its field; an index of the kind must serve them)."""
        model = self.kind_model()
        conditions: dict[str, Any] = {}
        for name, value in self.request.query_params.items():
            if name in self.reserved_params:
                continue
            field = model._kind.fields.get(name)
            if field is None:
                raise ValidationError({name: [f"{model.__name__} has no field {name!r}"]})
            try:
                conditions[name] = field.to_python(value)
            except DjangoValidationError as exc:
                raise ValidationError({name: exc.messages}) from None
        if not conditions and self.ordering is None:
            return model.objects.all()
        query = model.objects.filter_index(**conditions)
        if self.ordering is not None:
            query = query.order_by(self.ordering)
        try:
            query.index  # noqa: B018 (choose the index now: a query none serves is a 400)
        except InvalidQuery as exc:
            raise ValidationError({"non_field_errors": [str(exc).split("\n")[0]]}) from None
        return query

    def get_object(self) -> Any:
        model = self.kind_model()
        try:
            found = model.objects.get(id=self.kwargs[self.lookup_url_kwarg or self.lookup_field])
        except (model.DoesNotExist, InvalidEntityId):
            raise Http404(f"no {model.__name__} with that id") from None
        self.check_object_permissions(self.request, found)
        return found

    def perform_destroy(self, instance: Any) -> None:
        instance.delete()
