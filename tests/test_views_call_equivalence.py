"""The call view renders the same bytes as the reference call view. The call view reads items
as tuples, diffs with the previous call from compact tuples, writes the item rows with
one tag and reads the previous / next / lost-at calls within the run's time span; the
reference (plain selectors, view and template) is in tests/call_view_reference.py and
served at the same URL by tests/call_view_reference_urls.py."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, override_settings

from manifests import analysis, ingest
from manifests.models import Call
from tests.conftest import make_manifest
from tests.views_support import demo_world_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

REFERENCE = {
    "ROOT_URLCONF": "tests.call_view_reference_urls",
    "TEMPLATES": [{**settings.TEMPLATES[0],
                   "DIRS": [*settings.TEMPLATES[0]["DIRS"], Path(__file__).parent / "reference_templates"]}],
}
# The CSRF token in the logout form is masked afresh on every response.
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"')


def _body(client: Client, url: str) -> bytes:
    r = client.get(url)
    assert r.status_code == 200, url
    return CSRF.sub('name="csrfmiddlewaretoken" value="-"', r.content.decode()).encode()


def assert_same_pages(client: Client, urls: list[str]) -> None:
    now = [_body(client, url) for url in urls]
    with override_settings(**REFERENCE):
        before = [_body(client, url) for url in urls]
    for url, a, b in zip(urls, now, before, strict=True):
        assert a == b, url


def test_it_renders_the_demo_calls_as_the_reference(demo_world):
    client = demo_world.client(demo_world.member)
    slug = demo_world.project.slug
    every = list(Call.objects.filter(project=demo_world.project).order_by("pk").values_list("call_id", flat=True))
    # Every step of the runs the other call-view tests describe, and one call in ten of the
    # rest (the demo has over a thousand: all of them, twice, would be minutes of the suite).
    runs = ("coder-list-endpoint/", "refunds-budget-800/", "research-001/")
    calls = [c for n, c in enumerate(every) if c.startswith(runs) or n % 10 == 0]
    assert len(calls) > 100
    urls = [f"/p/{slug}/calls/{c}/" for c in calls]
    # With filters the links carry them along (qs_amp, qs_suffix).
    urls += [f"/p/{slug}/calls/{c}/?range=7d&agent=a%3Cb" for c in calls[:5]]
    assert_same_pages(client, urls)
    # The pages do show what is compared: rows, a diff, a lost-at link, a compaction.
    body = b"".join(_body(client, u) for u in urls).decode()
    for mark in ('data-item="', 'id="diff"', 'class="lost-at"', "data-compaction=", 'id="next-call"'):
        assert mark in body, mark


HOSTILE = ['<script>x</script>', 'a&b "q" \'s\'', "é ü\u0301", ""]


def _varied_run(rng: random.Random, run_id: str, steps: int) -> list[dict]:
    """A run whose items enter, leave and change between steps: actions, zones, tokens,
    hashes, texts and refs vary, ids repeat within a call, values are hostile."""
    out = []
    pool = [f"it-{k}" for k in range(40)] + [f"{h}|{k}" for k, h in enumerate(HOSTILE)]
    for step in range(steps):
        m = make_manifest(f"{run_id}/step-{step}", run_id=run_id, step=step, items=rng.randint(0, len(pool)))
        for item, item_id in zip(m["items"], rng.sample(pool, len(m["items"])), strict=True):
            item["id"] = item_id
            item["action"] = rng.choice(["keep", "keep", "summarize", "truncate", "drop", "dedupe", "compress", "ref"])
            item["zone"] = rng.choice(["head", "middle", "tail", None])
            item["position"] = rng.choice([None, rng.randint(0, 60)])
            item["requested_tokens"] = rng.randint(1, 400)
            item["granted_tokens"] = rng.choice([None, 0, rng.randint(1, item["requested_tokens"])])
            ceiling = item["granted_tokens"] if item["granted_tokens"] is not None else item["requested_tokens"]
            item["used_tokens"] = rng.choice([None, 0, rng.randint(0, ceiling)])
            item["content_hash"] = rng.choice([None, f"{rng.randint(0, 3):064x}"])
            item["reason"] = rng.choice(HOSTILE + ["kept"])
            if rng.random() < 0.3:
                item["text"] = rng.choice(HOSTILE)
            if rng.random() < 0.3:
                item["source_ref"] = rng.choice(HOSTILE + ["kb://docs/" + "x" * 60])
                item["source_version"] = rng.choice([None, "v<2>"])
            if rng.random() < 0.2:
                item["pinned"] = True
            for key in [k for k, v in item.items() if v is None]:
                del item[key]
        m["evidence"] = [{"key": f"ev-{k}", "label": rng.choice(HOSTILE), "present": rng.random() < 0.5,
                          "expected_item": rng.choice([i["id"] for i in m["items"]])}
                         for k in range(rng.randint(0, 3) if m["items"] else 0)]
        segments = m["prefix"]["segments"]
        if rng.random() < 0.4:
            segments[rng.randint(0, 1)]["hash"] = f"{rng.randint(0, 9):064x}"
        if rng.random() < 0.2:
            segments.append({"name": "extra", "hash": "e" * 64, "tokens": 10})
        out.append(m)
    return out


def test_it_renders_calls_whose_items_vary_from_step_to_step_as_the_reference(project, owner):
    rng = random.Random(13)
    manifests = [m for r in range(4) for m in _varied_run(rng, f"run-{r}", steps=6)]
    report = ingest.ingest_body(project=project, body=json.dumps({"manifests": manifests}).encode())
    assert report.count(ingest.ACCEPTED) == len(manifests), [r.errors for r in report.results if r.errors][:3]
    analysis.analyze_calls(list(Call.objects.filter(project=project).values_list("pk", flat=True)))
    client = Client()
    client.force_login(owner)
    urls = [f"/p/{project.slug}/calls/{m['call_id']}/" for m in manifests]
    assert_same_pages(client, urls)
    body = b"".join(_body(client, u) for u in urls).decode()
    for mark in ('badge ok">entered', 'badge bad">left', 'badge warn">changed', 'badge warn">prefix',
                 'id="items-folded"', "&lt;script&gt;x&lt;/script&gt;"):
        assert mark in body, mark
