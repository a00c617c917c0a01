"""The run view marks each step that re-read something after a loss (docs/analysis.md, "Re-reads")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.template.defaultfilters import floatformat
from django.test import Client
from django.utils import timezone

from ctxkit.models import format_usd, model_facts
from manifests.analysis.prices import PriceBook
from manifests.selectors import savings
from manifests.selectors.filters import Filters
from tests.analysis.support import item
from tests.analysis.test_rereads import run, tool_pair
from tests.html_page import parse
from tests.support import MODEL, store_and_analyse

pytestmark = pytest.mark.django_db


def compacted_run(project):
    """Step 2 compacts the Read result of step 1 away; step 3 reads the file again (410 tokens)."""
    return store_and_analyse(project, run(tool_pair(1), tool_pair(1), [item("sum", kind="summary", tokens=50)],
                                          [item("sum", kind="summary", tokens=50), *tool_pair(2, tokens=410)],
                                          compaction_at=2))


def test_it_marks_the_steps_that_reread_with_their_tokens_and_a_link_to_the_call(project, owner):
    calls = compacted_run(project)
    client = Client()
    client.force_login(owner)
    page = parse(client.get(f"/p/{project.slug}/runs/run-1/").content.decode())
    marks = {tr.get("data-step"): tr.select("a.reread-mark") for tr in page.select("#steps tr[data-step]")}
    assert [step for step, found in marks.items() if found] == ["3"]
    mark = marks["3"][0]
    assert (mark.get("data-rereads"), mark.get("data-reread-tokens")) == ("1", "410")
    assert mark.text.strip() == "↻ 1 re-read, 410 tokens"
    assert mark.get("href") == f"/p/{project.slug}/calls/{calls[3].call_id}/#rereads"
    assert mark.get("title") == "re-read: Read"
    assert " ".join(page.one("#run-rereads").text.split()).startswith(
        "1 re-read after loss in 1 step, 410 re-read tokens")
    # The link's target: the call page's re-read section.
    target = parse(client.get(mark.get("href")).content.decode())
    assert target.one("h2#rereads").text == "Re-reads"


def test_it_sorts_the_steps_by_their_reread_tokens(project, owner):
    compacted_run(project)
    client = Client()
    client.force_login(owner)
    page = parse(client.get(f"/p/{project.slug}/runs/run-1/?sort=-rereads").content.decode())
    assert page.select("#steps tr[data-step]")[0].get("data-step") == "3"


def test_it_says_so_when_a_run_reread_nothing(project, owner):
    store_and_analyse(project, run(tool_pair(1), [*tool_pair(1), *tool_pair(2)]))
    client = Client()
    client.force_login(owner)
    page = parse(client.get(f"/p/{project.slug}/runs/run-1/").content.decode())
    assert not page.select("a.reread-mark")
    assert page.one("#run-rereads").text == "No re-reads after loss in this run."


def test_it_answers_404_to_an_outsider_on_a_run_with_rereads(project, outsider):
    compacted_run(project)
    client = Client()
    client.force_login(outsider)
    assert client.get(f"/p/{project.slug}/runs/run-1/").status_code == 404


def compactions_a_day_ago(project, *, reread_tokens: int | None, agent: str, before: int = 5000,
                          after: int = 800) -> list:
    """A run of ``agent`` compacting ``before`` → ``after`` tokens an hour ago; with
    ``reread_tokens``, the file read before the compaction is read again after it."""
    again = tool_pair(2, tokens=reread_tokens) if reread_tokens is not None else [item("q", kind="user", tokens=30)]
    start = timezone.now() - timedelta(hours=1)
    return store_and_analyse(project, run(tool_pair(1), tool_pair(1), [item("sum", kind="summary", tokens=50)],
                                          [item("sum", kind="summary", tokens=50), *again], compaction_at=2,
                                          run_id=f"run-{agent}", agent=agent, start=start, before=before,
                                          after=after))


def compaction_fixes(client: Client, slug: str) -> list:
    return [li for li in parse(client.get(f"/p/{slug}/").content.decode()).select("#top-fixes li[data-fix]")
            if li.get("data-fix").startswith("compaction:")]


def test_it_ranks_compactions_in_the_top_fixes_by_net_saving(project, owner):
    compactions_a_day_ago(project, reread_tokens=410, agent="rereader")
    compactions_a_day_ago(project, reread_tokens=100, agent="light")
    compactions_a_day_ago(project, reread_tokens=None, agent="keeper")  # nothing re-read: nothing to fix
    client = Client()
    client.force_login(owner)
    fixes = compaction_fixes(client, project.slug)
    assert [li.get("data-fix") for li in fixes] == [f"compaction:light|{MODEL}|summary|",
                                                    f"compaction:rereader|{MODEL}|summary|"]
    # Per day over seven days: 4,200 tokens taken out, less what was re-read, at an input token's weight.
    weight = PriceBook.load().for_model(MODEL).input_per_1k / 1000
    assert [li.get("data-net-tokens") for li in fixes] == [floatformat(4100 / 7, 1), floatformat(3790 / 7, 1)]
    assert [li.one(".saving-cost").text for li in fixes] == [floatformat(4100 * weight / 7, 2),
                                                             floatformat(3790 * weight / 7, 2)]
    assert "re-reads of Read brought back 59" in " ".join(fixes[1].text.split())
    assert "Keeping the Read results through it saves the re-reads." in fixes[1].text
    listed = {s.cause for s in savings.compaction_savings(project, Filters())}
    assert f"keeper|{MODEL}|summary|" in listed  # the savings page still lists it


def test_it_says_when_a_compaction_cost_more_in_rereads_than_it_saved(project, owner):
    compactions_a_day_ago(project, reread_tokens=410, agent="loser", before=1000, after=700)
    for n in range(6):  # enough other fixes to fill the list: the losing compaction is still shown
        compactions_a_day_ago(project, reread_tokens=50, agent=f"rereader{n}")
    client = Client()
    client.force_login(owner)
    fixes = compaction_fixes(client, project.slug)
    last = fixes[-1]
    assert last.get("data-fix") == f"compaction:loser|{MODEL}|summary|"
    assert float(last.get("data-net-tokens")) == pytest.approx(round(-110 / 7, 1))
    assert float(last.one(".saving-cost").text) < 0 and last.one(".badge").get("class") == "badge bad"
    assert "This compaction cost more in re-reads than it saved: keep the Read results through it, or raise " \
           "its threshold." in " ".join(last.text.split())
    assert len(savings.top_fixes(project, Filters(), limit=1)) == 2  # the best fix, and the loss


def test_it_shows_the_net_saving_on_the_compaction_card_and_in_the_api(project, owner, api):
    calls = compacted_run(project)
    client = Client()
    client.force_login(owner)
    card = parse(client.get(f"/p/{project.slug}/calls/{calls[2].call_id}/").content.decode()).one(
        '[data-compaction="cmp-2"]')
    net = card.one("[data-net-saving]")
    assert net.get("data-net-saving") == "3790"  # 5,000 → 800, less 410 re-read
    weight = PriceBook.load().for_model(MODEL).input_per_1k / 1000
    assert f"({format_usd(3790 * usd_input(calls[2]))}, {floatformat(3790 * weight, 3)} units)" in net.text
    got = api.get(f"/api/v1/calls/{calls[2].call_id}").json()["compactions"][0]
    assert (got["reread_tokens"], got["net_saving"]) == (410, 3790)


def usd_input(call) -> float:
    """The USD price of one uncached input token of ``call``'s model, from genai-prices' table."""
    facts = model_facts(call.model, call.provider or None)
    return facts.prices_at(call.input_tokens, call.started_at).input
