"""The call view: the budget and the cache cause, the allocation bar's data, the items, the
evidence with its cause, the risks, compactions and context edits, the diff against the
previous call with the prefix lines that changed, the filters carried along every link, and
hostile text shown as text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from manifests import analysis, ingest
from manifests.models import CacheEvent, Call, Evidence, Item, Membership
from manifests.templatetags.call_items import item_rows
from tests.demo_world import CANARY
from tests.html_page import Element, parse
from tests.support import manifest, store_and_analyse

pytestmark = pytest.mark.django_db


def script_json(body: str, element_id: str):
    return json.loads(parse(body).one(f'script#{element_id}[type="application/json"]').text)


def get(world, call_id: str) -> str:
    r = world.client(world.member).get(f"/p/{world.project.slug}/calls/{call_id}/")
    assert r.status_code == 200
    return r.content.decode()


def test_it_draws_the_allocation_in_context_order_with_reserve_and_headroom(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    alloc = script_json(body, "allocation-data")
    assert (alloc["window"], alloc["reserve"], alloc["input_cap"]) == (800, 160, 640)
    # Headroom is input cap − input read (the provider's input); what it read beyond the items
    # (the question, framing) is its own segment, so the bar ends at the cap.
    assert alloc["input_read"] == alloc["input_tokens"] > alloc["used"]
    assert alloc["headroom"] == alloc["input_cap"] - alloc["input_read"]
    assert alloc["used"] + alloc["unitemized"] + alloc["headroom"] == alloc["input_cap"]
    inside = [r for r in alloc["items"] if r["in_context"]]
    assert [r["position"] for r in inside] == sorted(r["position"] for r in inside)
    zones = [r["zone"] for r in inside]
    assert zones == sorted(zones, key=["head", "middle", "tail"].index)  # grouped head, middle, tail
    history = next(r for r in alloc["items"] if r["id"] == "history")
    assert (history["requested"], history["granted"], history["action"]) == (115, 79, "summarize")
    assert "history got 79 tokens at budget 800" in body


def test_it_lists_items_with_trust_reason_and_text(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    row = parse(body).one('tr.untrusted[data-item="tool_result"]')
    assert "untrusted" in row.text and "truncate" in row.text
    assert "log#sha256:4be1c0d2" in row.text  # the ref
    assert "text sent" in row.text


def test_it_shows_missing_evidence_with_the_decision_that_caused_it(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    page = parse(body)
    row = page.one('tr[data-evidence="rate_limit"]').text
    assert "missing" in row
    assert "history" in row and "summarize" in row  # the item and the action that lost it
    assert "history got 79 tokens at budget 800" in row
    present = page.one('tr[data-evidence="refund_rate"]').text
    assert "present" in present


def test_it_shows_the_compaction_invariants_and_what_they_lost(demo_world):
    body = get(demo_world, "coder-list-endpoint/step-6")
    card = parse(body).one("div.card[data-compaction]").text
    assert "user_constraints" in card and "failed" in card
    assert "do not change public API compatibility" in card
    assert "r = 0.42" in card  # 474 -> 197 tokens


def test_it_says_what_changed_since_the_previous_call(demo_world):
    body = get(demo_world, "refunds-budget-800/step-6")
    diff = [[td.text for td in tr.select("td")] for tr in parse(body).select("table#diff tr")]
    assert any(row[:2] == ["changed", "history"] and "action keep → summarize" in row[-1] for row in diff)
    assert any(row[:2] == ["evidence", "rate_limit"] and "now missing" in row[-1] for row in diff)
    assert 'id="prev-call"' in body and "refunds-budget-800/step-5/" in body
    assert "First call of the run" in get(demo_world, "refunds-budget-800/step-0")


def test_it_answers_404_for_an_unknown_call(demo_world):
    r = demo_world.client(demo_world.owner).get(f"/p/{demo_world.project.slug}/calls/no-such-call/")
    assert r.status_code == 404


def test_it_answers_the_replay_of_an_unknown_call_with_a_json_404(demo_world):
    client = demo_world.client(demo_world.member)
    for call_id in ("no-such-call", f"{CANARY}/step-0"):  # the other project's call is unknown here too
        r = client.get(f"/p/{demo_world.project.slug}/whatif.json", {"call": call_id})
        assert (r.status_code, r["Content-Type"], r.json()) == (404, "application/json", {"error": "no such call"})


PAYLOAD = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def test_it_escapes_hostile_text_everywhere(owner, project, api):
    sent = manifest("evil-1", run_id="evil-run", agent=PAYLOAD[:60], items=6)
    sent["items"][4]["reason"] = PAYLOAD
    sent["items"][4]["text"] = PAYLOAD
    sent["items"][4]["source_ref"] = PAYLOAD
    sent["evidence"] = [{"key": "k1", "label": PAYLOAD[:150], "literal": PAYLOAD, "present": False}]
    sent["warnings"] = [PAYLOAD]
    sent["compactions"][0]["invariants"][0]["lost"] = [PAYLOAD[:150]]
    assert api.post(sent).json()["accepted"] == 1
    assert project.membership_set.filter(user=owner, role=Membership.OWNER).exists()
    client = Client()
    client.force_login(owner)
    for url in (f"/p/{project.slug}/calls/evil-1/", f"/p/{project.slug}/runs/evil-run/", f"/p/{project.slug}/runs/",
                f"/p/{project.slug}/evidence/?q=k1", f"/p/{project.slug}/compactions/", f"/p/{project.slug}/"):
        body = client.get(url).content.decode()
        assert "<script>window.__pwned" not in body, url
        assert 'onerror="window' not in body, url
    body = client.get(f"/p/{project.slug}/calls/evil-1/").content.decode()
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in body  # shown, as text
    data = parse(body).one('script#allocation-data[type="application/json"]').text
    assert "<script" not in data and "\\u003Cscript" in data  # json_script escapes < > &


README_CURL = {"schema": "ctxview.manifest/v1", "call_id": "hello-1", "run_id": "hello", "step": 0,
               "model": "claude-sonnet-4-5", "started_at": "2026-11-29T10:00:00Z",
               "budget": {"window": 8000, "output_reserve": 1000},
               "usage": {"input_tokens": 1200, "cache_read_tokens": 800, "output_tokens": 90},
               "items": [{"id": "system", "kind": "system", "action": "keep", "requested_tokens": 120,
                          "pinned": True}]}


def test_it_counts_the_readme_examples_keep_item_on_the_call_page_the_run_page_and_the_api(owner, project, api):
    assert api.post({"manifests": [README_CURL]}).status_code == 200
    analysis.analyze_calls(list(Call.objects.filter(project=project).values_list("pk", flat=True)))
    client = Client()
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
    row = parse(body).one('tr[data-evidence="api_compat"]')
    assert "Lost in compaction or summary" in row.text and "Never a candidate" not in row.text
    link = row.one("a.lost-at")
    assert link.text == "step 6"
    assert link.get("href").startswith(f"/p/{demo_world.project.slug}/calls/coder-list-endpoint/step-6/")
    assert "lost at step 6: compaction" in row.text


def test_it_folds_many_items_that_were_not_sent(demo_world):
    m = manifest("folding-run/step-0", run_id="folding-run", items=40)
    for n, item in enumerate(m["items"]):
        if n >= 5:  # 35 records folded into a summary, recorded as ctxkit does: not sent
            item.update(action="summarize", position=None, zone=None, used_tokens=0, granted_tokens=0)
    report = ingest.ingest_body(project=demo_world.project, body=json.dumps(m).encode())
    assert report.count(ingest.ACCEPTED) == 1
    body = demo_world.client(demo_world.member).get(
        f"/p/{demo_world.project.slug}/calls/folding-run/step-0/").content.decode()
    page = parse(body)
    folded = page.one("details#items-folded")
    assert folded.one("summary").text.startswith("35 items not sent")
    assert len(folded.select("table#items-not-sent tr[data-item]")) == 35
    assert len(page.one("table#items").select("tr[data-item]")) == 5
    # A call with few such items is not folded.
    small = demo_world.client(demo_world.member).get(
        f"/p/{demo_world.project.slug}/calls/refunds-budget-800/step-6/").content.decode()
    assert 'id="items-folded"' not in small


def cache_cause(summary: Element) -> tuple[str | None, str]:
    """The cache cause on the call's summary line: its class and what the line says after "cache: "."""
    (shown,) = [span for span in summary.select("span") if span.text.startswith("cache: ")]
    return shown.one("b").get("class"), shown.text.removeprefix("cache: ")


