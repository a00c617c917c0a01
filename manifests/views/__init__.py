"""Dashboard pages. Thin: check access and filters, call selectors, render."""

from manifests.views.calls import call_detail, call_whatif
from manifests.views.compare import compare
from manifests.views.exports import export
from manifests.views.find import calls, search
from manifests.views.live import live_feed, live_page
from manifests.views.pages import cache, compactions, evidence, index, overview, run_detail, runs

__all__ = ["cache", "call_detail", "call_whatif", "calls", "compactions", "compare", "evidence", "export", "index",
           "live_feed", "live_page", "overview", "run_detail", "runs", "search"]
