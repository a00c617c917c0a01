"""Two calls side by side: what entered the context, what left it, what changed action,
tokens, zone or content; which prefix segments changed; which evidence was gained or lost.

Any two calls of a project can be compared (two runs, two agents); the default is a call
and the previous step of its run, the question every regression starts with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxkit.figures import context_tokens as used_of
from ctxkit.figures import in_context
from manifests.figures import ITEM_FIELDS
from manifests.models import Call, CallKey, Evidence, Item, Project
from manifests.selectors.cache import segment_diff
from manifests.selectors.calls import previous_call


@dataclass
class ItemRow:
    item_id: str
    kind: str
    before: Item | None
    after: Item | None
    what: list[str] = field(default_factory=list)

    @property
    def action(self) -> str:
        item = self.after if self.after is not None else self.before
        assert item is not None, self.item_id  # a row has one or both
        return item.action

    @property
    def tokens_before(self) -> int:
        return used_of(self.before) if self.before is not None else 0

    @property
    def tokens_after(self) -> int:
        return used_of(self.after) if self.after is not None else 0

    @property
    def token_change(self) -> int:
        return self.tokens_after - self.tokens_before


@dataclass
class Comparison:
    a: Call
    b: Call
    entered: list[ItemRow]
    left: list[ItemRow]
    changed: list[ItemRow]
    unchanged: list[ItemRow]
    prefix_changed: bool
    segments: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    tokens: dict[str, int]

    @property
    def evidence_gained(self) -> list[dict[str, Any]]:
        return [e for e in self.evidence if e["change"] == "gained"]

    @property
    def evidence_lost(self) -> list[dict[str, Any]]:
        return [e for e in self.evidence if e["change"] == "lost"]


def call_of(project: Project, call_id: str) -> Call | None:
    # By the registry's key, which gives the call's time: the call is read from its day's
    # partition, not probed in every day (selectors.calls.call_with_children).
    key = CallKey.objects.filter(project=project, call_key=call_id).values_list("call_id", "started_at").first()
    if key is None:
        return None
    return Call.objects.filter(pk=key[0], started_at=key[1]).select_related("run").defer("raw").first()


def default_before(call: Call) -> Call | None:
    """The call to compare ``call`` with when only one is named: the previous step of its run."""
    prev = previous_call(call)
    if prev is None:
        return None
    return Call.objects.select_related("run").defer("raw").get(pk=prev.pk, started_at=prev.started_at)


def _items(call: Call) -> dict[str, Item]:
    # The last item of an id wins, as in a manifest (ids are unique per call in practice).
    items = Item.objects.filter(call=call, started_at=call.started_at).only(*ITEM_FIELDS).order_by("ordinal")
    return {i.item_id: i for i in items}


def _state(item: Item | None) -> str:
    if item is None:
        return "not a candidate"
    return item.action if not in_context(item) else f"{item.action} ({item.zone or 'middle'})"


def compare(a: Call, b: Call) -> Comparison:
    before, after = _items(a), _items(b)
    entered: list[ItemRow] = []
    left: list[ItemRow] = []
    changed: list[ItemRow] = []
    unchanged: list[ItemRow] = []
    for item_id in list(after) + [i for i in before if i not in after]:
        old, new = before.get(item_id), after.get(item_id)
        either = new if new is not None else old
        assert either is not None  # item_id is a key of after or before
        row = ItemRow(item_id, either.kind, old, new)
        was_in = old is not None and in_context(old)
        is_in = new is not None and in_context(new)
        if is_in and not was_in:
            row.what.append("new candidate" if old is None else f"was {_state(old)}")
            entered.append(row)
        elif was_in and not is_in:
            row.what.append("no longer a candidate" if new is None else f"now {_state(new)}")
            left.append(row)
        else:
            if old is not None and new is not None and old.action != new.action:
                row.what.append(f"action {old.action} → {new.action}")
            if row.tokens_before != row.tokens_after:
                row.what.append(f"tokens {row.tokens_before} → {row.tokens_after}")
            old_zone, new_zone = (old.zone if old else None) or "middle", (new.zone if new else None) or "middle"
            if was_in and is_in and old_zone != new_zone:
                row.what.append(f"zone {old_zone} → {new_zone}")
            if old is not None and new is not None and old.content_hash != new.content_hash:
                row.what.append("content changed")
            (changed if row.what else unchanged).append(row)

    old_evidence = {e.key: e for e in Evidence.objects.filter(call=a, started_at=a.started_at).order_by("pk")}
    new_evidence = {e.key: e for e in Evidence.objects.filter(call=b, started_at=b.started_at).order_by("pk")}
    evidence: list[dict[str, Any]] = []
    for key in list(new_evidence) + [k for k in old_evidence if k not in new_evidence]:
        old_e, new_e = old_evidence.get(key), new_evidence.get(key)
        was, now = (old_e.present if old_e else None), (new_e.present if new_e else None)
        if now and not was:
            change = "gained"
        elif was and not now:
            change = "lost"
        else:
            change = "same"
        label = new_e.label if new_e is not None else old_e.label if old_e is not None else ""
        evidence.append({"key": key, "label": label, "before": was, "after": now, "change": change})
    evidence.sort(key=lambda e: ({"lost": 0, "gained": 1}.get(e["change"], 2), e["key"]))

    tokens = {
        "before": sum(used_of(i) for i in before.values()),
        "after": sum(used_of(i) for i in after.values()),
    }
    return Comparison(
        a=a, b=b, entered=entered, left=left, changed=changed, unchanged=unchanged,
        prefix_changed=a.prefix_hash != b.prefix_hash,
        segments=segment_diff(a.prefix_segments, b.prefix_segments),
        evidence=evidence, tokens=tokens,
    )