def cells(row: Element) -> list[Element]:
    return row.select("td")


def test_it_renders_every_step_of_the_demo_runs_with_all_their_items_and_evidence(demo_world):
    client = demo_world.client(demo_world.member)
    calls = Call.objects.filter(project=demo_world.project, run__run_id__in=(
        "coder-list-endpoint", "refunds-budget-800", "research-001")).order_by("run__run_id", "step")
    assert calls.count() > 20
    for call in calls:
        body = client.get(f"/p/{demo_world.project.slug}/calls/{call.call_id}/").content.decode()
        page = parse(body)
        assert page.one("span#call-id").raw_text == call.call_id
        rows = [tr.get("data-item") for tr in page.select("tr[class][data-item]")]
        assert sorted(rows) == sorted(Item.objects.filter(call=call).values_list("item_id", flat=True)), call.call_id
        evidence = [tr.get("data-evidence") for tr in page.select("tr[data-evidence]")]
        assert sorted(evidence) == sorted(Evidence.objects.filter(call=call).values_list("key", flat=True))
        alloc = script_json(body, "allocation-data")
        assert len(alloc["items"]) == len(rows) and alloc["window"] == call.window


@pytest.mark.parametrize("call_id", ["refunds-budget-800/step-6", "research-019/step-1",
                                     "research-approval/step-4", "ops-refunds-watch/step-0"])
