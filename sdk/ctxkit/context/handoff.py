"""Check a handoff summary against the three-section contract.

A subagent hands back only: settled facts (每条带来源标识), open items, and hard
constraints (written out as "none" / "无" when there are none, so the lead can tell
"nothing" from "forgotten"). A settled fact without a source identifier cannot be
spot-checked: the lead must either trust it blindly or redo the work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SECTIONS = ("facts", "open_items", "constraints")
SECTION_TITLES = {
    "facts": "settled facts (已定结论)",
    "open_items": "open items (待办事项)",
    "constraints": "hard constraints (硬约束)",
}
_ALIASES = {
    "facts": (
        "settled facts",
        "settled conclusions",
        "settled",
        "confirmed facts",
        "conclusions",
        "facts",
        "已定结论",
        "已确认结论",
        "已确认事实",
        "结论",
    ),
    "open_items": (
        "open items",
        "open questions",
        "open issues",
        "pending items",
        "pending",
        "todo",
        "to do",
        "to-do",
        "待办事项",
        "待办",
        "未完成事项",
        "未完成",
    ),
    "constraints": ("hard constraints", "constraints", "硬约束", "约束", "约束条件"),
}
_NONE_WORDS = frozenset({"none", "n/a", "na", "nothing", "no constraints", "无", "没有", "暂无"})

# "## Settled facts:" / "**硬约束**：无" / "1. Open items"
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\d+[.)]\s*)?\**\s*(?P<title>[^:：*]+?)\s*\**\s*(?:[:：]\s*\**\s*(?P<rest>.*)|$)"
)
_BULLET = re.compile(r"^\s*(?:[-*•+]\s+|\d+[.)]\s+|\d+、\s*)")
# What counts as a source identifier a reader can re-check.
_SOURCE = re.compile(
    r"\[(?:src|source|ref|来源)\s*[:：=][^\]]+\]"  # [src: ...]
    r"|\((?:src|source|ref|来源)\s*[:：=][^)]+\)"  # (source: ...)
    r"|(?:来源|source|ref)\s*[:：=]\s*\S+"  # ref=..., 来源：...
    r"|https?://\S+"  # URL
    r"|[\w./-]+\.\w+:\d+"  # path:line
    r"|(?:[\w.-]+/){2,}[\w.-]+|(?:[\w.-]+/)+[\w-]+\.\w+"  # a path (two slashes or a file name)
    r"|\b[A-Za-z]+[-_#]?\d[\w-]*"  # ORD-1234, E1001, op_42, PR#17
    r"|#\d+"  # #123
    r"|\b(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b",  # a commit hash
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HandoffReport:
    sections: dict[str, list[str]]
    problems: list[str] = field(default_factory=list)
    facts_without_source: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _match_heading(line: str) -> tuple[str, str] | None:
    """(section, rest of the line) when ``line`` is a section heading."""
    if re.match(r"^\s*[-*•+]\s", line):
        return None  # "- constraints are ..." is an item, not a heading
    m = _HEADING.match(line)
    if m is None:
        return None
    title = m.group("title").strip().lower()
    for section, aliases in _ALIASES.items():
        if title in aliases:
            return section, (m.group("rest") or "").strip()
    return None


def is_none(item: str) -> bool:
    return item.strip().strip("。.!").lower() in _NONE_WORDS


def has_source(item: str) -> bool:
    return _SOURCE.search(item) is not None


def check_handoff(summary_text: str) -> HandoffReport:
    """Check ``summary_text`` against the handoff contract; every problem in plain words."""
    sections: dict[str, list[str]] = {}
    seen_twice: list[str] = []
    outside: list[str] = []
    current: str | None = None
    for raw in summary_text.splitlines():
        if not raw.strip():
            continue
        heading = _match_heading(raw)
        if heading is not None:
            current, rest = heading
            if current in sections:
                seen_twice.append(current)
            sections.setdefault(current, [])
            if rest:
                sections[current].append(rest)
            continue
        item = _BULLET.sub("", raw).strip()
        if current is None:
            if not raw.lstrip().startswith("#"):  # a title line is fine, narrative is not
                outside.append(item)
            continue
        if item:
            sections[current].append(item)

    problems: list[str] = []
    for section in SECTIONS:
        if section not in sections:
            problems.append(f"missing section: {SECTION_TITLES[section]}")
    for section in dict.fromkeys(seen_twice):
        problems.append(f"section {SECTION_TITLES[section]} appears more than once")
    if outside:
        problems.append(
            f"{len(outside)} line(s) outside the three sections (hand back the result, not the process): {outside[0]!r}"
        )
    if "constraints" in sections and not sections["constraints"]:
        problems.append("the hard constraints section is empty: write 'none' (无) if there are no constraints")
    facts = [f for f in sections.get("facts", []) if not is_none(f)]
    without = [f for f in facts if not has_source(f)]
    for number, fact in enumerate(facts, start=1):
        if fact in without:
            problems.append(
                f"settled fact {number} has no source identifier (file path, id, URL or [src: ...]): {fact!r}"
            )
    return HandoffReport(sections=sections, problems=problems, facts_without_source=without)


def validate_handoff(summary_text: str) -> str:
    """Return ``summary_text`` unchanged, or raise ValueError listing every problem."""
    report = check_handoff(summary_text)
    if not report.ok:
        raise ValueError("handoff summary rejected: " + "; ".join(report.problems))
    return summary_text
