"""The extractive three-section summary used by compaction, in the conversation's language.

Split from ``ctxkit.context.compaction`` (which re-exports every name here). Sections: settled
facts / open items / hard constraints, headed 已定结论 / 待办事项 / 硬约束 for a Chinese
conversation. A sentence is filed by what it says, never by one ambiguous word: "之前" marks a
deadline only after a time, "等待" an open item only when something is awaited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class SummarizedRecord(Protocol):
    """What the summarizer reads of a history record (``ctxkit.context.compaction.Record`` is
    one; typed by shape so that this module does not import compaction, which imports it)."""

    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def cleared(self) -> bool: ...


@dataclass(frozen=True)
class Summary:
    """The three-section summary. Identifiers must be kept verbatim in ``facts``."""

    facts: list[str] = field(default_factory=list)
    open_items: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    language: str | None = None  # "zh" or "en"; None: from the text of the sections

    def render(self) -> str:
        # Headings in the conversation's language (已定结论 / 待办事项 / 硬约束 for
        # Chinese). An empty section is written out as "none" / "无" so a reader can tell
        # "nothing" from "forgotten" (the handoff contract); check_handoff accepts both.
        language = self.language or conversation_language([*self.facts, *self.open_items, *self.constraints])
        headings, empty = _HEADINGS.get(language, _HEADINGS["en"])
        parts: list[str] = []
        for heading, lines in zip(headings, (self.facts, self.open_items, self.constraints), strict=True):
            parts.append(f"{heading}{'：' if language == 'zh' else ':'}")
            parts.extend(f"- {line}" for line in lines or [empty])
        return "\n".join(parts)


_HEADINGS: dict[str, tuple[tuple[str, str, str], str]] = {
    "en": (("Settled facts", "Open items", "Hard constraints"), "none"),
    "zh": (("已定结论", "待办事项", "硬约束"), "无"),
}
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def conversation_language(texts: Sequence[str]) -> str:
    """"zh" when Han characters make up at least a fifth of the letters of ``texts``, else "en"."""
    han = letters = 0
    for text in texts:
        han += len(_HAN.findall(text))
        letters += sum(1 for ch in text if ch.isalpha())
    return "zh" if letters and han * 5 >= letters else "en"


# Section assignment never rests on one ambiguous word: "之前" is a deadline only after a time
# ("周五 18:00 之前"), not in "之前查过"; "等待" is an open item only when something is awaited
# ("等待审批"), not in "等待了 40 分钟".
_PENDING = re.compile(
    r"\b(todo|pending|not yet|to do|follow[- ]up|next step|open question|still need|unresolved|"
    r"awaiting|waiting (?:for|on))\b|待办|未完成|待确认|待处理|下一步|还需|尚未"
    r"|等待(?!了)[^，。；,.;]{0,6}?(?:确认|审批|批准|回复|答复|结果|用户|客户)",
    re.IGNORECASE,
)
# Pending work that names no such marker is still pending: a request submitted and not yet
# decided, something that happens only once an approval comes, and the speaker's promise to
# follow up. Each is an open item, even when it also carries a deadline ("我会在周五 18:00 前
# 给您回话" is work still to do, not a rule); a user's demand ("请在周五 18:00 之前答复") stays a
# hard constraint.
_AWAITING_APPROVAL = re.compile(
    r"(?:审批|批准|审核|复核|确认)(?:通过|完成|结果出来|下来)?(?:后|之后|以后)(?![^，。；,.;]{0,3}已)"
    r"|(?:审批|审核|处理|受理)中|待(?:\w{0,4}?)(?:审批|批准|审核)"
    r"|\b(?:once|after|when|until)\b[^.;!?]{0,30}?\b(?:approved|approves|approval|signs? off|reviewed)\b"
    r"|\b(?:pending|awaiting|waiting for)\b[^.;!?]{0,20}?\b(?:approval|review|sign-off)\b",
    re.IGNORECASE,
)
_SUBMITTED = re.compile(
    r"(?:已|刚|刚刚|已经)[^，。；,.;]{0,6}?(?:提交|发起|提出|递交)[^，。；,.;]{0,8}?(?:申请|请求|工单|审批|流程|退款)"
    r"|\b(?:submitted|filed|raised|opened|lodged)\b[^.;!?]{0,30}?\b(?:request|application|ticket|claim)\b",
    re.IGNORECASE,
)
# A submission whose outcome the same sentence reports is settled, not pending.
_DECIDED = re.compile(
    r"已(?:通过|批准|完成|退款|到账|驳回|拒绝)|\b(?:approved|rejected|declined|completed|refunded|done)\b"
    r"|(?:通过|批准|完成|驳回|拒绝)了",
    re.IGNORECASE,
)
_PROMISE = re.compile(
    r"(?:我|我们)[^，。；,.;]{0,10}?(?:会|将|再)[^，。；,.;]{0,16}?"
    r"(?:通知|回复|答复|回话|回个话|联系|告知|反馈|跟进|同步)"
    r"|\b(?:I|we)(?:'ll| will| shall| am going to| are going to)\b[^.;!?]{0,40}?"
    r"\b(?:get back|follow up|let you know|notify|update you|contact|reply|respond|check back|report back)\b",
    re.IGNORECASE,
)


# A rule that names an approval ("只有审批通过后才能退款", "refunds only after approval") is a
# hard constraint, not pending work.
_RULE = re.compile(
    r"\b(?:must|never|always|only|do not|don't|forbidden|not allowed|required)\b"
    r"|必须|不能|不得|禁止|不要|只能|只有|仅|务必|才能|才可",
    re.IGNORECASE,
)


def is_pending(sentence: str) -> bool:
    """Whether ``sentence`` states work still to do: an explicit marker (todo, 待办, 等待审批),
    a promise to follow up, or, unless it states a rule, something awaiting an approval or a
    request submitted and not yet decided."""
    if _PENDING.search(sentence) or _PROMISE.search(sentence):
        return True
    waits = _AWAITING_APPROVAL.search(sentence) is not None or (
        _SUBMITTED.search(sentence) is not None and _DECIDED.search(sentence) is None)
    return waits and _RULE.search(sentence) is None


_TIME = (r"(?:\d{1,2}[:：点]\d{0,2}|\d{1,2}\s*[日号]|周[一二三四五六日天末]|星期[一二三四五六日天]"
         r"|明天|今天|月底|本周|下周|年底)")
_CONSTRAINT = re.compile(
    r"\b(must|must not|never|always|only|do not|don't|forbidden|not allowed|required|deadline|no later than|"
    r"at most|at least)\b|必须|不能|不得|禁止|不要|只能|仅|务必|截止|要求"
    rf"|{_TIME}[^，。；,.;]{{0,6}}?(?:之前|以前|前)",
    re.IGNORECASE,
)
_ERROR = re.compile(r"\b(error|failed|failure|exception|timeout|denied|refused)\b|错误|失败|超时|异常", re.IGNORECASE)
_IDENT = re.compile(
    r"\d"  # ids, amounts, dates, error codes all carry a digit
    r"|https?://|\b\w+/\w+"  # URLs and paths
    r"|\b\w+\.(?:py|js|ts|md|json|ya?ml|toml|txt|go|rs|java|sql|csv)\b",
)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])")
_MAX_SEGMENT = 400


def _segments(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        for seg in _SENTENCE.split(line):
            seg = seg.strip().lstrip("-*• ").strip()
            if len(seg) > _MAX_SEGMENT:
                # A one-line JSON blob has no sentence ends; split it into its fields.
                out.extend(p.strip() for p in seg.split(",") if p.strip())
            elif seg:
                out.append(seg)
    return out


def extractive_summarizer(records: Sequence[SummarizedRecord]) -> Summary:
    """Deterministic, no model call: keep verbatim the sentences that carry an identifier,
    a number, an error, a constraint or a pending item, each tagged with its source record.

    Pending sentences (:func:`is_pending`: a todo, something awaiting approval, a submitted
    request not yet decided, a promise to follow up) go to open items, constraint sentences to
    hard constraints, the rest to settled facts. Sentences with none of these markers are dropped, which is exactly how
    a soft requirement ("get back to me by Friday evening") can be lost: the invariant checks
    in :func:`compact` exist to catch that.
    """
    sections: dict[str, dict[str, list[str]]] = {"facts": {}, "open": {}, "constraints": {}}
    for record in records:
        if record.cleared:
            continue  # a placeholder says nothing new; its ref is the record's own
        for seg in _segments(record.text):
            if is_pending(seg):
                key = "open"
            elif _CONSTRAINT.search(seg):
                key = "constraints"
            elif _IDENT.search(seg) or _ERROR.search(seg):
                key = "facts"
            else:
                continue
            sources = sections[key].setdefault(seg, [])
            if record.id not in sources:
                sources.append(record.id)
    render = {k: [f"{seg} [src: {', '.join(src)}]" for seg, src in v.items()] for k, v in sections.items()}
    language = conversation_language([r.text for r in records if not r.cleared])
    return Summary(facts=render["facts"], open_items=render["open"], constraints=render["constraints"],
                   language=language)
