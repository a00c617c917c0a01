"""Dashboard pages. Thin: check access and filters, call selectors, render."""

from manifests.views.calls import call_detail, call_whatif
from manifests.views.pages import cache, compactions, evidence, index, overview, run_detail, runs

__all__ = ["cache", "call_detail", "call_whatif", "compactions", "evidence", "index", "overview", "run_detail",
           "runs"]
