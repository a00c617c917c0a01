"""Tool schema compression: compact JSON, fewer docs, signatures, fewer tools.

Re-exported by ``ctxkit.context.operators``; see its docstring for the API.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from ctxkit.context.operators.common import OpRecord
from ctxkit.context.operators.extract import extract_lines
from ctxkit.context.operators.truncate import compact_json
from ctxkit.context.tokens import Estimator, estimate_tokens


def _tool_parts(tool: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(dict holding name/description, parameter schema) for OpenAI, Anthropic or flat tools."""
    holder = tool["function"] if isinstance(tool.get("function"), dict) else tool
    params = holder.get("parameters", holder.get("input_schema"))
    return holder, params if isinstance(params, dict) else None


def _strip_param_docs(schema: Any) -> None:
    if isinstance(schema, dict):
        description = schema.get("description")
        risks = risk_sentences(description) if isinstance(description, str) else []
        for key in ("description", "title", "examples", "default"):
            schema.pop(key, None)
        if risks:  # "if true, the order is deleted permanently" is the parameter's risk: kept
            schema["description"] = " ".join(risks)
        for sub in schema.values():
            if isinstance(sub, (dict, list)):  # a scalar holds nothing to strip: no call
                _strip_param_docs(sub)
    elif isinstance(schema, list):
        for sub in schema:
            if isinstance(sub, (dict, list)):
                _strip_param_docs(sub)


# Descriptions may be shortened; required parameters, enums, risks and result states may not. A
# sentence that warns of an irreversible, destructive, costly or privacy-affecting action survives
# every step. The words by kind of risk (English, Chinese); RISK is their union, in this order.
_RISK_KIND_WORDS: tuple[tuple[str, str, str], ...] = (
    ("irreversible", r"irreversibl\w*|cannot be undone|can't be undone|not be undone|permanent\w*",
     "不可逆|无法撤销|不可撤销|不能撤销|永久"),
    ("destructive", r"delet\w*|destr\w*|drops?|overwrit\w*|wipes?|purg\w*|truncat\w*|erase\w*", "删除|销毁|覆盖|清空"),
    ("money", r"charg\w*|bill\w*|payments?|pays?|costs?|costly|spend\w*|refund\w*|money|transfers? funds|invoice\w*",
     "扣款|收费|计费|付款|支付|转账|费用|退款"),
    ("privacy", r"privacy|private|personal data|PII|sensitive|secrets?|credentials?|passwords?",
     "隐私|个人信息|敏感|密钥|凭证"),
    ("external", r"publish\w*|sends? (?:an )?e-?mails?|production|prod", "生产环境|对外发送"),
)
_RISK_WORDS = r"\b(" + "|".join(en for _, en, _ in _RISK_KIND_WORDS) + r")\b"
RISK = re.compile(_RISK_WORDS + "|" + "|".join(zh for _, _, zh in _RISK_KIND_WORDS), re.IGNORECASE)
# One pattern per kind of risk, for the minimal form (which keeps one statement of each kind).
RISK_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rf"\b(?:{en})\b|{zh}", re.IGNORECASE)) for kind, en, zh in _RISK_KIND_WORDS
)


# RISK's halves, searched apart: Chinese has no case, so its words need no IGNORECASE and are found
# by a quick scan for their first characters; in the union, every one of them was tried at every
# character, case-insensitively. The English words are tried at word boundaries only, and only
# where one of the letters they start with follows (re would try each word in turn at each one).
_RISK_EN_WORDS = [word for _, en, _ in _RISK_KIND_WORDS for word in en.split("|")]
if not all(word[:1].isalpha() for word in _RISK_EN_WORDS):
    raise AssertionError("each English risk word starts with a letter")
_RISK_EN_FIRST = "".join(sorted({word[0].lower() for word in _RISK_EN_WORDS}))
_RISK_EN = re.compile(rf"\b(?=[{_RISK_EN_FIRST}])(" + "|".join(_RISK_EN_WORDS) + r")\b", re.IGNORECASE)
_RISK_ZH = re.compile("|".join(zh for _, _, zh in _RISK_KIND_WORDS))


