"""Reads for the dashboard: one module per page, all taking a project and the URL filters.

Pages read roll-ups and indexed queries; nothing here writes.
"""

from manifests.selectors.calls import call_with_children
from manifests.selectors.filters import FilterError, Filters
from manifests.selectors.projects import filter_options, project_for, projects_for

__all__ = ["FilterError", "Filters", "call_with_children", "filter_options", "project_for", "projects_for"]