def test_it_shows_the_budget_the_usage_and_the_cache_cause(demo_world, call_id):
    body = get(demo_world, call_id)
    call = Call.objects.get(project=demo_world.project, call_id=call_id)
    event = CacheEvent.objects.get(call=call)
    page = parse(body)
    summary = page.one("div.summary-line")
    # Each figure as "label <b>value</b>": the text right before a <b>, and the <b>'s text.
    figures = {(before.strip(), b.text) for e in summary.elements()
               for before, b in zip(e.children, e.children[1:], strict=False)
               if isinstance(before, str) and isinstance(b, Element) and b.tag == "b"}
    alloc = script_json(body, "allocation-data")
    for label, value in (("window", call.window), ("output reserve", call.output_reserve),
                         ("safety margin", call.safety_margin), ("input cap", call.input_cap),
                         ("in context", alloc["used"]), ("headroom", alloc["headroom"]),
                         ("input", call.input_tokens), ("effective limit", call.figures.effective_limit)):
        assert (label, str(value)) in figures, label
    assert f"({call.cache_read_tokens} cached, {call.cache_write_tokens} written)" in summary.text
    changed = f" ({event.changed_segment} changed)" if event.changed_segment else ""
    assert cache_cause(summary) == (f"cause-{event.cause}", event.get_cause_display() + changed)
    detail = page.after(summary)[0]  # the cause's detail, right below the line
    assert (detail.tag, detail.get("class"), detail.raw_text) == ("p", "hint", event.detail)


def test_it_names_each_cache_cause_of_the_demo(demo_world):
    causes = {"research-019/step-1": "Prefix changed (system changed)", "research-approval/step-4": "TTL expired",
              "ops-refunds-watch/step-0": "Cold start",
              "coder-list-endpoint/step-0": "Below the minimum cacheable prefix"}
    for call_id, shown in causes.items():
        assert cache_cause(parse(get(demo_world, call_id)).one("div.summary-line"))[1] == shown, call_id
    assert cache_cause(parse(get(demo_world, "ops-refunds-watch/step-1")).one("div.summary-line"))[0] == "cause-hit"


def test_it_lists_the_risks_apart_from_the_evidence_that_was_lost(demo_world):
    body = get(demo_world, "research-001/step-1")
    page = parse(body)
    risks = {li.one("b").text: li for li in page.select("ul#risks li")}
    assert risks["app_refund_rate"].one("span.badge").text == "Placed in the middle zone (risk)"
    assert risks["app_refund_rate"].text.startswith("Placed in the middle zone (risk) app_refund_rate in memory: ")
    row = page.one('tr[data-evidence="app_refund_rate"]')
    assert row.one("span.present").text == "present"
    cause = cells(row)[5]
    assert cause.one("span.hint").text == cause.text == "–"  # no cause: it reached the model


