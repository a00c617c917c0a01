"""CSV and JSONL exports of the calls, items and evidence the current filters select."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.http import StreamingHttpResponse
from django.test import Client

from manifests.models import Call, Evidence, Item

pytestmark = pytest.mark.django_db


def export(world, user, name: str, query: str = "range=all"):
    return world.client(user).get(f"/p/{world.project.slug}/export/{name}?{query}")


def body(response) -> str:
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content).decode()


def test_it_streams_the_calls_as_csv_for_the_owner(demo_world):
    r = export(demo_world, demo_world.owner, "calls.csv")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert r["Content-Disposition"].startswith(f'attachment; filename="{demo_world.project.slug}-calls-')
    rows = list(csv.DictReader(io.StringIO(body(r))))
    calls = Call.objects.filter(project=demo_world.project)
    assert len(rows) == calls.count()
    assert {row["call_id"] for row in rows} == set(calls.values_list("call_id", flat=True))
    first = calls.order_by("started_at", "pk").first()
    assert rows[0]["call_id"] == first.call_id and int(rows[0]["input_tokens"]) == first.input_tokens


def test_it_streams_the_items_of_one_run_as_jsonl_for_a_member(demo_world):
    r = export(demo_world, demo_world.member, "items.jsonl", "range=all&run=coder-list-endpoint")
    assert r.status_code == 200 and r["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in body(r).splitlines()]
    items = Item.objects.filter(project=demo_world.project, call__run__run_id="coder-list-endpoint")
    assert len(lines) == items.count()
    assert {line["run_id"] for line in lines} == {"coder-list-endpoint"}
    assert {"item_id", "kind", "action", "used_tokens", "reason"} <= set(lines[0])


def test_it_exports_the_evidence_with_its_cause_under_the_filters(demo_world):
    r = export(demo_world, demo_world.member, "evidence.csv", "range=all&agent=refund-analyst")
    rows = list(csv.DictReader(io.StringIO(body(r))))
    expected = Evidence.objects.filter(project=demo_world.project, call__agent="refund-analyst")
    assert len(rows) == expected.count() > 0
    missing = [row for row in rows if row["present"] == "False"]
    assert missing and all(row["cause"] for row in missing)


def test_it_defuses_spreadsheet_formulas_in_csv_cells():
    from manifests.views.exports import export_cell

    assert export_cell("=HYPERLINK(\"http://x\")") == "'=HYPERLINK(\"http://x\")"
    assert export_cell("+1") == "'+1" and export_cell("plain") == "plain" and export_cell(3) == 3


def test_it_answers_404_for_an_unknown_export_and_400_for_a_bad_filter(demo_world):
    assert export(demo_world, demo_world.member, "secrets.csv").status_code == 404
    assert export(demo_world, demo_world.member, "calls.xml").status_code == 404
    assert export(demo_world, demo_world.member, "calls.csv", "cause=nonsense").status_code == 400


def test_it_answers_404_to_an_outsider_and_asks_anonymous_users_to_log_in(demo_world):
    assert export(demo_world, demo_world.outsider, "calls.csv").status_code == 404
    r = Client().get(f"/p/{demo_world.project.slug}/export/calls.csv")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")


def test_it_links_the_exports_from_the_calls_list_with_the_filters(demo_world):
    page = demo_world.client(demo_world.member).get(
        f"/p/{demo_world.project.slug}/calls/?agent=refund-analyst&run=refunds-budget-800").content.decode()
    assert (f'href="/p/{demo_world.project.slug}/export/items.jsonl?agent=refund-analyst&amp;run=refunds-budget-800"'
            in page)