def is_risky(sentence: str) -> bool:
    """Whether ``sentence`` states a risk (whether :data:`RISK` matches in it)."""
    return _RISK_ZH.search(sentence) is not None or _RISK_EN.search(sentence) is not None


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])")


def _sentences(text: str) -> list[str]:
    return [p.strip() for p in _SENTENCE_END.split(text) if p.strip()]


def risk_sentences(text: str) -> list[str]:
    """The sentences of a tool description that state a risk, in order."""
    if not is_risky(text):  # then none of its sentences is: most descriptions need no split
        return []
    return [sentence for sentence in _sentences(text) if is_risky(sentence)]


def _short_with_risks(text: str) -> str:
    """The first sentence, plus every later sentence that states a risk."""
    sentences = _sentences(text)
    if not sentences:
        return text
    kept = [sentences[0], *(x for x in sentences[1:] if is_risky(x))]
    return " ".join(kept)


def risk_kinds(text: str) -> frozenset[str]:
    """The kinds of risk ``text`` states (irreversible, destructive, money, privacy, external)."""
    if not is_risky(text):
        return frozenset()
    return frozenset(kind for kind, pattern in RISK_KINDS if pattern.search(text))


def _one_statement_per_risk(statements: list[tuple[str | None, str]]) -> set[int]:
    """Indexes of the fewest, shortest statements that still state every kind of risk the
    ``statements`` (``(parameter or None for the tool, sentence)``) state, chosen greedily: the
    statement covering most kinds not yet stated, the shorter on a tie, the earlier after that."""
    kinds = [risk_kinds(sentence) for _, sentence in statements]
    needed = frozenset().union(*kinds)
    chosen: set[int] = set()
    while needed:
        best = min(range(len(statements)), key=lambda i: (-len(kinds[i] & needed), len(statements[i][1]), i))
        chosen.add(best)
        needed -= kinds[best]
    return chosen


def _minimal(tool: dict[str, Any]) -> None:
    """Reduce a tool (already without optional parameters and non-risk prose) to its minimal form:
    name, required parameters with types and enums, and one statement of each kind of risk its
    description and parameter notes state."""
    holder, params = _tool_parts(tool)
    props = params.get("properties") if params else None
    statements: list[tuple[str | None, str]] = []
    if isinstance(holder.get("description"), str):
        statements += [(None, sentence) for sentence in _sentences(holder["description"])]
    if isinstance(props, dict):
        for name, spec in props.items():
            if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                statements += [(name, sentence) for sentence in _sentences(spec["description"])]
    chosen = _one_statement_per_risk(statements)
    kept: dict[str | None, list[str]] = {}
    for i, (where, sentence) in enumerate(statements):
        if i in chosen:
            kept.setdefault(where, []).append(sentence)
    if None in kept:
        holder["description"] = " ".join(kept[None])
    else:
        holder.pop("description", None)
    if isinstance(props, dict):
        for name, spec in props.items():
            if isinstance(spec, dict):
                if name in kept:
                    spec["description"] = " ".join(kept[name])
                else:
                    spec.pop("description", None)


MINIMAL_FORM = "minimal form: name, required parameters, enums and one statement of each risk"


@dataclass(frozen=True, slots=True)
class SchemaPlan:
    """The budget-independent half of :func:`compress_schema`: every step's rendering and cost.

    ``steps`` is None when the text is not a JSON list of tool objects (then extract_lines
    applies). ``tools`` is the list after the last step, for dropping trailing tools. Make it
    with :func:`plan_schema`, cut it with :func:`cut_schema` (the allocator keeps plans across
    calls); both must use the same estimator. A plan made for budgets of ``least_budget`` tokens
    or more stops at the first step that fits that many (a cut at such a budget never looks
    further); 0 when every step is rendered.
    """

    before: int
    steps: tuple[tuple[str, str, int], ...] | None  # (label, rendering after the step, its estimate)
    tools: tuple[dict[str, Any], ...] = ()
    least_budget: int = 0


