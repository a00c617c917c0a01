"""What fixing each cause is worth, on the demo: the regression card, the cache page's miss
causes, the evidence page's causes and the overview's top fixes (docs/analysis.md, "The
saving of a fix"). Each figure is recomputed here from the stored calls' usage and the
price book, with the arithmetic written out, not through ctxview's own functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.template.defaultfilters import floatformat
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from manifests.analysis.prices import PriceBook
from manifests.models import Attribution, CacheEvent, Call, Compaction, Regression, ReRead
from manifests.selectors import savings
from manifests.selectors.filters import Filters
from manifests.storage import partitions
from tests.html_page import Element, parse
from tests.support import manifest, store_and_analyse

pytestmark = pytest.mark.django_db

DAYS = 7
FIXABLE_MISSES = ("prefix_changed", "ttl_expired", "cold_start")
MISSING = ("never_candidate", "left_candidates", "budget", "truncated", "compaction")


def miss_saving(call: Call, book: PriceBook) -> float:
    """Paid for the prefix not read from the cache, less reading it: the tokens it wrote
    at (write − read) price, then the ones it sent uncached at (input − read) price."""
    price = book.for_model(call.model)
    missed = max(0, call.prefix_tokens - call.cache_read_tokens)
    written = min(call.cache_write_tokens, missed)
    uncached = max(0, call.input_tokens - call.cache_read_tokens - call.cache_write_tokens)
    sent = min(uncached, missed - written)
    return (written * (price.cache_write_per_1k - price.cache_read_per_1k)
            + sent * (price.input_per_1k - price.cache_read_per_1k)) / 1000


def paid(call: Call, book: PriceBook) -> float:
    price = book.for_model(call.model)
    uncached = max(0, call.input_tokens - call.cache_read_tokens - call.cache_write_tokens)
    return (uncached * price.input_per_1k + call.cache_read_tokens * price.cache_read_per_1k
            + call.cache_write_tokens * price.cache_write_per_1k + call.output_tokens * price.output_per_1k) / 1000


def week() -> datetime:
    return timezone.now() - timedelta(days=DAYS)


def misses(project, since: datetime | None = None, **where) -> list[Call]:
    since = max(week(), since) if since is not None else week()
    events = CacheEvent.objects.filter(project=project, cause__in=FIXABLE_MISSES, started_at__gte=since, **where)
    return list(Call.objects.filter(pk__in=[e.call_id for e in events]))


def expected(calls: list[Call], amount) -> dict[str, str]:
    return {"cost": floatformat(sum(amount(c) for c in calls) / DAYS, 2),
            "calls": floatformat(len(calls) / DAYS, 1),
            "runs": floatformat(len({c.run_id for c in calls}) / DAYS, 1)}


def shown(part: Element) -> dict[str, str]:
    """The saving figures in one card or row of a page (the first of each)."""
    return {name: part.select(f".saving-{name}")[0].text for name in ("cost", "calls", "runs")}


def rows_by_cause(body: str, table: str) -> dict[str, Element]:
    return {tr.get("data-cause"): tr for tr in parse(body).select(f"#{table} tr[data-cause]")}


def page(client: Client, slug: str, name: str) -> str:
    return client.get(reverse(name, args=[slug])).content.decode()


def test_it_states_what_fixing_the_regression_is_worth_on_its_card(demo_world):
    project, book = demo_world.project, PriceBook.load()
    regression = Regression.objects.get(project=project, agent="researcher")
    first = regression.first_call or regression.call
    calls = [c for c in misses(project, first.started_at, cause=regression.cause)
             if (c.agent, c.model) == (regression.agent, regression.model)]
    assert calls, "the demo's regression has misses after its first bad call"
    want = expected(calls, lambda c: miss_saving(c, book))
    assert float(want["cost"]) > 0
    client = demo_world.client(demo_world.member)
    card = parse(page(client, project.slug, "cache")).one(f'div.card[data-regression="{regression.pk}"]')
    assert shown(card) == want
    item = parse(page(client, project.slug, "overview")).one(f'li[data-regression="{regression.pk}"]')
    assert shown(item) == want


def test_it_states_what_fixing_each_cache_miss_cause_is_worth(demo_world):
    project, book = demo_world.project, PriceBook.load()
    body = page(demo_world.client(demo_world.member), project.slug, "cache")
    causes = rows_by_cause(body, "miss-savings")
    assert "prefix_changed" in causes and "ttl_expired" in causes
    for cause, row in causes.items():
        assert shown(row) == expected(misses(project, cause=cause), lambda c: miss_saving(c, book)), cause


def test_it_states_what_fixing_each_cause_of_missing_evidence_is_worth(demo_world):
    project, book = demo_world.project, PriceBook.load()
    body = page(demo_world.client(demo_world.member), project.slug, "evidence")
    causes = rows_by_cause(body, "evidence-savings")
    assert "compaction" in causes and len(causes) >= 2
    for cause, row in causes.items():
        pks = Attribution.objects.filter(project=project, cause=cause, is_risk=False, started_at__gte=week()
                                         ).values_list("call_id", flat=True)
        calls = list(Call.objects.filter(pk__in=set(pks)))
        assert shown(row) == expected(calls, lambda c: paid(c, book)), cause


def test_it_lists_the_top_fixes_by_saving_each_linking_to_its_first_bad_call(demo_world):
    project, book = demo_world.project, PriceBook.load()
    fixes = []
    for cause in FIXABLE_MISSES:
        calls = misses(project, cause=cause)
        if calls:
            fixes.append((f"cache:{cause}", sum(miss_saving(c, book) for c in calls) / DAYS, len(calls) / DAYS,
                          min(calls, key=lambda c: (c.started_at, c.pk)).call_id))
    for cause in MISSING:
        pks = set(Attribution.objects.filter(project=project, cause=cause, is_risk=False,
                                             started_at__gte=week()).values_list("call_id", flat=True))
        calls = list(Call.objects.filter(pk__in=pks))
        if calls:
            fixes.append((f"evidence:{cause}", 0.0, len(calls) / DAYS,
                          min(calls, key=lambda c: (c.started_at, c.pk)).call_id))
    fixes += compaction_fixes(project, book)
    fixes.sort(key=lambda f: (-f[1], -f[2]))
    body = page(demo_world.client(demo_world.member), project.slug, "overview")
    listed = [(li.get("data-fix"), li.one("a.first-bad-call").get("href"))
              for li in parse(body).select("#top-fixes li[data-fix]")]
    losses = sum(1 for f in fixes[5:] if f[0].startswith("compaction:") and f[1] < 0)  # always listed
    assert len(listed) == min(5, len(fixes)) + losses >= 3
    assert [name for name, _ in listed] == [f[0] for f in fixes[:len(listed)]]
    for (_, href), fix in zip(listed, fixes, strict=False):
        assert href.split("?")[0] == reverse("call-detail", args=[project.slug, fix[3]])
    assert fixes[0][1] > fixes[1][1] > 0  # ordered by a saving that differs, not by chance


def compaction_fixes(project, book: PriceBook) -> list[tuple[str, float, float, str]]:
    """Per agent, model, strategy and trigger whose compactions caused re-reads (one that caused
    none is no fix), the compactions of the seven days: the tokens they took out less the tokens of
    the re-reads whose loss names them, at the weight of an uncached input token, a day;
    compactions a day; the first of them followed by a re-read, else the first."""
    groups: dict[str, list] = {}
    for comp in Compaction.objects.filter(project=project, started_at__gte=week()).select_related("call"):
        reread = sum(ReRead.objects.filter(lost_call=comp.call, cause="compaction",
                                           cause_ref=comp.event_id).values_list("tokens", flat=True))
        name = f"compaction:{comp.call.agent}|{comp.call.model}|{comp.strategy}|{comp.trigger}"
        units = (comp.tokens_before - comp.tokens_after - reread) * book.for_model(comp.call.model).input_per_1k / 1000
        groups.setdefault(name, []).append((units, not reread, comp.started_at, comp.call.call_id))
    return [(name, sum(r[0] for r in rows) / DAYS, len(rows) / DAYS, min(r[1:] for r in rows)[2])
            for name, rows in groups.items() if not all(r[1] for r in rows)]


PAYLOAD = '<script>window.__pwned=1</script>'


def test_it_escapes_hostile_text_in_the_fixes(owner, project):
    now = datetime.now(UTC)
    calls = []
    for step in range(2):
        m = manifest(f"{PAYLOAD}/{step}", run_id=f"{PAYLOAD}-run", step=step, agent=PAYLOAD, items=6)
        m["started_at"] = (now - timedelta(minutes=10 - step)).isoformat()
        # A new prefix above the provider's minimum: the second call misses the cache.
        m["prefix"].update(hash=f"{step}" * 64, tokens=1500)
        m["prefix"]["segments"][0].update(hash=f"{step + 2}" * 64, tokens=1100)
        m["usage"] = {"input_tokens": 2000, "cache_read_tokens": 0, "cache_write_tokens": 1500, "output_tokens": 10}
        m["evidence"] = [{"key": PAYLOAD, "label": PAYLOAD, "expected_item": "item-5", "present": False}]
        calls.append(m)
    store_and_analyse(project, calls)
    assert CacheEvent.objects.filter(project=project, cause__in=FIXABLE_MISSES).count() == 2
    client = Client()
    client.force_login(owner)
    for name in ("overview", "cache", "evidence"):
        body = page(client, project.slug, name)
        assert "<script>window.__pwned" not in body, name
    overview = page(client, project.slug, "overview")
    assert "first bad call: &lt;script&gt;window.__pwned=1&lt;/script&gt;/0" in overview



def test_it_reads_only_the_seven_days_and_bounds_every_partitioned_read_by_time(project):
    now = datetime.now(UTC)

    def run(run_id: str, start: datetime) -> list[dict]:
        out = []
        for step in range(2):
            m = manifest(f"{run_id}/{step}", run_id=run_id, step=step, items=6)
            m["started_at"] = (start + timedelta(minutes=step)).isoformat()
            m["prefix"].update(hash=f"{step}" * 64, tokens=1500)
            m["prefix"]["segments"][0].update(hash=f"{step + 2}" * 64, tokens=1100)
            m["usage"] = {"input_tokens": 2000, "cache_read_tokens": 0, "cache_write_tokens": 1500,
                          "output_tokens": 10}
            m["evidence"] = [{"key": "k", "expected_item": "item-5", "present": False}]
            out.append(m)
        return out

    store_and_analyse(project, run("old", now - timedelta(days=DAYS, hours=3)))
    store_and_analyse(project, run("new", now - timedelta(hours=1)))
    assert CacheEvent.objects.filter(project=project, cause__in=FIXABLE_MISSES).count() == 4
    with CaptureQueriesContext(connection) as ctx:
        cache, evidence = savings.cache_causes(project, Filters()), savings.evidence_causes(project, Filters())
        compactions = savings.compaction_savings(project, Filters())
    # Only the recent run's two calls count, however many older ones the tables hold.
    assert sum(f.calls for f in cache) * DAYS == pytest.approx(2)
    assert {f.first_call_id for f in cache + evidence + compactions} <= {"new/0", "new/1"}
    assert sum(f.calls for f in compactions) * DAYS == pytest.approx(
        Compaction.objects.filter(project=project, call__run__run_id="new").count())
    assert sum(f.runs for f in evidence) * DAYS == pytest.approx(len(evidence))
    for table in partitions.PARTITIONED_TABLES:
        for sql in (q["sql"] for q in ctx.captured_queries if f'"{table}"' in q["sql"]):
            # A range, or the exact times of the rows read: either lets PostgreSQL prune.
            assert (f'"{table}"."started_at" >= ' in sql and f'"{table}"."started_at" < ' in sql) or \
                f'"{table}"."started_at" IN (' in sql, sql
