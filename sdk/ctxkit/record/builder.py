"""Each call's context built and recorded with one set of settings: :class:`ContextBuilder` runs
allocate -> layout -> read-back for each call, carries the allocator's starvation counts (aging)
from one call to the next, and hands back a :class:`BuiltContext` whose ``manifest(...)`` calls
:func:`ctxkit.record.assemble.build_manifest` with everything it saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctxkit import figures
from ctxkit.context.tokens import Estimator, estimate_tokens
from ctxkit.manifest import MAX_REASON, Manifest
from ctxkit.record.assemble import build_manifest
from ctxkit.record.items import UNTRUSTED_KINDS, block_items, clamp_tokens, clip

if TYPE_CHECKING:  # the heavy modules are imported where they are used, not at import time
    from ctxkit.context.allocator import Plan, Segment
    from ctxkit.context.layout import Block, Layout
    from ctxkit.context.readback import KeyField, ReadBack


def blocks_from_plan(plan: Plan) -> list[Block]:
    """A layout block for every allocation that reaches the model (id = segment name)."""
    from ctxkit.context.layout import Block

    return [
        Block(a.name, a.kind, a.text, zone=a.zone)
        for a in plan.allocations
        if a.text and figures.kept_by(a.action)
    ]


@dataclass
class BuiltContext:
    """One call's context: the plan, its layout (None in naive mode) and the key-field read-back.

    ``blocks`` are the caller's extra blocks; the layout places them, and in naive mode (no
    layout) they are appended after the segments and listed through :func:`block_items`.
    ``measured_tokens`` is |x|, the estimate of :meth:`text` (everything the model reads);
    ``over_budget`` says |x| + R > W could not be avoided, and ``over_budget_reason`` why.
    """

    plan: Plan
    layout: Layout | None
    readback: list[ReadBack]
    estimate: Estimator = estimate_tokens
    blocks: list[Block] = field(default_factory=list)
    measured_tokens: int | None = None
    over_budget: bool = False
    over_budget_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    cache_ttl_seconds: int | None = None

    def text(self, separator: str = "\n\n") -> str:
        """What the model reads, in layout order (concatenation order in naive mode)."""
        if self.layout is not None:
            return self.layout.text(separator)
        return separator.join([t for t in (self.plan.text(separator), *(b.text for b in self.blocks)) if t])

    @property
    def missing(self) -> list[str]:
        """Labels of the key fields that did not reach the model."""
        return [r.field.label for r in self.readback if not r.present]

    def manifest(self, **kwargs: Any) -> Manifest:
        """:func:`build_manifest` with this build's plan, layout and read-back filled in, plus
        the measured size of the final text and, when it could not fit, the over-budget reason."""
        kwargs.setdefault("estimate", self.estimate)
        if self.layout is None and self.blocks:
            extra = block_items(self.blocks, untrusted_kinds=kwargs.get("untrusted_kinds", UNTRUSTED_KINDS),
                                estimate=self.estimate)
            kwargs["extra_items"] = [*extra, *kwargs.get("extra_items", ())]
        if self.notes:
            kwargs["warnings"] = [*self.notes, *kwargs.get("warnings", ())]
        manifest = build_manifest(plan=self.plan, layout=self.layout, readback=self.readback, **kwargs)
        budget = manifest.budget
        if self.measured_tokens is not None:
            budget.measured_tokens = clamp_tokens(self.measured_tokens)
        if self.over_budget:
            budget.over_budget = True
            budget.over_budget_reason = clip(self.over_budget_reason or "over budget", MAX_REASON)
        if manifest.cache_ttl_seconds is None and self.cache_ttl_seconds is not None:
            manifest.cache_ttl_seconds = self.cache_ttl_seconds
        return manifest


# The output reserve R is the largest single-step output plus 10 %. A tool call's
# JSON is 200-800 tokens, so 800 + 10 % is the floor ContextBuilder uses when no reserve is given.
DEFAULT_RESERVE = 880
# Rounds of re-allocation before ContextBuilder falls back to dropping every non-pinned segment.
FIT_ROUNDS = 4


@dataclass
class ContextBuilder:
    """Allocate, lay out and read back each call's context with one set of settings.

    ``reserve`` is the output reserve R (the request's ``max_tokens``): input never uses it.
    Default :data:`DEFAULT_RESERVE`, never more than a fifth of the budget.
    ``aging`` holds, per segment name, how many calls in a row it was starved; it is updated
    after every :meth:`build`, so a low-priority segment rises until it gets in once.

    The guarantee: |x| + R <= W, where |x| is measured on the final text,
    restated constraints, the caller's blocks and separators included. When the allocation
    alone fits but the final text does not, the builder re-allocates with the difference held
    back (a few rounds), then with nothing but the pinned segments. The TAIL restatement of a
    pinned constraint is never dropped to make room: if the pinned segments, their restatement
    and the caller's blocks alone exceed the cap, the result is flagged ``over_budget`` with
    the reason (in the manifest too), never silently.
    ``cache_ttl_seconds``: the provider's prompt-cache TTL, recorded in every manifest.
    """

    budget: int
    reserve: int | None = None
    safety_margin: int = 0
    naive: bool = False
    key_fields: Sequence[KeyField] = ()
    estimate: Estimator = estimate_tokens
    aging_step: int = 1
    restate_constraints: bool = True
    aging: dict[str, int] = field(default_factory=dict)
    cache_ttl_seconds: int | None = None
    separator: str = "\n\n"

    def __post_init__(self) -> None:
        if self.reserve is None:
            self.reserve = min(DEFAULT_RESERVE, self.budget // 5)

    @property
    def cap(self) -> int:
        """The input cap W - R - margin: |x| never exceeds it unless flagged over budget."""
        return figures.input_cap(self.budget, self.reserve or 0, self.safety_margin)

    def build(self, segments: Sequence[Segment], *, blocks: Sequence[Block] = (),
              key_fields: Sequence[KeyField] | None = None) -> BuiltContext:
        """Run the allocator over ``segments``, arrange what survived plus ``blocks`` (content the
        allocator does not manage, such as the question), check the final text against the cap
        (re-allocating until it fits) and read the key fields back."""
        from ctxkit.context.readback import read_back

        aging = self.aging
        cap = self.cap
        held_back = 0
        notes: list[str] = []
        # The TAIL copy of a pinned constraint is as binding as the HEAD one (constraints at the
        # start and restated at the end): when both do not fit, the result is over budget, never
        # quietly left without the copy. Only the caller's restate_constraints=False turns it off.
        restate = self.restate_constraints
        built = self._attempt(segments, blocks, aging, 0, restate)
        rounds = 0
        while not self.naive and built.measured_tokens is not None and built.measured_tokens > cap:
            rounds += 1
            if rounds <= FIT_ROUNDS and held_back < cap:
                held_back = min(cap, held_back + built.measured_tokens - cap)
            elif held_back < cap:
                held_back = cap  # only the pinned segments and the caller's blocks
            else:
                break
            built = self._attempt(segments, blocks, aging, held_back, restate)
        measured = built.measured_tokens or 0
        if held_back:
            notes.append(f"final text measured {measured} tokens with {held_back} tokens held back from the "
                         f"allocation for the restated constraints, the caller's blocks and separators (cap {cap})")
        if measured > cap:
            built.over_budget = built.plan.over_budget = True
            if self.naive:
                built.over_budget_reason = (f"naive baseline: filled in order to the window with no output reserve; "
                                            f"input {measured} + reserve {self.reserve} > window {self.budget}")
            else:
                built.over_budget_reason = self._over_budget_reason(built, blocks, measured)
            notes.append(built.over_budget_reason)
        self.aging = dict(built.plan.starvation)
        built.notes = notes
        built.cache_ttl_seconds = self.cache_ttl_seconds
        fields = self.key_fields if key_fields is None else key_fields
        outputs = built.plan.outputs()
        for b in blocks:
            outputs.setdefault(b.id, b.text)
        built.readback = read_back(fields, outputs)
        return built

    def _over_budget_reason(self, built: BuiltContext, blocks: Sequence[Block], measured: int) -> str:
        """Why |x| exceeds the cap although only what may never be cut is left: the pinned
        segments, their restatement in TAIL and the caller's blocks, with the figures."""
        pinned = sum(a.used for a in built.plan.allocations if a.pinned)
        tools = [a for a in built.plan.allocations
                 if not a.pinned and a.text and any(op.data.get("over_budget") for op in a.operations)]
        if tools:  # a schema segment's pinned tools, kept in their minimal form
            listed = ", ".join(f"{a.name}: {a.used} tokens" for a in tools)
            pinned_part = f"pinned segments ({pinned} tokens), pinned tools ({listed})"
        else:
            pinned_part = f"pinned segments ({pinned} tokens)"
        extra = sum(self.estimate(b.text) for b in blocks)
        placed = built.layout.placed if built.layout else []
        restated = [p for p in placed if p.restated_from is not None]
        cap = self.cap
        figures_of = (f"input cap {cap} = window {self.budget} - reserve {self.reserve} - margin {self.safety_margin}")
        advice = "reduce hard segments, split the task or use a larger window"
        if not restated:
            return (f"{pinned_part} and the caller's blocks ({extra} tokens) alone measure "
                    f"{measured} tokens, over the {figures_of}: {advice}")
        copies = sum(p.tokens for p in restated)
        names = ", ".join(repr(p.restated_from) for p in restated)
        without = self.estimate(self.separator.join(
            p.block.text for p in placed if p.block.text and p.restated_from is None))
        fits_without = (f"; without the copy they would measure {without}, within the cap, but a pinned constraint "
                        "is stated at the start and restated at the end, so the copy is kept") if without <= cap else ""
        return (f"{pinned_part}, the restatement at the end of TAIL ({names}: {copies} "
                f"tokens) and the caller's blocks ({extra} tokens) alone measure {measured} tokens, over the "
                f"{figures_of}{fits_without}: {advice}")

    def _attempt(self, segments: Sequence[Segment], blocks: Sequence[Block], aging: dict[str, int],
                 held_back: int, restate: bool) -> BuiltContext:
        """One allocate -> layout -> measure, with ``held_back`` tokens kept out of the allocation."""
        from ctxkit.context.allocator import allocate

        reserve = self.reserve or 0
        plan = allocate(segments, budget=self.budget, reserve=reserve, safety_margin=self.safety_margin + held_back,
                        estimate=self.estimate, naive=self.naive, aging=aging, aging_step=self.aging_step)
        if held_back:  # the plan records the caller's budget; what was held back is in a warning
            plan.held_back = held_back  # and in the manifest's replay settings
            reduced = plan.cap
            plan.safety_margin, plan.cap = self.safety_margin, self.cap
            plan.headroom = figures.headroom(plan.cap, plan.used)
            plan.warnings = [w for w in plan.warnings if "input cap is 0" not in w and "but the input cap" not in w]
            if plan.over_budget:  # over the reduced cap only; whether the whole text fits is decided in build()
                plan.over_budget = False
                cut = f"exceed the input cap {reduced}; "
                for a in plan.allocations:
                    if cut in a.reason:
                        a.reason = a.reason.split(cut, 1)[1]
                        a.reason = f"no room left after the pinned segments and caller blocks; {a.reason}"
        layout = None
        if not self.naive:  # the naive baseline is plain concatenation: no zones, no prefix
            from ctxkit.context.layout import arrange

            # The plan has already counted every text it kept: reuse those counts in the layout.
            counted = {a.text: a.used for a in plan.allocations if a.text}
            known, count = counted.get, self.estimate

            def estimate(text: str) -> int:
                tokens = known(text)
                return count(text) if tokens is None else tokens

            layout = arrange([*blocks_from_plan(plan), *blocks], estimate=estimate, restate_constraints=restate)
        built = BuiltContext(plan=plan, layout=layout, readback=[], estimate=self.estimate, blocks=list(blocks))
        built.measured_tokens = self.estimate(built.text(self.separator))
        return built
