"""The Content Security Policy is sent and every page satisfies it: no violation reported by
Chromium (as a console error or a securitypolicyviolation event), charts and the API
reference included."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

PAGES = ["", "runs/", "runs/coder-list-endpoint/", "calls/refunds-budget-800/step-6/", "evidence/", "cache/",
         "compactions/", "live/"]


def watch_violations(page) -> list[str]:
    seen: list[str] = []
    page.expose_function("reportViolation", lambda text: seen.append(text))
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation',"
        " e => window.reportViolation(e.violatedDirective + ' ' + e.blockedURI));"
    )
    return seen


@pytest.mark.parametrize("path", PAGES)
def test_each_page_satisfies_the_content_security_policy(site, watched, path):
    page = watched.page
    violations = watch_violations(page)
    response = page.goto(site.project_url(path))
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-eval" not in policy
    if path in ("", "runs/coder-list-endpoint/", "calls/refunds-budget-800/step-6/", "cache/"):
        watched.charts()
    page.wait_for_load_state("networkidle")
    assert violations == [] and watched.errors == [], (violations, watched.errors)


def test_the_api_reference_works_offline_within_the_policy(site, watched):
    page = watched.page
    violations = watch_violations(page)
    external: list[str] = []
    page.on("request", lambda r: external.append(r.url) if not r.url.startswith(site.url) else None)
    page.goto(f"{site.url}/api/docs/")
    page.locator(".opblock-summary-path", has_text="/api/v1/manifests").first.wait_for(timeout=15_000)
    page.wait_for_load_state("networkidle")
    watched.shot("api-docs")
    assert external == [] and violations == [] and watched.errors == [], (external, violations, watched.errors)