def test_it_shows_a_compactions_figures_and_each_invariant(demo_world):
    body = get(demo_world, "coder-list-endpoint/step-6")
    card = parse(body).one("div.card[data-compaction]")
    heading = card.text.split(card.one("table").text, 1)[0]  # the card's line above its table
    assert "· model summary · trigger: occupancy 0.83 >= 0.80 · 474 → 197 tokens" in heading
    assert "r = 0.42 · d = 0.25 · summary item summary-step-6 · kept 1 turns" in heading
    results = {cells(tr)[0].text: cells(tr)[1].one(".badge").text for tr in card.select("tbody tr")}
    assert results["user_constraints"] == "failed" and results["pending_obligations"] == "ok"
    assert "No compaction in this call." in get(demo_world, "coder-list-endpoint/step-5")


def test_it_shows_the_context_edits(demo_world):
    body = get(demo_world, "ops-refunds-watch/step-100")
    edit = next(p for p in parse(body).select("p") if p.text.startswith("Context edit "))
    assert edit.one("b").text == "clear_tool_uses_20250919"
    assert edit.text.startswith(
        "Context edit clear_tool_uses_20250919: cleared 96 (2976 tokens), kept 4: poll-76, poll-77")


def test_it_shows_the_prefix_segment_and_the_lines_that_changed(demo_world):
    body = get(demo_world, "research-019/step-1")
    page = parse(body)
    rows = {tuple(td.text for td in cells(tr)[:3]): cells(tr)[3] for tr in page.select("table#diff tbody tr")}
    hashes = [code.text for code in rows[("prefix", "segment system", "")].select("code")]
    assert len(hashes) == 2 and all(len(h) == 14 and h.endswith("…") and h[:-1].isalnum() for h in hashes)
    (li,) = [li for li in page.select('[data-testid="prefix-line-diff"] li') if li.select("b")]
    assert li.one("b").text == "system" and li.text.startswith("line ") and " of system changed: " in li.text
    line = li.text.split()[1]
    old, new = (code.raw_text for code in li.select("code"))
    assert li.text == f"line {line} of system changed: {old} → {new}"
    assert line.isdigit() and old.startswith("Current time: ") and new.startswith("Current time: ")
    # The cause names the line the diff shows, with its old and new text.
    event = CacheEvent.objects.get(call__project=demo_world.project, call__call_id="research-019/step-1")
    assert event.detail.startswith(f"system prompt line {line} changed: '{old}' → '{new}'")
    # A call whose prefix stayed the same shows no line diff.
    assert 'data-testid="prefix-line-diff"' not in get(demo_world, "research-001/step-1")


FILTERS = "agent=a%3Cb&range=7d"


def test_it_carries_the_filters_along_every_link(demo_world):
    slug = demo_world.project.slug
    client = demo_world.client(demo_world.member)
    page = parse(client.get(f"/p/{slug}/calls/coder-list-endpoint/step-7/?range=7d&agent=a%3Cb").content)
    crumb = {a.get("id"): a.get("href") for a in page.one("p.crumb").select("a[id]")}
    assert crumb == {"run-link": f"/p/{slug}/runs/coder-list-endpoint/?{FILTERS}",
                     "prev-call": f"/p/{slug}/calls/coder-list-endpoint/step-6/?{FILTERS}",
                     "next-call": f"/p/{slug}/calls/coder-list-endpoint/step-8/?{FILTERS}"}
    assert page.one("a#compare-link").get("href") == f"/p/{slug}/compare/?b=coder-list-endpoint/step-7&{FILTERS}"
    links = {a.get("href") for a in page.select("a[href]")}
    assert f"/p/{slug}/evidence/?key=api_compat&run=coder-list-endpoint&{FILTERS}" in links
    assert f"/p/{slug}/calls/coder-list-endpoint/step-6/?{FILTERS}" in {a.get("href") for a in page.select("a.lost-at")}
    hashes = [a.get("href") or "" for a in page.select("a.hash[href]")]
    assert hashes and all(h.startswith(f"/p/{slug}/evidence/?q=") and h.endswith(f"&{FILTERS}") for h in hashes)
    # Without filters the links carry none.
    plain = parse(client.get(f"/p/{slug}/calls/coder-list-endpoint/step-7/").content)
    assert plain.one("a#prev-call").get("href") == f"/p/{slug}/calls/coder-list-endpoint/step-6/"
    assert f"/p/{slug}/calls/coder-list-endpoint/step-6/" in {a.get("href") for a in plain.select("a.lost-at")}
    assert plain.one("a#compare-link").get("href") == f"/p/{slug}/compare/?b=coder-list-endpoint/step-7"
    assert all("&" not in (a.get("href") or "") for a in plain.select("a.hash[href]"))


