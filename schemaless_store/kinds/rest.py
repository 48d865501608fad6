"""A kind's JSON API with Django REST framework, the optional extra (``pip install ".[rest]"``;
docs/kinds.md#a-json-api)::

    class NoteSerializer(KindSerializer):
        class Meta:
            model = Note
            fields = ["id", "title", "stars"]      # default: the id and every declared field

    class NoteViewSet(KindViewSet):
        serializer_class = NoteSerializer

    router.register("notes", NoteViewSet, basename="note")

- list (``?cursor=`` and ``?page_size=`` pages: the store's signed cursors; ``?field=value``
  and ``?field__gte=value`` filter through the kind's indexes, ``?ordering=`` among the orders
  they serve: :mod:`.rest_query`), retrieve, create, update, partial update, delete;
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
from rest_framework import permissions, serializers, viewsets
from rest_framework.exceptions import ValidationError

from ..exceptions import InvalidEntityId, SchemalessError, UniqueViolation
from .options import FORBID
from .references import ReferenceField
from .rest_query import StoreCursorPagination, conditions_from, list_query, orderable


def _refusal(exc: Exception, model: Any = None) -> ValidationError:
    if isinstance(exc, UniqueViolation) and model is not None:
        exc = model.unique_error(exc)  # the field, not the id of the entity holding the value
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


class ReferenceIdField(serializers.UUIDField):
    """A reference (``ReferenceField``) as the referenced entity's id, read and written; the
    kind's ``full_clean()`` refuses an id of no entity of the referenced kind."""

    def get_attribute(self, instance: Any) -> Any:
        return getattr(instance, f"{self.source}_id")


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
            if isinstance(declared, ReferenceField):
                return ReferenceIdField, built[1]
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
            raise _refusal(exc, type(instance)) from None
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


class KindViewSet(viewsets.ModelViewSet):
    """List, retrieve, create, update and delete the entities of the serializer's kind."""

    permission_classes = [KindPermissions]
    pagination_class = StoreCursorPagination
    # Filters and orderings are the kind's indexes' (:mod:`.rest_query`): DRF's backends
    # (``DEFAULT_FILTER_BACKENDS``: django-filter, ``OrderingFilter``) speak SQL to a table.
    filter_backends: list[Any] = []
    # An indexed property to list by (``"-published"``: newest first), through the kind's
    # indexes; None: ``all()``'s order, and filters only on an index of exactly their fields.
    ordering: str | None = None
    # The fields ``?ordering=`` may name (None: each one an index of the kind orders by).
    ordering_fields: list[str] | None = None
    # Query parameters that are never filters.
    reserved_params = frozenset({"cursor", "back", "page_size", "size", "format", "ordering"})

    def kind_model(self) -> Any:
        return self.get_serializer_class().Meta.model

    def get_ordering_fields(self) -> list[str]:
        if self.ordering_fields is not None:
            return list(self.ordering_fields)
        return orderable(self.kind_model())

    def get_queryset(self) -> Any:
        """``all()`` of the kind, or its index query of the query's parameters
        (:mod:`.rest_query`: a 400 for what no index serves or a field refuses)."""
        model = self.kind_model()
        params = self.request.query_params
        conditions = conditions_from(model, params, self.reserved_params)
        asked = params.get("ordering")
        if asked is not None:
            allowed = self.get_ordering_fields()
            if asked.lstrip("-") not in allowed:
                raise ValidationError(
                    {
                        "ordering": [
                            f"{model.__name__} lists can be ordered by "
                            f"{', '.join(allowed) or 'nothing'} (an index of the kind orders "
                            f"each); not {asked!r}"
                        ]
                    }
                )
        return list_query(model, conditions, asked, self.ordering)

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
