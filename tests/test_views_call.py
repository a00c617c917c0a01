"""The call view: allocation bar data, items, evidence with its cause, compaction invariants,
the diff against the previous call, and hostile text shown as text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from manifests.models import Membership
from tests.conftest import make_manifest
from tests.views_support import demo_world_fixture  # noqa: F401

pytestmark = pytest.mark.django_db


def script_json(body: str, element_id: str):
    m = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', body, flags=re.S)
    assert m, element_id
    return json.loads(m.group(1))


def get(world, call_id: str) -> str:
    r = world.client(world.member).get(f"/p/{world.project.slug}/calls/{call_id}/")
    assert r.status_code == 200
    return r.content.decode()


def test_it_draws_the_allocation_in_context_order_with_reserve_and_headroom(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    alloc = script_json(body, "allocation-data")
    assert (alloc["window"], alloc["reserve"], alloc["input_cap"]) == (800, 160, 640)
    assert alloc["used"] + alloc["headroom"] == alloc["input_cap"]
    inside = [r for r in alloc["items"] if r["in_context"]]
    assert [r["position"] for r in inside] == sorted(r["position"] for r in inside)
    zones = [r["zone"] for r in inside]
    assert zones == sorted(zones, key=["head", "middle", "tail"].index)  # grouped head, middle, tail
    history = next(r for r in alloc["items"] if r["id"] == "history")
    assert (history["requested"], history["granted"], history["action"]) == (115, 79, "summarize")
    assert "history got 79 tokens at budget 800" in body


def test_it_lists_items_with_trust_reason_and_text(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    row = re.search(r'<tr class="untrusted[^"]*" data-item="tool_result">(.*?)</tr>', body, flags=re.S)
    assert row and "untrusted" in row.group(1) and "truncate" in row.group(1)
    assert "log#sha256:4be1c0d2" in row.group(1)  # the ref
    assert "text sent" in row.group(1)


def test_it_shows_missing_evidence_with_the_decision_that_caused_it(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    row = re.search(r'<tr data-evidence="rate_limit">(.*?)</tr>', body, flags=re.S).group(1)
    assert "missing" in row
    assert "history" in row and "summarize" in row  # the item and the action that lost it
    assert "history got 79 tokens at budget 800" in row
    present = re.search(r'<tr data-evidence="refund_rate">(.*?)</tr>', body, flags=re.S).group(1)
    assert "present" in present


def test_it_shows_the_compaction_invariants_and_what_they_lost(demo_world):
    body = get(demo_world, "coder-list-endpoint/step-6")
    card = re.search(r'<div class="card" data-compaction="[^"]+">(.*?)</div>', body, flags=re.S).group(1)
    assert "user_constraints" in card and "failed" in card
    assert "do not change public API compatibility" in card
    assert "r = 0.42" in card  # 474 -> 197 tokens


def test_it_says_what_changed_since_the_previous_call(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    diff = re.search(r'<table class="grid compact" id="diff">(.*?)</table>', body, flags=re.S).group(1)
    assert re.search(r"changed</span></td><td>history</td>.*action keep → summarize", diff, flags=re.S)
    assert re.search(r"evidence</span></td><td>rate_limit</td>.*now missing", diff, flags=re.S)
    assert 'id="prev-call"' in body and "refunds-budget-800/step-5/" in body
    assert "First call of the run" in get(demo_world, "refunds-budget-800/step-0")


def test_it_answers_404_for_an_unknown_call(demo_world):
    r = demo_world.client(demo_world.owner).get(f"/p/{demo_world.project.slug}/calls/no-such-call/")
    assert r.status_code == 404


PAYLOAD = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def test_it_escapes_hostile_text_everywhere(owner, project, api):
    manifest = make_manifest("evil-1", run_id="evil-run", agent=PAYLOAD[:60], items=6)
    manifest["items"][4]["reason"] = PAYLOAD
    manifest["items"][4]["text"] = PAYLOAD
    manifest["items"][4]["source_ref"] = PAYLOAD
    manifest["evidence"] = [{"key": "k1", "label": PAYLOAD[:150], "literal": PAYLOAD, "present": False}]
    manifest["warnings"] = [PAYLOAD]
    manifest["compactions"][0]["invariants"][0]["lost"] = [PAYLOAD[:150]]
    assert api.post(manifest).json()["accepted"] == 1
    assert project.membership_set.filter(user=owner, role=Membership.OWNER).exists()
    from django.test import Client

    client = Client()
    client.force_login(owner)
    for url in (f"/p/{project.slug}/calls/evil-1/", f"/p/{project.slug}/runs/evil-run/", f"/p/{project.slug}/runs/",
                f"/p/{project.slug}/evidence/?q=k1", f"/p/{project.slug}/compactions/", f"/p/{project.slug}/"):
        body = client.get(url).content.decode()
        assert "<script>window.__pwned" not in body, url
        assert 'onerror="window' not in body, url
    body = client.get(f"/p/{project.slug}/calls/evil-1/").content.decode()
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in body  # shown, as text
    data = re.search(r'<script id="allocation-data" type="application/json">(.*?)</script>', body, flags=re.S).group(1)
    assert "<script" not in data and "\\u003Cscript" in data  # json_script escapes < > &


README_CURL = {"schema": "ctxview.manifest/v1", "call_id": "hello-1", "run_id": "hello", "step": 0,
               "model": "claude-sonnet-4-5", "started_at": "2026-11-29T10:00:00Z",
               "budget": {"window": 8000, "output_reserve": 1000},
               "usage": {"input_tokens": 1200, "cache_read_tokens": 800, "output_tokens": 90},
               "items": [{"id": "system", "kind": "system", "action": "keep", "requested_tokens": 120,
                          "pinned": True}]}


def test_it_counts_the_readme_examples_keep_item_on_the_call_page_the_run_page_and_the_api(owner, project, api):
    from manifests import analysis
    from manifests.models import Call

    assert api.post({"manifests": [README_CURL]}).status_code == 200
    analysis.analyze_calls(list(Call.objects.filter(project=project).values_list("pk", flat=True)))
    client = __import__("django.test", fromlist=["Client"]).Client()
    client.force_login(owner)
    call_page = client.get(f"/p/{project.slug}/calls/hello-1/").content.decode()
    alloc = script_json(call_page, "allocation-data")
    assert alloc["used"] == 120 and alloc["items"][0]["in_context"] and alloc["items"][0]["used"] == 120
    run_page = client.get(f"/p/{project.slug}/runs/hello/", {"range": "all"})
    assert run_page.context["steps"][0]["context_tokens"] == 120
    assert script_json(run_page.content.decode(), "run-data")["kinds"] == {"system": [120]}
    body = api.get("/api/v1/calls/hello-1").json()
    assert body["context_tokens"] == 120 and body["items"][0]["context_tokens"] == 120
    assert body["cache_hit_ratio"] == pytest.approx(800 / 1200)


def test_it_names_the_step_where_the_evidence_was_lost_with_a_link(demo_world):
    body = get(demo_world, "coder-list-endpoint/step-8")
    row = re.search(r'<tr data-evidence="api_compat">(.*?)</tr>', body, flags=re.S).group(1)
    assert "Lost in compaction or summary" in row and "Never a candidate" not in row
    link = re.search(r'<a class="lost-at" href="([^"]+)">step 6</a>', row)
    assert link and link.group(1).startswith(f"/p/{demo_world.project.slug}/calls/coder-list-endpoint/step-6/")
    assert "lost at step 6: compaction" in row


def test_it_folds_many_items_that_were_not_sent(demo_world):
    import json as _json

    from manifests import ingest
    from tests.conftest import make_manifest

    manifest = make_manifest("folding-run/step-0", run_id="folding-run", items=40)
    for n, item in enumerate(manifest["items"]):
        if n >= 5:  # 35 records folded into a summary, recorded as ctxkit does: not sent
            item.update(action="summarize", position=None, zone=None, used_tokens=0, granted_tokens=0)
    report = ingest.ingest_body(project=demo_world.project, body=_json.dumps(manifest).encode())
    assert report.count(ingest.ACCEPTED) == 1
    body = demo_world.client(demo_world.member).get(
        f"/p/{demo_world.project.slug}/calls/folding-run/step-0/").content.decode()
    folded = body.split('id="items-folded"', 1)[1].split("</details>\n", 1)[0]
    assert "35 items not sent" in folded
    assert folded.count("<tr class=") == 35
    sent = body.split('id="items"', 1)[1].split('id="items-folded"', 1)[0]
    assert sent.count("<tr class=") == 5
    # A call with few such items is not folded.
    small = demo_world.client(demo_world.member).get(
        f"/p/{demo_world.project.slug}/calls/refunds-budget-800/step-6/").content.decode()
    assert 'id="items-folded"' not in small


# The items table's row as a Django template (tests/call_item_row.html), the reference for
# manifests/templatetags/call_items.py: the tag must
# write exactly this markup.
TEMPLATE_ROW = (Path(__file__).parent / "call_item_row.html").read_text()


def test_it_renders_item_rows_exactly_as_the_reference_template():
    import itertools

    from django.template import engines

    from manifests.models import Item
    from manifests.templatetags.call_items import item_row

    template = engines["django"].from_string(TEMPLATE_ROW)
    variants = {
        "item_id": ["item-1", "<b>x</b>&'\"", "é ü"], "trust": ["trusted", "untrusted"], "pinned": [True, False],
        "zone": [None, "", "head", "<z>"], "position": [None, 0, 7], "granted_tokens": [None, 0, 12],
        "used_tokens": [None, 3], "reason": ["", "keep: <ok> & fine"],
        "source_ref": [None, "", "kb://docs/1", "x" * 60 + "<&>", "é" * 50 + "\u0301"],
        "source_version": [None, "v<2>"], "content_hash": [None, "", "abc", "a b/c?d&e=" + "f" * 30],
        "group": [None, "g<1>"], "text": [None, "", "t<x>\n&y"],
    }
    names = list(variants)
    rows = 0
    # Every value of every field at least once, in many combinations, in and out of the context.
    for n, values in enumerate(itertools.islice(itertools.product(*variants.values()), 0, None, 389)):
        item = Item(kind="<k>" if n % 2 else "history", action="a&b" if n % 3 == 0 else "keep", priority=n % 100,
                    requested_tokens=n, **dict(zip(names, values, strict=True)))
        item.in_context = n % 4 != 0
        for url, qs_amp in (("/p/x/evidence/", ""), ("/p/x/evidence/", "&range=7d&agent=a<b")):
            context = {"i": item, "evidence_url": url, "qs_amp": qs_amp}
            assert str(item_row(item, url, qs_amp)) == template.render(context)
            rows += 1
    assert rows > 1000