def _item(item_id: str, position: int | None, **fields: Any) -> dict[str, Any]:
    item = {"id": item_id, "kind": "tool_result", "action": "keep", "requested_tokens": 50, "used_tokens": 50,
            "zone": "middle", "position": position, "content_hash": f"{len(item_id):064x}", "reason": "kept"}
    item.update(fields)
    return {k: v for k, v in item.items() if v is not None}


def _page(owner, project, call_id: str) -> str:
    client = Client()
    client.force_login(owner)
    r = client.get(f"/p/{project.slug}/calls/{call_id}/")
    assert r.status_code == 200
    return r.content.decode()


def test_it_says_what_entered_left_and_changed_item_by_item(owner, project):
    before = manifest("diff-run/step-0", run_id="diff-run", step=0)
    before["items"] = [
        _item("stays", 0), _item("goes", 1), _item("was-dropped", None, action="drop", used_tokens=0),
        _item("moves", 2), _item("shrinks", 3, used_tokens=40), _item("squeezed", 4), _item("pushed-out", 5),
        _item("rewritten", 6), _item("<b>x</b>", 7),
    ]
    before["evidence"] = [{"key": "lost-key", "label": "l", "present": True},
                          {"key": "found-key", "label": "f", "present": False}]
    after = manifest("diff-run/step-1", run_id="diff-run", step=1)
    after["items"] = [
        _item("stays", 0), _item("was-dropped", 1), _item("moves", 2, zone="tail"),
        _item("shrinks", 3, used_tokens=None, granted_tokens=None), _item("squeezed", 4, action="summarize"),
        _item("pushed-out", None, action="drop", used_tokens=0), _item("rewritten", 6, content_hash="f" * 64),
        _item("fresh", 8),
    ]
    after["evidence"] = [{"key": "lost-key", "label": "l", "present": False},
                         {"key": "found-key", "label": "f", "present": True}]
    segments = after["prefix"]["segments"]
    segments[0]["hash"] = "d" * 64  # system changed
    del segments[1]  # tools gone
    segments.append({"name": "extra", "hash": "e" * 64, "tokens": 10})  # a new segment
    store_and_analyse(project, [before, after])

    page = _page(owner, project, "diff-run/step-1")
    diff = parse(page).one("table#diff")
    rows = {(change.one(".badge").text, item.text): what.text
            for change, item, _, what in (cells(tr) for tr in diff.select("tbody tr"))}
    assert rows == {
        ("entered", "was-dropped"): "was drop",
        ("entered", "fresh"): "new candidate",
        ("left", "goes"): "no longer a candidate",
        ("left", "pushed-out"): "drop",
        ("left", "<b>x</b>"): "no longer a candidate",  # shown as text
        ("changed", "moves"): "zone middle → tail",
        ("changed", "shrinks"): "used 40 → –",
        ("changed", "squeezed"): "action keep → summarize",
        ("changed", "rewritten"): "content changed",
        ("prefix", "segment system"): "bbbbbbbbbbbbb… → ddddddddddddd…",
        ("prefix", "segment extra"): "– → eeeeeeeeeeeee…",
        ("prefix", "segment tools"): "ccccccccccccc… → –",
        ("evidence", "lost-key"): "now missing",
        ("evidence", "found-key"): "now present",
    }
    prefix_hashes = [cells(tr)[3] for tr in diff.select("tbody tr") if cells(tr)[0].text == "prefix"]
    assert len(prefix_hashes) == 3 and all(len(what.select("code")) == 2 for what in prefix_hashes)
    assert "stays" not in diff.text
    # The badges say which way each change went.
    badges = {tuple(td.text for td in cells(tr)[:2]): cells(tr)[0].one(".badge").get("class")
              for tr in diff.select("tbody tr")}
    assert badges[("entered", "fresh")] == "badge ok" and badges[("left", "goes")] == "badge bad"
    assert badges[("evidence", "lost-key")] == "badge bad" and badges[("evidence", "found-key")] == "badge ok"


