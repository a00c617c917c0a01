"""The project's URLs with the reference call view (tests/call_view_reference.py) in place of
the current one, at the same path and name (tests/test_views_call_equivalence.py)."""

from django.urls import URLPattern, path

from ctxview.urls import urlpatterns as current
from tests.call_view_reference import call_detail_before


def _swap(p: URLPattern) -> URLPattern:
    if getattr(p, "name", None) == "call-detail":
        return path(str(p.pattern), call_detail_before, name="call-detail")
    return p


urlpatterns = [_swap(p) for p in current]
