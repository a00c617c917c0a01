"""Take the screenshots of docs/dashboard.md from a running demo (not a test).

    make run                      # or: python manage.py seed_demo && python manage.py runserver
    .venv/bin/python tests/browser/docs_screenshots.py [--base http://127.0.0.1:8000] [--out docs/img]

Logs in as the demo user, follows the links the walkthrough describes and saves 1280x800
PNGs of the parts it talks about.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.browser.chromium import CHROMIUM, CHROMIUM_ARGS, VIEWPORT  # noqa: E402


def shot(page: Page, out: Path, name: str, anchor: str | None = None, offset: int = 10) -> None:
    if anchor:
        top = page.locator(anchor).first.evaluate("e => e.getBoundingClientRect().top + window.scrollY")
        page.evaluate(f"window.scrollTo(0, {max(0, top - offset)})")
    else:
        page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(400)
    page.screenshot(path=str(out / f"{name}.png"))
    print("saved", out / f"{name}.png")


def explore(page: Page, base: str, out: Path) -> None:
    """Search, the calls list a chart opens, the comparison, the empty and not-found states."""
    page.goto(f"{base}/p/demo/")
    page.fill("#find-q", "refunds-budget-")
    page.press("#find-q", "Enter")
    page.wait_for_selector("#search-results")
    shot(page, out, "find-results")
    page.goto(f"{base}/p/demo/calls/?range=all&cache=prefix_changed&sort=-input")
    page.wait_for_selector("#calls")
    shot(page, out, "calls-list")
    page.goto(f"{base}/p/demo/compare/?b=refunds-budget-800/step-6")
    page.wait_for_selector("#compare-items")
    shot(page, out, "compare")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{base}/p/demo/compare/?b=refunds-budget-800/step-6")
    shot(page, out, "compare-390", "h1", offset=10)
    page.set_viewport_size(VIEWPORT)
    page.goto(f"{base}/p/demo/?agent=nobody")
    page.wait_for_selector("#chart-hit .chart-empty")
    shot(page, out, "overview-empty", "h2 >> text=Cache hit rate", offset=200)
    page.goto(f"{base}/p/demo/calls/no-such/call/")
    shot(page, out, "not-found")


def live(page: Page, base: str, out: Path, key: str) -> None:
    """The live tail as calls arrive: three posted through the API while the page is open,
    at 1280 px, at 390 px and in dark mode."""
    browser = page.context.browser
    state = page.context.storage_state()
    for name, options in (("live", {"viewport": VIEWPORT}),
                          ("live-390px", {"viewport": {"width": 390, "height": 844}, "is_mobile": True}),
                          ("live-dark", {"viewport": VIEWPORT, "color_scheme": "dark"})):
        context = browser.new_context(storage_state=state, **options)
        other = context.new_page()
        other.goto(f"{base}/p/demo/live/")
        stamp = datetime.now(UTC)
        manifests = [{"schema": "ctxview.manifest/v1", "call_id": f"{name}-{stamp:%H%M%S}/step-{n}",
                      "run_id": f"{name}-{stamp:%H%M%S}", "step": n, "agent": "support-triage",
                      "model": "claude-sonnet-4-5", "started_at": datetime.now(UTC).isoformat(),
                      "budget": {"window": 8000, "output_reserve": 1000},
                      "usage": {"input_tokens": 1200 + 300 * n, "cache_read_tokens": 800 * min(n, 1),
                                "output_tokens": 90},
                      "items": [{"id": "system", "kind": "system", "action": "keep", "requested_tokens": 120,
                                 "pinned": True}]} for n in range(3)]
        request = urllib.request.Request(f"{base}/api/v1/manifests", method="POST",
                                         data=json.dumps({"manifests": manifests}).encode(),
                                         headers={"Authorization": f"Bearer {key}",
                                                  "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=30).close()
        other.wait_for_selector(f'#live tr[data-call="{manifests[-1]["call_id"]}"]')
        shot(other, out, name)
        context.close()


def proxy(page: Page, base: str, out: Path) -> None:
    """The Claude Code session ``ctxkit proxy`` captured (manifests/demo/claude_code.py): its run
    with the window per step, and the call after ``/compact`` that lost the watched fact."""
    fixture = ROOT / "manifests" / "demo" / "claude_code_session.jsonl"
    calls = [json.loads(line) for line in fixture.read_text().splitlines() if line.strip()]
    run_id, last = calls[0]["run_id"], max(calls, key=lambda c: c["step"])["call_id"]
    page.goto(f"{base}/p/demo/runs/{run_id}/")
    page.locator("#chart-window .main-svg").first.wait_for(state="attached")
    shot(page, out, "proxy-claude-code-run", "#chart-window", offset=60)
    page.goto(f"{base}/p/demo/calls/{last}/")
    shot(page, out, "proxy-claude-code-window", "#window-heading", offset=20)
    shot(page, out, "proxy-claude-code-compaction", "h2 >> text=Compactions and context edits", offset=20)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    parser.add_argument("--user", default="demo")
    parser.add_argument("--password", default="demo-password")
    parser.add_argument("--part", choices=["all", "walkthrough", "explore", "live", "proxy"], default="all",
                        help="the three questions' walkthrough, the find/compare/export pages, or both; "
                             "or the live tail (needs --key)")
    parser.add_argument("--key", default="", help="the demo project's ingest key (printed by `make run`)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = args.base.rstrip("/")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{base}/accounts/login/")
        page.fill("input[name=username]", args.user)
        page.fill("input[name=password]", args.password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")
        if args.part in ("live", "explore", "proxy"):
            {"live": lambda: live(page, base, out, args.key), "explore": lambda: explore(page, base, out),
             "proxy": lambda: proxy(page, base, out)}[args.part]()
            browser.close()
            return

        # The overview and its three questions.
        page.goto(f"{base}/p/demo/")
        page.locator("#chart-hit .main-svg").first.wait_for(state="attached")
        shot(page, out, "overview")
        shot(page, out, "overview-hit-rate", "#q-evidence", offset=60)

        # 1. Why was this evidence missing?
        page.click("text=Evidence triage →")
        page.fill("#evidence-search input[name=q]", "rate_limit")
        page.click("#evidence-search button")
        page.click("#search-keys >> text=rate_limit")
        page.locator("#chart-timeline .main-svg").first.wait_for(state="attached")
        shot(page, out, "q1-evidence-timeline", "h2 >> text=Evidence", offset=20)
        page.click('#timeline tr[data-step="6"] a')
        page.locator("#allocation-window .main-svg").first.wait_for(state="attached")
        shot(page, out, "q1-call-allocation", "h2 >> text=Allocation", offset=20)
        shot(page, out, "q1-call-evidence", "h2 >> text=Required evidence", offset=20)
        page.locator("#whatif-budget-num").fill("1200")
        page.locator("#whatif-budget-num").press("Enter")
        page.locator("#whatif-reserve-num").fill("240")
        page.locator("#whatif-reserve-num").press("Enter")
        page.wait_for_selector('#whatif[data-budget="1200"]')
        shot(page, out, "q1-whatif-1200", "h2 >> text=What if?", offset=20)

        # 2. Why did our cache hit rate drop?
        page.goto(f"{base}/p/demo/")
        page.click("text=Cache view →")
        page.locator("#chart-cache .main-svg").first.wait_for(state="attached")
        shot(page, out, "q2-cache")
        shot(page, out, "q2-regression", "h2 >> text=Regressions", offset=20)
        page.click("text=the call where it crossed the threshold")
        page.locator("#allocation-window .main-svg").first.wait_for(state="attached")
        shot(page, out, "q2-call-timestamp")

        # 3. Which compactions broke an invariant?
        page.goto(f"{base}/p/demo/")
        page.click("#q-compactions >> text=user_constraints")
        page.locator("#chart-compactions .main-svg").first.wait_for(state="attached")
        shot(page, out, "q3-compactions")
        page.click("#compactions >> text=coder-list-endpoint/step-6")
        page.locator("#allocation-window .main-svg").first.wait_for(state="attached")
        shot(page, out, "q3-call-compaction", "h2 >> text=Compactions and context edits", offset=20)

        # The run view.
        page.goto(f"{base}/p/demo/runs/coder-list-endpoint/")
        page.locator("#chart-steps .main-svg").first.wait_for(state="attached")
        shot(page, out, "run")
        if args.part == "all":
            explore(page, base, out)
            proxy(page, base, out)

        # The allocation bar of a call whose folded turns were not sent.
        page.goto(f"{base}/p/demo/calls/coder-list-endpoint/step-7/")
        page.locator("#allocation-window .main-svg").first.wait_for(state="attached")
        shot(page, out, "call-allocation-not-sent", "h2 >> text=Allocation", offset=20)

        # The settings page (the demo user owns the demo project).
        page.goto(f"{base}/p/demo/settings/")
        shot(page, out, "settings")

        # The call view on a phone and in dark mode.
        state = page.context.storage_state()
        for name, options in (("call-390px", {"viewport": {"width": 390, "height": 844}, "is_mobile": True}),
                              ("call-dark", {"viewport": VIEWPORT, "color_scheme": "dark"})):
            context = browser.new_context(storage_state=state, **options)
            other = context.new_page()
            other.goto(f"{base}/p/demo/calls/refunds-budget-800/step-6/")
            other.locator("#allocation-window .main-svg").first.wait_for(state="attached")
            shot(other, out, name)
            context.close()
        browser.close()


if __name__ == "__main__":
    main()