def _parse_tools(text: str) -> list[dict[str, Any]] | None:
    """The tools of a schema text, or None when it is not a JSON list of objects."""
    try:
        tools = json.loads(text)
    except ValueError:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return None
    return tools


def _steps(tools: list[dict[str, Any]], estimate: Estimator) -> Iterator[tuple[str, str, int]]:
    """Apply the compression steps to ``tools`` in place, yielding (label, rendering, estimate) after each."""

    def param_docs(t: dict[str, Any]) -> None:
        _strip_param_docs(_tool_parts(t)[1])

    def short_desc(t: dict[str, Any]) -> None:
        holder = _tool_parts(t)[0]
        if isinstance(holder.get("description"), str):
            holder["description"] = _short_with_risks(holder["description"])

    def no_desc(t: dict[str, Any]) -> None:
        holder = _tool_parts(t)[0]
        risks = risk_sentences(holder["description"]) if isinstance(holder.get("description"), str) else []
        if risks:
            holder["description"] = " ".join(risks)
        else:
            holder.pop("description", None)

    def required_only(t: dict[str, Any]) -> None:
        params = _tool_parts(t)[1]
        if params and isinstance(params.get("properties"), dict):
            required = set(params.get("required", []))
            params["properties"] = {k: v for k, v in params["properties"].items() if k in required}

    steps: list[tuple[str, Callable[[dict[str, Any]], None] | None, bool]] = [
        ("compact JSON", None, False),
        ("dropped parameter descriptions", param_docs, False),
        ("shortened tool descriptions", short_desc, False),
        ("rendered as signatures with short descriptions", None, True),
        ("dropped tool descriptions but their risk statements, kept name/parameters/required/enums", no_desc,
         True),
        ("dropped optional parameters", required_only, True),
        (MINIMAL_FORM, _minimal, True),
    ]
    for label, step, signatures in steps:
        if step is not None:
            for tool in tools:
                step(tool)
        out = _signatures(tools) if signatures else compact_json(tools)
        yield label, out, estimate(out)


def _drop_tools(
    tools: list[dict[str, Any]], budget: int, before: int, done: list[str], estimate: Estimator,
    pinned: Collection[str] = (),
) -> tuple[str, OpRecord]:
    """Nothing fits after every step: drop tools (from ``tools``, in place), the last unpinned one
    first, until the rest fits. Pinned tools are never dropped: when they alone do not fit, their
    minimal form is returned over ``budget`` and the record says so (``over_budget``)."""
    dropped: list[str] = []
    index = len(tools) - 1
    while tools and index >= 0 and estimate(_signatures(tools)) > budget:
        name = str(_tool_parts(tools[index])[0].get("name", "?"))
        if name not in pinned:
            tools.pop(index)
            dropped.insert(0, name)
        index -= 1
    out = _signatures(tools) if tools else ""
    tokens = estimate(out)
    if dropped:
        done.append(f"dropped tools {', '.join(dropped)}")
    data: dict[str, Any] = {"steps": done, "dropped_tools": dropped}
    if tokens > budget:
        kept = [str(_tool_parts(t)[0].get("name", "?")) for t in tools]
        done.append(f"over budget: pinned tools {', '.join(kept)} need {tokens} tokens in their minimal form, "
                    f"over the budget {budget}; never dropped")
        data["over_budget"] = True
        data["pinned_tools"] = kept
    return out, OpRecord("schema", before, tokens, "; ".join(done), data)


def compress_schema(
    text: str, budget: int, *, estimate: Estimator = estimate_tokens, pinned: Collection[str] = ()
) -> tuple[str, OpRecord]:
    """Compress a JSON list of tool schemas step by step until it fits.

    Names, required parameters, types and enums survive longest: they are what a valid
    call needs. The last step before a tool is dropped is the minimal form (name, required
    parameters, enums and one statement of each kind of risk). Tools named in ``pinned`` are
    never dropped: when they do not fit even so, the result is over ``budget`` and its record
    says so (``data["over_budget"]``). Non-JSON input falls back to :func:`extract_lines`.
    """
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("schema", before, before, "fits")
    tools = _parse_tools(text)
    if tools is None:
        return extract_lines(text, budget, estimate=estimate)
    done: list[str] = []
    for label, out, tokens in _steps(tools, estimate):  # lazily: stop at the first step that fits
        done.append(label)
        if tokens <= budget:
            return out, OpRecord("schema", before, tokens, "; ".join(done), {"steps": done})
    return _drop_tools(tools, budget, before, done, estimate, pinned)


