"""The watched facts of the key's project (docs/api.md, "Watched facts"): list, create, read,
change, delete. Validation and writes are manifests/facts.py's, shared with the settings page."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from manifests import facts
from manifests.api.auth import HasConfigureScope, key_of
from manifests.models import WatchedFact
from manifests.selectors.facts import facts_of

_fact_list = inline_serializer("WatchedFactList", {"results": facts.WatchedFactSerializer(many=True)})


def _invalid(exc: facts.FactInputError) -> Response:
    errors = [{"path": e.path, "message": e.message} for e in exc.errors]
    return Response({"error": errors[0]["message"], "errors": errors}, status=status.HTTP_400_BAD_REQUEST)


class WatchedFactListView(APIView):
    permission_classes = [HasConfigureScope]

    @extend_schema(summary="The watched facts of the key's project", responses={200: _fact_list},
                   operation_id="watched_facts_list")
    def get(self, request: Request) -> Response:
        return Response({"results": [facts.as_dict(f) for f in facts_of(key_of(request).project)]})

    @extend_schema(summary="Watch a fact (key with the configure scope); it applies to calls analysed from then on",
                   request=facts.WatchedFactSerializer, responses={201: facts.WatchedFactSerializer})
    def post(self, request: Request) -> Response:
        try:
            fact = facts.create_fact(project=key_of(request).project, spec=facts.parse_fact(request.data))
        except facts.FactInputError as exc:
            return _invalid(exc)
        return Response(facts.as_dict(fact), status=status.HTTP_201_CREATED)


class WatchedFactDetailView(APIView):
    permission_classes = [HasConfigureScope]

    def fact_of(self, request: Request, fact_id: int) -> WatchedFact:
        fact = WatchedFact.objects.filter(project=key_of(request).project, pk=fact_id).first()
        if fact is None:
            raise NotFound("no such watched fact in the key's project")
        return fact

    @extend_schema(summary="One watched fact", responses={200: facts.WatchedFactSerializer},
                   operation_id="watched_fact_retrieve")
    def get(self, request: Request, fact_id: int) -> Response:
        return Response(facts.as_dict(self.fact_of(request, fact_id)))

    @extend_schema(summary="Change a watched fact (key with the configure scope): every field, as for a new one",
                   request=facts.WatchedFactSerializer, responses={200: facts.WatchedFactSerializer})
    def put(self, request: Request, fact_id: int) -> Response:
        project = key_of(request).project
        fact_id = self.fact_of(request, fact_id).pk
        try:
            fact = facts.update_fact(project=project, fact_id=fact_id, spec=facts.parse_fact(request.data))
        except facts.FactInputError as exc:
            return _invalid(exc)
        if fact is None:
            raise NotFound("no such watched fact in the key's project")
        return Response(facts.as_dict(fact))

    @extend_schema(summary="Stop watching a fact (key with the configure scope)", responses={204: None})
    def delete(self, request: Request, fact_id: int) -> Response:
        if not facts.delete_fact(project=key_of(request).project, fact_id=self.fact_of(request, fact_id).pk):
            raise NotFound("no such watched fact in the key's project")
        return Response(status=status.HTTP_204_NO_CONTENT)
