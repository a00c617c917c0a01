"""CSV and JSONL exports of what the current filters select, streamed."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.http import Http404, HttpRequest, StreamingHttpResponse
from django.utils import timezone

from manifests.models import Project
from manifests.selectors import call_list, exports
from manifests.selectors.filters import Filters
from manifests.views.common import project_page

FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
# A cell a spreadsheet would read as a formula (CSV injection): agent text is data.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Line:
    """csv.writer writes into this and gets the line back, so each row streams as it is made."""

    def write(self, value: str) -> str:
        return value


def export_cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def _csv(header: list[str], rows: Iterator[tuple[Any, ...]]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([export_cell(v) for v in row])


def _jsonl(header: list[str], rows: Iterator[tuple[Any, ...]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(dict(zip(header, row, strict=True)), default=_json_default, ensure_ascii=False) + "\n"


def _json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


@project_page
def export(request: HttpRequest, project: Project, filters: Filters, kind: str, fmt: str) -> StreamingHttpResponse:
    if kind not in exports.KINDS or fmt not in FORMATS:
        raise Http404(f"No export {kind}.{fmt}: choose calls, items or evidence as csv or jsonl.")
    cq = call_list.parse_call_query(request.GET)
    header = exports.header(kind)
    rows = exports.rows(project, filters, cq, kind)
    body = _csv(header, rows) if fmt == "csv" else _jsonl(header, rows)
    response = StreamingHttpResponse(body, content_type=FORMATS[fmt])
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="{project.slug}-{kind}-{stamp}.{fmt}"'
    response["Cache-Control"] = "private, no-store"
    return response