def pinned_tools_tokens(text: str, pinned: Collection[str], *, estimate: Estimator = estimate_tokens) -> int:
    """Tokens of the minimal form of the tools named in ``pinned`` (0 when none is in ``text``):
    the floor a schema segment with pinned tools needs."""
    tools = _parse_tools(text)
    if tools is None or not pinned:
        return 0
    for _ in _steps(tools, lambda rendered: 0):  # every step, in place; no counting needed
        pass
    kept = [t for t in tools if str(_tool_parts(t)[0].get("name", "?")) in pinned]
    return estimate(_signatures(kept)) if kept else 0


def plan_schema(text: str, *, estimate: Estimator = estimate_tokens, least_budget: int = 0) -> SchemaPlan:
    """Every step of :func:`compress_schema` on ``text``, rendered and counted once; only as far as
    the first step that fits ``least_budget`` tokens, when the plan is for budgets of that many or more."""
    tools = _parse_tools(text)
    before = estimate(text)
    if tools is None:
        return SchemaPlan(before, None)
    if 0 < least_budget and before <= least_budget:  # such a cut keeps the text as it is
        return SchemaPlan(before, (), least_budget=before)
    steps: list[tuple[str, str, int]] = []
    for step in _steps(tools, estimate):  # lazily: a step is rendered only when the ones before do not fit
        steps.append(step)
        if 0 < least_budget and step[2] <= least_budget:
            return SchemaPlan(before, tuple(steps), least_budget=step[2])
    return SchemaPlan(before, tuple(steps), tuple(tools))


def cut_schema(
    plan: SchemaPlan, text: str, budget: int, *, estimate: Estimator = estimate_tokens, pinned: Collection[str] = ()
) -> tuple[str, OpRecord]:
    """``compress_schema(text, budget)`` from the plan of ``text``: the first step that fits. The
    budget must be at least the plan's ``least_budget``."""
    if budget < plan.least_budget:
        raise ValueError(f"this schema plan cuts at {plan.least_budget} tokens or more, not at {budget}")
    if plan.before <= budget:
        return text, OpRecord("schema", plan.before, plan.before, "fits")
    if plan.steps is None:
        return extract_lines(text, budget, estimate=estimate)
    done: list[str] = []
    for label, out, tokens in plan.steps:
        done.append(label)
        if tokens <= budget:
            return out, OpRecord("schema", plan.before, tokens, "; ".join(done), {"steps": done})
    return _drop_tools(list(plan.tools), budget, plan.before, done, estimate, pinned)


def _signatures(tools: list[dict[str, Any]]) -> str:
    """One line per tool: ``name(req: type, opt?: type, mode: "a"|"b") - description``."""
    lines = []
    for tool in tools:
        holder, params = _tool_parts(tool)
        props = params.get("properties", {}) if params else {}
        required = set(params.get("required", [])) if params else set()
        args: list[str] = []
        notes: list[str] = []
        for pname, spec in props.items():
            spec = spec if isinstance(spec, dict) else {}
            kind = "|".join(compact_json(v) for v in spec["enum"]) if "enum" in spec else \
                str(spec.get("type", "any"))
            args.append(f"{pname}{'' if pname in required else '?'}: {kind}")
            if isinstance(spec.get("description"), str):  # only risk statements are left by then
                notes.append(f"{pname}: {spec['description']}")
        desc = holder.get("description")
        tail = f" [{'; '.join(notes)}]" if notes else ""
        lines.append(f"{holder.get('name', '?')}({', '.join(args)})" + (f" - {desc}" if desc else "") + tail)
    return "\n".join(lines)