def test_it_says_when_nothing_changed_since_the_previous_call(owner, project):
    first = manifest("same-run/step-0", run_id="same-run", step=0)
    second = manifest("same-run/step-1", run_id="same-run", step=1)
    store_and_analyse(project, [first, second])
    body = _page(owner, project, "same-run/step-1")
    assert 'id="diff"' not in body
    assert (f'Nothing entered, left or changed since <a href="/p/{project.slug}/calls/same-run/step-0/">step 0</a>.'
            in body)
    first_page = _page(owner, project, "same-run/step-0")
    assert "First call of the run." in first_page and 'id="compare-link"' not in first_page


def test_it_colours_the_allocation_by_what_was_done_to_each_item(owner, project):
    m = manifest("alloc-1", run_id="alloc-run")
    m["budget"] = {"window": 1000, "output_reserve": 200, "safety_margin": 50}
    m["items"] = [
        _item("whole", 0, zone="head", requested_tokens=100, granted_tokens=100, used_tokens=100),
        _item("short", 1, requested_tokens=100, granted_tokens=60, used_tokens=60),
        _item("cut", 2, action="truncate", requested_tokens=100, used_tokens=30, zone="tail"),
        _item("folded", 3, action="summarize", requested_tokens=100, used_tokens=20, zone="tail"),
        _item("dropped", None, action="drop", requested_tokens=80, used_tokens=0, zone=None),
        _item("not-sent", None, requested_tokens=70, granted_tokens=0, used_tokens=0, zone=None),
    ]
    m["evidence"] = []
    m["usage"] = {"input_tokens": 260, "cache_read_tokens": 0, "cache_write_tokens": 0, "output_tokens": 10}
    store_and_analyse(project, [m])
    alloc = script_json(_page(owner, project, "alloc-1"), "allocation-data")
    groups = {r["id"]: (r["group"], r["zone"], r["used"], r["in_context"]) for r in alloc["items"]}
    assert groups == {
        "whole": ("whole", "head", 100, True), "short": ("cut", "middle", 60, True),
        "cut": ("cut", "tail", 30, True), "folded": ("summarized", "tail", 20, True),
        "dropped": ("dropped", "not sent", 0, False), "not-sent": ("dropped", "not sent", 0, False),
    }
    assert [r["id"] for r in alloc["items"]] == ["whole", "short", "cut", "folded", "dropped", "not-sent"]
    assert alloc["zones"] == {"head": 100, "middle": 60, "tail": 50}
    # Headroom is measured from the input the provider read: 210 tokens of items and 50 more.
    assert (alloc["used"], alloc["input_read"], alloc["unitemized"]) == (210, 260, 50)
    assert (alloc["input_cap"], alloc["headroom"], alloc["margin"]) == (750, 490, 50)
    assert alloc["groups"]["cut"] == "compressed or cut"


EVIDENCE_URL = "/p/x/evidence/"


def _rows(items: list[Item], qs_amp: str = "") -> list[Element]:
    for i in items:
        i.in_context = i.action not in ("drop", "dedupe", "clear")
    return parse(str(item_rows(items, None, 0, EVIDENCE_URL, qs_amp))).select("tr")


def tags(cell: Element) -> list[str]:
    return [e.tag for e in cell.elements()]


