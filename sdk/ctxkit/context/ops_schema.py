"""Tool schema compression: compact JSON, fewer docs, signatures, fewer tools.

Re-exported by ``ctxkit.context.operators``; see its docstring for the API.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ctxkit.context.ops_common import OpRecord
from ctxkit.context.ops_extract import extract_lines
from ctxkit.context.ops_truncate import _json
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


# Descriptions may be shortened; required parameters, enums, risks and result states may not. A sentence that warns
# of an irreversible, destructive, costly or privacy-affecting action survives every step.
_RISK_WORDS = (
    r"\b(irreversibl\w*|cannot be undone|can't be undone|not be undone|permanent\w*|delet\w*|destr\w*|"
    r"drops?|overwrit\w*|wipes?|purg\w*|truncat\w*|erase\w*|charg\w*|bill\w*|payments?|pays?|costs?|costly|"
    r"spend\w*|refund\w*|money|transfers? funds|invoice\w*|privacy|private|personal data|PII|sensitive|"
    r"secrets?|credentials?|passwords?|publish\w*|sends? (?:an )?e-?mails?|production|prod)\b"
)
RISK = re.compile(
    _RISK_WORDS + r"|不可逆|无法撤销|不可撤销|不能撤销|永久|删除|销毁|覆盖|清空|扣款|收费|计费|付款|支付|转账|"
    r"费用|退款|隐私|个人信息|敏感|密钥|凭证|生产环境|对外发送",
    re.IGNORECASE,
)


def is_risky(sentence: str) -> bool:
    """Whether ``sentence`` states a risk (:data:`RISK`)."""
    return RISK.search(sentence) is not None


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


@dataclass(frozen=True, slots=True)
class SchemaPlan:
    """The budget-independent half of :func:`compress_schema`: every step's rendering and cost.

    ``steps`` is None when the text is not a JSON list of tool objects (then extract_lines
    applies). ``tools`` is the list after the last step, for dropping trailing tools. Make it
    with :func:`plan_schema`, cut it with :func:`cut_schema` (the allocator keeps plans across
    calls); both must use the same estimator.
    """

    before: int
    steps: tuple[tuple[str, str, int], ...] | None  # (label, rendering after the step, its estimate)
    tools: tuple[dict[str, Any], ...] = ()


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
    ]
    for label, step, signatures in steps:
        if step is not None:
            for tool in tools:
                step(tool)
        out = _signatures(tools) if signatures else _json(tools)
        yield label, out, estimate(out)


def _drop_tools(
    tools: list[dict[str, Any]], budget: int, before: int, done: list[str], estimate: Estimator
) -> tuple[str, OpRecord]:
    """Nothing fits after every step: drop trailing tools (from ``tools``, in place) until it does."""
    dropped: list[str] = []
    while tools and estimate(_signatures(tools)) > budget:
        dropped.insert(0, str(_tool_parts(tools.pop())[0].get("name", "?")))
    out = _signatures(tools) if tools else ""
    done.append(f"dropped tools {', '.join(dropped)}")
    return out, OpRecord("schema", before, estimate(out), "; ".join(done), {"steps": done, "dropped_tools": dropped})


def compress_schema(text: str, budget: int, *, estimate: Estimator = estimate_tokens) -> tuple[str, OpRecord]:
    """Compress a JSON list of tool schemas step by step until it fits.

    Names, required parameters, types and enums survive longest: they are what a valid
    call needs. Non-JSON input falls back to :func:`extract_lines`.
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
    return _drop_tools(tools, budget, before, done, estimate)


def plan_schema(text: str, *, estimate: Estimator = estimate_tokens) -> SchemaPlan:
    """Every step of :func:`compress_schema` on ``text``, rendered and counted once."""
    tools = _parse_tools(text)
    if tools is None:
        return SchemaPlan(estimate(text), None)
    steps = tuple(_steps(tools, estimate))
    return SchemaPlan(estimate(text), steps, tuple(tools))


def cut_schema(
    plan: SchemaPlan, text: str, budget: int, *, estimate: Estimator = estimate_tokens
) -> tuple[str, OpRecord]:
    """``compress_schema(text, budget)`` from the plan of ``text``: the first step that fits."""
    if plan.before <= budget:
        return text, OpRecord("schema", plan.before, plan.before, "fits")
    if plan.steps is None:
        return extract_lines(text, budget, estimate=estimate)
    done: list[str] = []
    for label, out, tokens in plan.steps:
        done.append(label)
        if tokens <= budget:
            return out, OpRecord("schema", plan.before, tokens, "; ".join(done), {"steps": done})
    return _drop_tools(list(plan.tools), budget, plan.before, done, estimate)


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
            kind = "|".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"]) if "enum" in spec else \
                str(spec.get("type", "any"))
            args.append(f"{pname}{'' if pname in required else '?'}: {kind}")
            if isinstance(spec.get("description"), str):  # only risk statements are left by then
                notes.append(f"{pname}: {spec['description']}")
        desc = holder.get("description")
        tail = f" [{'; '.join(notes)}]" if notes else ""
        lines.append(f"{holder.get('name', '?')}({', '.join(args)})" + (f" - {desc}" if desc else "") + tail)
    return "\n".join(lines)
