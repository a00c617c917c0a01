"""The reference figures: computed straight from the stored manifests with ctxkit.figures.

No query of the server's derived tables is used here: the raw manifest of every call is
decoded and each figure is its one definition. The consistency tests compare what the
API, the pages and the rollups show with these.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from ctxkit import figures
from ctxkit.manifest import Manifest, decode_manifest
from ctxkit.models import model_facts
from manifests.analysis.prices import DEFAULT_PRICE
from manifests.analysis.rollups import day_start, hour_start
from manifests.models import Call, Project


@dataclass
class CallRef:
    call_id: str
    run_id: str
    step: int
    agent: str
    model: str
    started_at: datetime
    manifest: Manifest
    # (evidence key, cause, is_risk, lost at step, action, reason) for every attribution of the call
    causes: list[tuple[str, str, bool, int | None, str, str]] = field(default_factory=list)

    @property
    def context_tokens(self) -> int:
        return figures.total_context_tokens(self.manifest.items)

    @property
    def hit_rate(self) -> float | None:
        u = self.manifest.usage
        return figures.hit_rate(u.cache_read_tokens, u.input_tokens)

    @property
    def uncached(self) -> int:
        return figures.uncached_tokens(self.manifest.usage)

    @property
    def cost(self) -> float:
        return figures.cost_units(self.manifest.usage, DEFAULT_PRICE.weights)

    @property
    def cost_usd(self) -> float | None:
        """ctxkit.figures.cost_usd at the model's own USD prices (genai-prices' table), as of
        the call's date and for its input; None for a model the table does not know."""
        facts = model_facts(self.model, self.manifest.provider or None)
        u = self.manifest.usage
        return figures.cost_usd(u, facts.prices_at(u.input_tokens, self.started_at) if facts else None)

    @property
    def input_cap(self) -> int:
        return figures.budget_input_cap(self.manifest.budget)

    @property
    def input_read(self) -> int:
        return figures.input_read(self.manifest.usage.input_tokens, self.context_tokens)

    @property
    def headroom(self) -> int:
        return figures.headroom(self.input_cap, self.input_read)

    @property
    def window_utilization(self) -> float:
        return figures.window_utilization(self.input_read, self.manifest.budget.window)

    @property
    def reserve_share(self) -> float:
        return figures.reserve_share(self.manifest.budget.output_reserve, self.manifest.budget.window)

    @property
    def tool_share(self) -> float:
        tools = figures.total_context_tokens(i for i in self.manifest.items if i.kind == "tools")
        return figures.tool_share(tools, self.context_tokens)

    @property
    def missing(self) -> list[tuple[str, str, int | None]]:
        return sorted((k, c, s) for k, c, risk, s, _, _ in self.causes if not risk)

    @property
    def decisions(self) -> list[tuple[str, str, int | None, str, str]]:
        """The missing evidence with the decision each attribution states: (key, cause,
        lost at step, action, reason)."""
        return sorted((k, c, s, a, r) for k, c, risk, s, a, r in self.causes if not risk)

    @property
    def risks(self) -> list[tuple[str, str]]:
        return sorted((k, c) for k, c, risk, *_ in self.causes if risk)


def calls(project: Project) -> dict[str, CallRef]:
    """Every call of the project with its reference figures and causes."""
    rows = list(Call.objects.filter(project=project).select_related("run")
                .order_by("run_id", "step", "started_at", "pk"))
    out: dict[str, CallRef] = {}
    by_run: dict[int, list[CallRef]] = defaultdict(list)
    for c in rows:
        ref = CallRef(c.call_id, c.run.run_id, c.step, c.agent, c.model, c.started_at, decode_manifest(c.raw.encode()))
        out[c.call_id] = ref
        by_run[c.run_id].append(ref)
    for refs in by_run.values():
        for ref, row in zip(refs, figures.causes_of_run([r.manifest for r in refs]), strict=True):
            for key, causes in row:
                for cause in causes:
                    lost = refs[cause.lost_at].step if cause.lost_at is not None else None
                    reason = figures.stated_reason(cause, f"step {lost}" if lost is not None else None)
                    ref.causes.append((key, cause.cause, cause.is_risk, lost, cause.action, reason))
    return out


def buckets(refs: dict[str, CallRef], bucket: str) -> dict[tuple[datetime, str, str], dict]:
    """Rollup-shaped sums per (bucket start, agent, model)."""
    floor = hour_start if bucket == "hour" else day_start
    out: dict[tuple[datetime, str, str], dict] = {}
    for r in refs.values():
        u, m = r.manifest.usage, r.manifest
        b = out.setdefault((floor(r.started_at), r.agent, r.model), {
            "calls": 0, "items": 0, "input_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
            "output_tokens": 0, "uncached_input_tokens": 0, "cost": 0.0, "cost_usd": 0.0,
            "verified_successes": 0,
            "evidence_total": 0, "evidence_present": 0, "compactions": 0, "invariant_failures": 0,
            "attributions": Counter(), "tokens_by_kind": Counter(),
        })
        b["calls"] += 1
        b["items"] += len(m.items)
        b["input_tokens"] += u.input_tokens
        b["cache_read_tokens"] += u.cache_read_tokens
        b["cache_write_tokens"] += u.cache_write_tokens
        b["output_tokens"] += u.output_tokens
        b["uncached_input_tokens"] += r.uncached
        b["cost"] += r.cost
        b["cost_usd"] += r.cost_usd or 0.0
        b["verified_successes"] += int(m.outcome is not None and m.outcome.verified == "yes")
        b["evidence_total"] += len(m.evidence)
        b["evidence_present"] += sum(1 for e in m.evidence if e.present)
        b["compactions"] += len(m.compactions)
        b["invariant_failures"] += sum(1 for c in m.compactions for i in c.invariants if not i.ok)
        for _, cause, *_ in r.causes:
            b["attributions"][cause] += 1
        for item in m.items:
            if figures.context_tokens(item):
                b["tokens_by_kind"][item.kind] += figures.context_tokens(item)
    for b in out.values():
        b["attributions"] = dict(b["attributions"])
        b["tokens_by_kind"] = dict(b["tokens_by_kind"])
    return out


def rollup_rows(project: Project, bucket: str) -> dict[tuple[datetime, str, str], dict]:
    """The rollup table in the shape of :func:`buckets` (cost rounded like the rollups)."""
    from manifests.figures import ROLLUP_SUM_FIELDS
    from manifests.models import Rollup

    # Every rollup column but prefix_changes (a cache-event count, checked by the cache tests).
    keys = (*(f for f in ROLLUP_SUM_FIELDS if f != "prefix_changes"), "attributions", "tokens_by_kind")
    return {(r.start, r.agent, r.model): {k: getattr(r, k) for k in keys}
            for r in Rollup.objects.filter(project=project, bucket=bucket)}


def assert_rollups_match(project: Project, bucket: str) -> None:
    expected = buckets(calls(project), bucket)
    actual = rollup_rows(project, bucket)
    assert set(actual) == set(expected)
    for key, want in expected.items():
        got = dict(actual[key])
        assert abs(got.pop("cost") - want["cost"]) <= 1e-6 * max(1.0, want["cost"]) + 1e-6, key
        assert abs(got.pop("cost_usd") - want["cost_usd"]) <= 1e-9 * max(1.0, want["cost_usd"]) + 1e-9, key
        assert got == {k: v for k, v in want.items() if k not in ("cost", "cost_usd")}, key