def test_it_writes_each_item_row_with_every_field_shown_and_escaped():
    # Markup and entities in every value: escaped, each reads back as written, with no element of its own.
    hostile = Item(item_id="<b>x</b>&amp;'\"", kind="<k>", action="a&amp;b", priority=7, requested_tokens=12,
                   granted_tokens=None, used_tokens=None, position=None, zone="<z>", trust="untrusted", pinned=True,
                   group="g<1>", reason="keep: <ok> &amp; fine", text="t<x>\n&amp;y", source_ref="r<" + "x" * 60,
                   source_version="v<2>", content_hash="a b/c?d&amp;e=" + "f" * 30)
    (row,) = _rows([hostile], "&range=7d&agent=a&lt;b")
    assert (row.get("class"), row.get("data-item")) == ("untrusted", hostile.item_id)
    position, zone, name, kind, action, priority, requested, granted, used, trust, reason, ref = cells(row)
    assert (position.text, granted.text, used.text) == ("–", "–", "–")  # none recorded
    assert (priority.text, requested.text) == ("7", "12")
    assert tags(zone) == ["span"] and zone.one("span").classes == ["zone", "zone-<z>"] and zone.text == "<z>"
    assert name.children[0] == hostile.item_id + " "
    assert [(e.tag, e.get("class"), e.text) for e in name.elements()] == [
        ("span", "badge", "pinned"), ("br", None, ""), ("span", "hint", "group g<1>")]
    assert name.one("span.badge").get("title") == "pinned: always kept"
    assert kind.raw_text == "<k>" and tags(kind) == []
    assert tags(action) == ["span"] and action.one("span").classes == ["action", "action-a&amp;b"]
    assert action.raw_text == "a&amp;b"
    assert "⚠ untrusted" in trust.text
    assert tags(reason) == ["details", "summary", "pre"] and reason.children[0] == hostile.reason
    assert reason.one("details.text summary").text == f"text sent ({len(hostile.text)} chars)"
    assert reason.one("pre").raw_text == hostile.text
    assert tags(ref) == ["code", "span", "br", "a"]
    code, version, _, link = ref.elements()
    assert code.raw_text == hostile.source_ref[:47] + "…"  # cut to 48 characters
    assert version.get("class") == "hint" and version.raw_text == "v<2>"
    assert link.classes == ["hash"] and link.get("title") == "find this content elsewhere"
    assert link.get("href") == f"{EVIDENCE_URL}?q=a%20b/c%3Fd%26amp%3Be%3D{'f' * 30}&range=7d&agent=a&lt;b"
    assert link.raw_text == hostile.content_hash[:13] + "…"  # cut to 14 characters


def test_it_marks_the_items_not_sent_and_leaves_out_what_was_not_recorded():
    plain = Item(item_id="memory", kind="memory", action="keep", priority=0, requested_tokens=5, granted_tokens=4,
                 used_tokens=3, position=2, zone="", trust="trusted", pinned=False, group=None, reason="",
                 text=None, source_ref=None, source_version="v9", content_hash=None)
    dropped = Item(item_id="old", kind="history", action="drop", priority=1, requested_tokens=9, granted_tokens=0,
                   used_tokens=0, position=None, zone=None, trust="trusted", pinned=False, group=None,
                   reason="over budget", text="", source_ref="kb://a", source_version=None, content_hash="abc")
    sent, absent = _rows([plain, dropped])
    assert (sent.get("class"), sent.get("data-item")) == ("", "memory")
    position, zone, name, _, _, _, _, granted, used, trust, reason, ref = cells(sent)
    assert (position.text, granted.text, used.text) == ("2", "4", "3")
    assert zone.one("span").classes == ["zone", "zone-"] and zone.text == "–"
    assert name.text == "memory" and tags(name) == []
    assert tags(trust) == ["span"] and trust.one("span.hint").text == "trusted"
    assert reason.children == [] and ref.children == []  # no text, no ref (its version alone is not shown), no hash
    assert (absent.get("class"), absent.get("data-item")) == (" absent", "old")
    _, zone, _, _, _, _, _, _, _, _, reason, ref = cells(absent)
    assert tags(zone) == ["span"] and zone.one("span.hint").text == "not sent"
    assert tags(reason) == ["details", "summary", "pre"] and reason.children[0] == "over budget"
    assert reason.one("summary").text == "text sent (0 chars)" and reason.one("pre").children == []
    assert tags(ref) == ["code", "br", "a"] and ref.one("code").text == "kb://a"
    link = ref.one("a.hash")
    assert (link.get("href"), link.get("title"), link.text) == (
        f"{EVIDENCE_URL}?q=abc", "find this content elsewhere", "abc")
